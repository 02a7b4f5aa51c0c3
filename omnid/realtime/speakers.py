"""Who is speaking in a live realtime session: the session's audio fed, as it arrives, to a live stream of its
speaker diarization model (the streaming rule the diarization socket serves), and each final's span given the
speaker with the most probability over its 80 ms frames (runtime/speakers.py's rule for files).

The session's timeline is cut into 80 ms frames from its first sample; a feed of k frames passes the model
k x 1280 - 1 samples, for which a feed's own features give exactly k frames, so frame j of the track always covers
samples [1280 j, 1280 (j + 1)). Feeds gather ``feed_frames`` frames, except that the frames a final asks about are
fed at once (it waits for them, or, where the session sets a wait, for at most that long when the frames already in
the track hear someone in its span). A feed the model cannot take (its queue full, or a failure) leaves its frames
without a speaker, and the stream goes on from the next one.

Bounded: the track keeps only the frames from the oldest span a final may still ask for (``forget_before``), and
audio waiting to be fed beyond ``max_pending_s`` is given up (its frames without a speaker) rather than held.
Labels are "A", "B", ... in the order the finals first name a speaker, and the stream's speaker slots are stable
over the session, so a speaker keeps a label across turns."""

from __future__ import annotations

import asyncio

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.diarization import FRAME_SECONDS, SAMPLES_PER_FRAME, STREAM_FIFO_MAX, STREAM_SPKCACHE_MAX, max_feed_samples
from omnid.runtime import diarization
from omnid.runtime.speakers import LABELS, span_speaker

log = structlog.get_logger(__name__)


