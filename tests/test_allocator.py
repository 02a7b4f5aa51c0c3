"""The heap trimmer: free memory goes back to the system only once no request has been open for its delay."""

from __future__ import annotations

import asyncio
import sys

from omnid.runtime.allocator import HeapTrimmer, _malloc_trim


def test_trims_once_after_the_last_request_and_not_while_one_is_open():
    calls: list[float] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        heap = HeapTrimmer(0.05, release=lambda: calls.append(loop.time()))
        heap.enter()
        heap.enter()
        heap.leave()
        await asyncio.sleep(0.1)
        assert calls == []  # one request still open
        heap.leave()
        left = loop.time()
        heap.enter()  # a new request inside the delay cancels the pending trim
        await asyncio.sleep(0.1)
        assert calls == []
        heap.leave()
        left = loop.time()
        await asyncio.sleep(0.15)
        assert len(calls) == 1 and calls[0] - left >= 0.045
        assert heap.trims == 1
        heap.enter()
        heap.leave()
        heap.close()  # shutting down drops a pending trim
        await asyncio.sleep(0.1)
        assert len(calls) == 1

    asyncio.run(run())


def test_malloc_trim_is_found_on_glibc_and_runs():
    release = _malloc_trim()
    assert (release is not None) == sys.platform.startswith("linux")  # glibc here; macOS's libc has none
    if release is not None:
        release()
