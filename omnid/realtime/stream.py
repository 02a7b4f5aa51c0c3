"""The cache-aware stream strategy (Nemotron): each segment holds one stream of the engine, fed the audio that came
since its last decode, at most one decode in flight; each chunk is encoded once against the stream's caches.

Its text only grows, so a preview is its text whenever it changed and OpenAI deltas are its newly complete words
(GrowingText). The segment is not cut at max_segment_s (the stream's state does not grow), its audio is kept only
until it is fed, and the final flushes the stream's tail after the last decode and carries its timed sentences. In
the Voxt dialect a commit ends the stream and the session's audio (the reference's contract); the session takes
realtime.max_stream_s of audio.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.interface import StreamingEngine, StreamUpdate
from omnid.realtime import events as de
from omnid.realtime.strategy import Decoded, Host, Segment
from omnid.realtime.text import GrowingText
from omnid.runtime import transcription
from omnid.runtime.errors import JobCancelledError, QueueFullError

log = structlog.get_logger(__name__)


@dataclass
class Streamed(Segment):
    """A segment that one engine stream decodes, each sample fed once."""

    stream: Any = None  # the engine's stream (its handle); None once finished
    fed: int = 0  # absolute 16 kHz sample: the stream has the audio before it
    feeding: asyncio.Task | None = None  # its decode in flight
    shown: str = ""  # the stream's text last previewed
    agreement: GrowingText = field(default_factory=GrowingText)
    broken: bool = False  # a decode of its stream failed: the final fails too


@dataclass
class StreamFinal:
    """A segment's final: the decode in flight, then the tail it did not have and the stream's end."""

    strategy: CacheAwareStream
    segment: Streamed
    audio: np.ndarray  # the audio its stream had not been given when it closed
    fed_from: int  # the absolute sample ``audio`` starts at
    seconds: float  # the audio the segment held
    closed_at: float = 0.0

    @property
    def samples(self) -> int:
        return len(self.audio)

    @property
    def agreed(self) -> str:
        return self.segment.agreement.text()

    async def decode(self) -> Decoded:
        update = await self.strategy.finish(self)
        return Decoded(update.text, update.sentences)

    def cancel(self) -> None:
        if self.segment.feeding is not None:
            self.segment.feeding.cancel()  # stops at its next chunk


class CacheAwareStream:
    """The session's open segment fed to one engine stream as it comes; its final only the stream's tail."""

    settings_fixed_by_audio = True  # a stream's settings are fixed by its first audio (the reference's contract)
    timed = True
    segment_limit = None  # a stream's state does not grow: nothing to cut

    def __init__(self, host: Host) -> None:
        self.host = host
        self.segment: Streamed | None = None
        self.finished = False  # the stream was committed (commit_ends_stream): later audio is refused

    @property
    def listens(self) -> bool:
        # A stream with manual turns is fed every sample and ends at the commit: speech probabilities would decide
        # nothing, and Silero's work would take the cores the stream's encoder needs.
        return not self.host.settings.manual

    def admits(self, samples: int) -> bool:
        """Refuses audio after the stream was committed, and past realtime.max_stream_s (the reference's errors:
        the audio is dropped, the session goes on)."""
        h = self.host
        if self.finished:
            h.emit(de.Refused("session_finished", "The stream was committed; audio after it is not decoded."))
            return False
        if (h.input_samples + samples) / h.settings.rate > h.config.max_stream_s:
            h.emit(de.Refused("session_too_long",
                              f"A session takes at most {_duration(h.config.max_stream_s)} of audio."))
            return False
        return True

    def open(self, index: int, item_id: str, start: int) -> Streamed:
        s = self.host.settings
        engine: StreamingEngine = self.host.runtime.engine  # type: ignore[assignment]
        self.segment = Streamed(index, item_id, start, fed=start,
                                stream=engine.open_stream(s.language, s.chunk_ms, start / SAMPLE_RATE))
        return self.segment

    def needed_from(self) -> int | None:
        return self.segment.fed if self.segment is not None else None  # the audio it was fed is gone

    def heard(self, now: int) -> None:
        pass  # a stream's final is only its tail: nothing to start early

    def advance(self) -> None:
        """The open segment's stream gets the audio that came since its last decode, one decode at a time."""
        seg = self.segment
        if seg is None or seg.stream is None or seg.broken or self.host.buffer.end <= seg.fed:
            return
        if seg.feeding is None or seg.feeding.done():
            # The audio is taken now, not when the task first runs: a commit in between consumes the buffer, and
            # its final leaves what this decode feeds to it.
            end = self.host.buffer.end
            seg.feeding = asyncio.ensure_future(self._feed(seg, self.host.buffer.view(seg.fed, end).copy(), end))

    def close(self, end: int) -> StreamFinal:
        seg = self.segment
        assert seg is not None
        self.segment = None
        # The audio its stream has not had yet (a decode in flight has part of it: the final skips that part).
        tail = self.host.buffer.view(seg.fed, end).copy()
        return StreamFinal(self, seg, tail, seg.fed, (end - seg.start) / SAMPLE_RATE)

    def committed(self) -> None:
        if self.host.rules.commit_ends_stream:
            self.finished = True

    def drop(self) -> None:
        if self.segment is not None and self.segment.feeding is not None:
            self.segment.feeding.cancel()
        self.segment = None

    async def _feed(self, seg: Streamed, audio: np.ndarray, end: int) -> None:
        try:
            update = await transcription.stream(self.host.runtime, seg.stream, audio, finish=False)
        except QueueFullError:
            seg.feeding = None
            return  # not queued, so not fed: the next append tries again with more
        except JobCancelledError:
            return  # the daemon is stopping
        except Exception:  # noqa: BLE001  (the stream's state is unknown: its final reports the failure)
            log.warning("stream_failed", segment=seg.index)
            seg.broken = True
            return
        seg.fed = end
        if self.segment is seg and update.text and update.text != seg.shown:
            seg.shown = update.text
            agreed = seg.agreement.update(update.text)
            self.host.emit(de.Preview(segment_id=seg.index, item_id=seg.item_id, text=update.text, agreed=agreed))
        if self.segment is seg:
            seg.feeding = None
            self.host.trim()
            self.advance()

    async def finish(self, job: StreamFinal) -> StreamUpdate:
        """After the decode in flight, the tail it did not have, then the stream's end, at final priority."""
        seg = job.segment
        if seg.feeding is not None:
            await asyncio.wait([seg.feeding])
        if seg.broken:
            raise RuntimeError("a decode of this stream failed")
        audio = job.audio[seg.fed - job.fed_from :]  # what the decode in flight fed is not fed again
        try:
            return await transcription.stream(self.host.runtime, seg.stream, audio, finish=True)
        finally:
            seg.stream = None  # its arrays go with it


def _duration(seconds: float) -> str:
    """A cap in words: "24 hours", "90 seconds"."""
    if seconds % 3600 == 0:
        n, unit = int(seconds // 3600), "hour"
    elif seconds % 60 == 0:
        n, unit = int(seconds // 60), "minute"
    else:
        return f"{seconds:g} seconds"
    return f"{n} {unit}{'s' if n != 1 else ''}"
