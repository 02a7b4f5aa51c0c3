"""Give MLX's CPU backend an optimised BLAS on Linux.

The Linux ``mlx-cpu`` wheel links the netlib reference BLAS, ~50x slower for matmuls. Loading OpenBLAS with
RTLD_GLOBAL before ``mlx.core`` is imported makes MLX's ``cblas_*`` calls resolve to it. This module must not
import MLX itself; ``omnid/__init__.py`` calls :func:`preload` first thing.

A distribution's OpenBLAS picks its kernels by the CPU's model, and one older than the CPU falls back to its
generic SSE3 ones ("Prescott"): Debian 12's 0.3.21 does so on this project's Emerald Rapids VM, where MLX's
float32 products then ran several times slower (bench/blas_kernels.py compares the two). So unless
OPENBLAS_CORETYPE is set, it is set from the instructions the CPU has (AVX-512: SkylakeX's kernels; AVX2 and FMA:
Haswell's, which AMD's Zen cores run too) while this library loads, and restored after, so that numpy's own
OpenBLAS and child processes choose as they would.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from dataclasses import dataclass

# Debian/Ubuntu's libopenblas0-pthread, then other common spellings; OMNID_BLAS overrides.
CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)


@dataclass(frozen=True)
class BlasStatus:
    name: str
    path: str | None
    reason: str


_status: BlasStatus | None = None


def preload() -> BlasStatus:
    """Load OpenBLAS globally once; never fails, only reports."""
    global _status
    if _status is not None:
        return _status
    if sys.platform == "darwin":
        _status = BlasStatus("accelerate/metal", None, "macOS: MLX uses Metal and Accelerate")
    elif os.environ.get("OMNID_BLAS", "").lower() in {"reference", "none", "off"}:
        _status = BlasStatus("reference", None, "OMNID_BLAS disables the OpenBLAS preload")
    elif "mlx.core" in sys.modules:
        _status = BlasStatus("reference", None, "mlx.core was imported before omnid; preload too late")
    else:
        _status = _load_first([os.environ["OMNID_BLAS"]] if os.environ.get("OMNID_BLAS") else list(CANDIDATES))
    return _status


AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"})


def coretype(flags: frozenset[str], machine: str) -> str | None:
    """OpenBLAS's kernel family for an x86-64 CPU with these /proc/cpuinfo flags (None: leave it to OpenBLAS)."""
    if machine not in ("x86_64", "amd64"):
        return None
    if AVX512 <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return None


def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def _load_first(paths: list[str]) -> BlasStatus:
    for path in paths:
        if not os.path.exists(path):
            continue
        chosen = None if os.environ.get("OPENBLAS_CORETYPE") else coretype(_cpu_flags(), platform.machine().lower())
        if chosen is not None:
            os.environ["OPENBLAS_CORETYPE"] = chosen  # read once, while the library loads
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return BlasStatus("reference", None, f"could not load {path}: {exc}")
        finally:
            if chosen is not None:
                del os.environ["OPENBLAS_CORETYPE"]
        kernels = f"; {chosen} kernels" if chosen else ""
        return BlasStatus("openblas", path, f"preloaded before mlx.core{kernels}")
    return BlasStatus(
        "reference",
        None,
        "OpenBLAS not found (apt-get install libopenblas0-pthread); MLX runs on its slow reference BLAS",
    )


def status() -> BlasStatus:
    return preload()
