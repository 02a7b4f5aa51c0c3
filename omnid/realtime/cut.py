"""Where to cut an over-long realtime segment: at the quietest moment of its last second, so a word is not split.

With VAD on, "quietest" is the lowest speech probability (its 512-sample windows), ties broken by energy; with VAD
off, the lowest energy over 20 ms frames."""

from __future__ import annotations

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.vad.silero import WINDOW as VAD_WINDOW

ENERGY_FRAME = 320  # 20 ms


def quietest_cut(audio: np.ndarray, search_s: float = 1.0, vad_probs: np.ndarray | None = None) -> int:
    """A cut position (sample index into ``audio``) within its last ``search_s`` seconds. ``vad_probs``, when
    given, are the probabilities of ``audio``'s consecutive 512-sample windows from its start."""
    n = len(audio)
    lo = max(0, n - int(search_s * SAMPLE_RATE))
    if vad_probs is not None and len(vad_probs):
        first = -(-lo // VAD_WINDOW)  # first window wholly inside the search span
        last = min(len(vad_probs), n // VAD_WINDOW)
        if first < last:
            idx = np.arange(first, last)
            energy = np.array([_energy(audio[i * VAD_WINDOW : (i + 1) * VAD_WINDOW]) for i in idx])
            best = idx[np.lexsort((energy, vad_probs[first:last]))[0]]
            return int(best * VAD_WINDOW + VAD_WINDOW // 2)
    starts = np.arange(lo, n - ENERGY_FRAME + 1, ENERGY_FRAME)
    if len(starts) == 0:
        return n
    energy = np.array([_energy(audio[s : s + ENERGY_FRAME]) for s in starts])
    return int(starts[int(np.argmin(energy))] + ENERGY_FRAME // 2)


def _energy(x: np.ndarray) -> float:
    return float(np.mean(np.square(x, dtype=np.float64))) if len(x) else 0.0
