"""Memory handed back once a request is done.

glibc's malloc, left to itself, raises its mmap threshold after the first large buffer is freed (up to 32 MiB), so
every later request-sized buffer (an upload, its decoded audio, a 900 kB WebSocket frame) comes from the heap, and
the heap stays resident after they are freed: each round of hostile requests left the daemon ~40-190 MB larger.
A fixed threshold makes every large buffer its own mapping, returned to the system as soon as it is freed.
Elsewhere (macOS's allocator, musl) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# Buffers at least this large get their own mapping; the heap is trimmed when this much is free at its top.
LARGE_BUFFER_BYTES = 128 * 1024


def return_large_buffers() -> bool:
    """Fixes glibc's mmap and trim thresholds; True when the C library took them."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, LARGE_BUFFER_BYTES))
