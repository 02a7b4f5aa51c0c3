"""What float32 arithmetic costs at least on this machine, for the speed benches' floors: the BLAS's speed at a
model's matrix shapes (numpy's OpenBLAS on every core, as omnid's numpy layers call it) and the speed a
matrix-vector product reads memory at. A bench multiplies them by its model's work (multiply-adds, bytes read) to
print the least time any float32 implementation on these cores could take beside what a target allows."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

import numpy as np


def median_s(f: Callable[[], object], runs: int = 7) -> float:
    """The median of ``runs`` timed calls after one untimed."""
    f()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        f()
        times.append(time.perf_counter() - started)
    return sorted(times)[runs // 2]


def blas_gflops(shapes: Iterable[tuple[int, int]], rows: int) -> float:
    """The best GFLOP/s of (rows, k) @ (k, n) over the (k, n) shapes: an upper bound of what products of those
    shapes reach here."""
    rng = np.random.default_rng(0)
    best = 0.0
    for k, n in sorted(set(shapes)):
        x, w = (rng.standard_normal(s).astype(np.float32) for s in ((rows, k), (k, n)))
        best = max(best, 2 * rows * k * n / median_s(lambda: x @ w) / 1e9)  # noqa: B023
    return best


def read_gbs() -> float:
    """GB/s a matrix-vector product over 512 MB of float32 reads its matrix at."""
    rng = np.random.default_rng(0)
    big, vec = rng.standard_normal((16384, 8192)).astype(np.float32), rng.standard_normal(8192).astype(np.float32)
    return big.nbytes / median_s(lambda: big @ vec) / 1e9