class LiveSpeakers:
    """One session's speaker track. The session calls ``append`` with its 16 kHz audio, ``want`` when a segment
    closes, ``speaker`` for a closed segment's (or a sentence's) span, ``forget_before`` as finals go out, and
    ``close`` at its end."""

    def __init__(self, runtime: diarization.Runtime, feed_s: float, threshold: float, max_pending_s: float):
        engine = runtime.engine
        self.runtime = runtime
        self.stream = engine.new_stream()
        most = (max_feed_samples(engine) + 1) // SAMPLES_PER_FRAME  # a feed of k frames passes k x 1280 - 1 samples
        self.feed_frames = max(1, min(most, round(feed_s / FRAME_SECONDS)))
        self.threshold = threshold
        self.max_pending = int(max_pending_s * SAMPLE_RATE)
        self.pending = np.zeros(0, np.float32)  # audio after the frames fed so far
        self.fed = 0  # frames of the timeline with a row in the track (fed, or given up)
        self.first = 0  # the frame of track[0]
        self.track: np.ndarray | None = None  # (frames, speakers) probabilities from frame ``first``
        self.wanted = 0  # frames a final waits for: fed as soon as they are whole
        self.keep_from = 0  # no final asks about frames before this one
        self.labels: dict[int, str] = {}
        self.last_label: str | None = None
        self._fed = asyncio.Condition()
        self._task: asyncio.Task | None = None

    # --- audio in ---------------------------------------------------------------------------------------------

    def append(self, samples: np.ndarray) -> None:
        self.pending = np.concatenate([self.pending, samples.astype(np.float32, copy=False)])
        if len(self.pending) > self.max_pending:
            self._give_up((len(self.pending) - self.max_pending) // SAMPLES_PER_FRAME + 1)
        self._kick()

    def want(self, end: int) -> None:
        """A segment closed at sample ``end``: its whole frames are fed now, without waiting for a full feed."""
        self.wanted = max(self.wanted, end // SAMPLES_PER_FRAME)
        self._kick()

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            if self._ready() > 0:
                self._task = asyncio.ensure_future(self._feed_all())

    def _ready(self) -> int:
        """Frames to feed now (0: wait for more audio)."""
        whole = len(self.pending) // SAMPLES_PER_FRAME
        return min(whole, self.feed_frames) if whole >= self.feed_frames or self.fed < self.wanted else 0

    async def _feed_all(self) -> None:
        while (k := self._ready()) > 0:
            chunk, self.pending = self.pending[: k * SAMPLES_PER_FRAME], self.pending[k * SAMPLES_PER_FRAME :]
            try:
                rows = await diarization.feed(self.runtime, self.stream, chunk[:-1], STREAM_SPKCACHE_MAX, STREAM_FIFO_MAX)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001  (a lost feed costs its frames their speaker, not the session)
                log.warning("speakers_feed_failed", error=type(exc).__name__, frames=k)
                rows = None
            await self._add(rows, k)

    def _give_up(self, frames: int) -> None:
        """The oldest waiting audio is dropped (the model fell behind): its frames get no speaker."""
        frames = min(frames, len(self.pending) // SAMPLES_PER_FRAME)
        if frames <= 0:
            return
        log.warning("speakers_behind", frames=frames)
        self.pending = self.pending[frames * SAMPLES_PER_FRAME :]
        self._rows(None, frames)

    async def _add(self, rows: np.ndarray | None, frames: int) -> None:
        self._rows(rows, frames)
        async with self._fed:
            self._fed.notify_all()

    def _rows(self, rows: np.ndarray | None, frames: int) -> None:
        """The track grows by ``frames`` rows: the feed's (cut or padded to its frames), or none's."""
        if rows is not None and self.track is None:
            self.track = np.zeros((self.fed - self.first, rows.shape[1]), np.float32)
        if self.track is not None:
            new = np.zeros((frames, self.track.shape[1]), np.float32)
            if rows is not None:
                new[: min(frames, len(rows))] = rows[:frames]
            self.track = np.concatenate([self.track, new])
        self.fed += frames
        self._trim()

    # --- speakers out -----------------------------------------------------------------------------------------

    async def speaker(self, start: int, end: int, wait_s: float | None = None) -> str | None:
        """The label of the speaker of samples [start, end), once their whole frames are in the track; a span
        where nobody speaks takes the last label given (None before any). With ``wait_s``, after that long the
        frames already in the track decide, where someone speaks in them (the stream's cost per feed can exceed
        a final's own time on a slow machine); a span with no speech in the track yet waits for its frames."""
        self.want(end)
        needed = end // SAMPLES_PER_FRAME
        try:
            async with self._fed:
                await asyncio.wait_for(self._fed.wait_for(lambda: self.fed >= needed), wait_s)
        except TimeoutError:
            if not self._heard(start, end):
                async with self._fed:
                    await self._fed.wait_for(lambda: self.fed >= needed)
        return self.label_now(start, end)

    def _heard(self, start: int, end: int) -> bool:
        """Someone passes the threshold in the track's frames of [start, end)."""
        if self.track is None:
            return False
        first = max(start // SAMPLES_PER_FRAME - self.first, 0)
        rows = self.track[first : max(first, -(-end // SAMPLES_PER_FRAME) - self.first)]
        return bool((rows > self.threshold).any())

    def label_now(self, start: int, end: int) -> str | None:
        """The label of samples [start, end) from the frames already in the track (the rest count as silence)."""
        slot = None
        if self.track is not None:
            offset = self.first * FRAME_SECONDS
            slot = span_speaker(self.track, start / SAMPLE_RATE - offset, end / SAMPLE_RATE - offset, self.threshold)
        if slot is None:
            return self.last_label
        if slot not in self.labels:
            self.labels[slot] = LABELS[len(self.labels) % len(LABELS)]
        self.last_label = self.labels[slot]
        return self.last_label

    def forget_before(self, sample: int) -> None:
        """No final will ask about audio before ``sample``: its frames leave the track (now, or as they come)."""
        self.keep_from = max(self.keep_from, sample // SAMPLES_PER_FRAME)
        self._trim()

    def _trim(self) -> None:
        frame = min(self.keep_from, self.fed)
        if frame > self.first:
            if self.track is not None:
                self.track = self.track[frame - self.first :].copy()
            self.first = frame

    @property
    def frames_held(self) -> int:
        return 0 if self.track is None else len(self.track)

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
