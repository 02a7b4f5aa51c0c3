"""Coalesces VAD work from many streams into one batched job on the VAD engine's runtime.

Every ``feed`` that arrives while a batch is being assembled (one event-loop turn) or while the previous batch
runs joins the next batch, so N busy streams cost about one MLX call per window step instead of N.
"""

from __future__ import annotations

import asyncio

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.jobs import JobRunner, Priority
from omnid.vad.silero import SileroVAD
from omnid.vad.stream import VadStream, feed_many

Pending = tuple[VadStream, np.ndarray, asyncio.Future]  # a feed waiting for its batch, and its waiter


class VadBatcher:
    def __init__(self, runtime: JobRunner[SileroVAD]):  # the VAD engine's runtime (runtime/scheduler.py)
        self.runtime = runtime
        self._pending: list[Pending] = []
        self._flushing = False

    async def feed(self, stream: VadStream, samples: np.ndarray) -> np.ndarray:
        future = asyncio.get_running_loop().create_future()
        self._pending.append((stream, samples, future))
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._flush()))
        return await future

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._take_batch()
                feeds = [(s, x) for s, x, _ in batch]
                try:
                    results: list[np.ndarray] = await self.runtime.submit(
                        lambda check, feeds=feeds: feed_many(self.runtime.engine, feeds), Priority.FINAL,  # type: ignore[misc]
                        audio_s=sum(len(x) for _, x in feeds) / SAMPLE_RATE,
                    )
                except Exception as exc:  # every waiter of the batch hears of it
                    for _, _, f in batch:
                        if not f.done():
                            f.set_exception(exc)
                    continue
                for (_, _, f), probs in zip(batch, results):
                    if not f.done():
                        f.set_result(probs)
        finally:
            self._flushing = False

    def _take_batch(self) -> tuple[list[Pending], list[Pending]]:
        """One entry per stream per batch (a stream's windows are sequential); later feeds wait their turn."""
        batch: list[Pending] = []
        rest: list[Pending] = []
        seen: set[int] = set()
        for item in self._pending:
            key = id(item[0])
            (rest if key in seen else batch).append(item)
            seen.add(key)
        return batch, rest
