"""From the classes Qwen3-ForcedAligner predicts at its ``<timestamp>`` slots to monotonic times, as the official
package turns them (qwen-asr 0.0.6, ``fix_timestamp`` and ``Qwen3ForcedAligner.align``): each class is that many
segments of ``segment_ms``; the longest non-decreasing subsequence is kept; a run of at most two values off it takes
its nearer kept neighbour (the left one on a tie), a longer run is spread evenly between the kept values around it;
whole milliseconds (truncated), then seconds rounded to three decimals."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def monotonic(values: Sequence[float]) -> list[int]:
    """fix_timestamp: the values made non-decreasing, truncated to integers."""
    data = [float(v) for v in values]
    n = len(data)
    if n == 0:
        return []
    kept = _longest_non_decreasing(np.array(data, dtype=np.float64))
    result = data.copy()
    i = 0
    while i < n:
        if kept[i]:
            i += 1
            continue
        j = i
        while j < n and not kept[j]:
            j += 1
        left = next((result[k] for k in range(i - 1, -1, -1) if kept[k]), None)
        right = next((result[k] for k in range(j, n) if kept[k]), None)
        for k in range(i, j):
            if left is None or right is None:
                result[k] = left if right is None else right  # type: ignore[assignment]
            elif j - i <= 2:
                result[k] = left if k - (i - 1) <= j - k else right
            else:
                result[k] = left + (right - left) / (j - i + 1) * (k - i + 1)
        i = j
    return [int(v) for v in result]


def _longest_non_decreasing(data: np.ndarray) -> list[bool]:
    """Which values the official O(n^2) search keeps: for each value the longest chain ending there, its parent the
    first earlier value (not greater) with the longest chain; the chain ending at the first longest is kept.
    Each value's search is one vectorised pass over those before it."""
    n = len(data)
    length = np.ones(n, dtype=np.int64)
    parent = np.full(n, -1, dtype=np.int64)
    for i in range(1, n):
        candidates = np.where(data[:i] <= data[i], length[:i], 0)
        best = int(candidates.max())
        if best > 0:
            length[i] = best + 1
            parent[i] = int(np.argmax(candidates))  # the first index with the longest chain
    kept = [False] * n
    idx = int(np.argmax(length))
    while idx != -1:
        kept[idx] = True
        idx = int(parent[idx])
    return kept


def seconds(classes: Sequence[int], segment_ms: float) -> list[float]:
    """The slots' times in seconds: classes x segment_ms, made monotonic, in whole ms, rounded as the official."""
    return [round(ms / 1000.0, 3) for ms in monotonic([c * segment_ms for c in classes])]
