"""Give MLX's CPU backend an optimised BLAS on Linux.

The Linux ``mlx-cpu`` wheel links the netlib reference BLAS, ~50x slower for matmuls. Loading OpenBLAS with
RTLD_GLOBAL before ``mlx.core`` is imported makes MLX's ``cblas_*`` calls resolve to it. This module must not
import MLX itself; ``omnid/__init__.py`` calls :func:`preload` first thing.
"""

from __future__ import annotations

import ctypes
import os
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


def _load_first(paths: list[str]) -> BlasStatus:
    for path in paths:
        if not os.path.exists(path):
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            return BlasStatus("reference", None, f"could not load {path}: {exc}")
        return BlasStatus("openblas", path, "preloaded before mlx.core")
    return BlasStatus(
        "reference",
        None,
        "OpenBLAS not found (apt-get install libopenblas0-pthread); MLX runs on its slow reference BLAS",
    )


def status() -> BlasStatus:
    return preload()
