"""Memory handed back to the system once the daemon is idle.

glibc's malloc keeps freed memory in its heaps: after a round of large requests (an upload, its decoded audio, a
900 kB WebSocket frame) the daemon stayed ~40-190 MB larger. Fixing the mmap threshold low instead (every large
buffer its own mapping, unmapped when freed) returns that memory at once but makes every large temporary a fresh
mapping to page-fault: it made a Sortformer feed ~40% slower in the daemon than in a plain process, and costs
Whisper the same way. So malloc keeps its own thresholds (hot buffers are reused, warm), and ``malloc_trim`` hands
every free page of every heap back when no request has been open for a moment (HeapTrimmer). Elsewhere (macOS's
allocator, musl) there is nothing to trim and the trimmer does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import time
from typing import Any, Callable

import structlog

log = structlog.get_logger("omnid.allocator")


def _glibc(symbol: str) -> Any:
    """A function of the C library, or None where it has none (macOS's libc has no malloc_trim or mallopt)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), symbol)
    except (OSError, AttributeError):
        return None


def _malloc_trim() -> Callable[[], None] | None:
    trim = _glibc("malloc_trim")
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int

    def release() -> None:
        trim(0)

    return release


# glibc's mallopt parameter for the number of heaps ("arenas"), and the daemon's value. By default each thread that
# meets a busy heap gets one of its own, up to 8 per core; the numpy layers' pool threads (engine/cpu_math.py) then
# keep freed temporaries in heaps of their own, and a daemon that had served 50 realtime sessions stayed 24-57 MB
# above its level after warm-up (tests/test_memory.py, bound 30 MB), against 5-7 MB with a single heap.
M_ARENA_MAX = -8
ARENAS = 1


def limit_arenas() -> bool:
    """Caps glibc's heaps at ARENAS (call it before the engines' threads start); False where there is no glibc."""
    mallopt = _glibc("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, ARENAS))


class HeapTrimmer:
    """Counts open requests; ``delay_s`` after the count falls to zero (and stays there), the C heaps' free pages
    go back to the system. Open WebSocket sessions are open requests, so a live stream never pays for re-faulting
    its buffers."""

    def __init__(self, delay_s: float, release: Callable[[], None] | None = None):
        self.delay_s = delay_s
        self._release = release if release is not None else _malloc_trim()
        self._open = 0
        self._pending: asyncio.TimerHandle | None = None
        self.trims = 0

    @property
    def available(self) -> bool:
        return self._release is not None

    def enter(self) -> None:
        self._open += 1
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def leave(self) -> None:
        self._open -= 1
        if self._open == 0 and self._release is not None:
            self._pending = asyncio.get_running_loop().call_later(self.delay_s, self._trim)

    def _trim(self) -> None:
        self._pending = None
        if self._open or self._release is None:
            return
        started = time.perf_counter()
        self._release()
        self.trims += 1
        log.debug("heap_trimmed", duration_ms=round(1000 * (time.perf_counter() - started), 2))

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
