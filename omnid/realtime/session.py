"""One realtime session: audio in, VAD-gated segments, live previews and one final per segment out.

The session owns its audio buffer (only the open segment, or in server-VAD mode the prefix padding, is kept), a
Silero VAD stream state, the open segment, the finals waiting for the engine and a few counters; nothing else
grows with its length. It knows audio, VAD and an engine handle, never the socket: events leave through ``send``.

Scheduling: a final per closed segment, in order, at FINAL priority; at most one preview in flight, at PREVIEW
priority, started only when enough new audio has come; a preview is cancelled when its segment closes, and one
that cannot be queued is skipped, so a machine that falls behind thins previews and never loses a final.

A cache-aware engine (Nemotron) has no previews to schedule: each segment holds one stream, fed the audio that came
since its last decode, at most one decode in flight; its text only grows, and is shown whenever it changed. The
segment is not cut at max_segment_s (the stream's state does not grow), its audio is kept only until it is fed, and
the final flushes the stream's tail after the last decode. In the Voxt dialect a commit ends the stream and the
session's audio (the reference's contract); the session takes realtime.max_stream_s of audio.

With server VAD the final starts before the turn is over: once speech has paused for ``speculate_after_ms``
(``loaded_speculate_after_ms`` while other work is on the model) the segment so far is decoded at FINAL
priority (a speculation); speech resuming cancels it, the turn ending makes its result the final. While one is
pending no preview starts, so the text it continues cannot grow under it. While other sessions' finals keep the
model busy there is no preview and no speculation, and finals take the cheaper window (``busy_finals``,
``busy_final_window``), so a loaded model catches up instead of falling further behind.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.config import RealtimeConfig, TranscriptionConfig
from omnid.engine.interface import Hypothesis, Sentence, StreamingEngine, StreamUpdate, TranscriptionEngine
from omnid.logging import content
from omnid.realtime import events as de
from omnid.realtime.buffer import AudioBuffer, BufferOverflow
from omnid.realtime.cut import quietest_cut
from omnid.realtime.events import DomainEvent, TurnRules
from omnid.realtime.settings import Settings
from omnid.realtime.text import GrowingText, LocalAgreement, join_segments
from omnid.runtime import transcription
from omnid.runtime.errors import JobCancelledError, QueueFullError
from omnid.runtime.models import transcribe_options
from omnid.runtime.scheduler import EngineRuntime, Priority
from omnid.vad.batcher import VadBatcher
from omnid.vad.segments import TurnDetector
from omnid.vad.silero import WINDOW
from omnid.vad.stream import VadStream

log = structlog.get_logger(__name__)



class SessionError(Exception):
    """Ends the session: the connection sends this error, then closes."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def new_item_id() -> str:
    return "item_" + secrets.token_hex(10)


@dataclass
class Segment:
    index: int  # Voxt segment_id, from 0
    item_id: str  # OpenAI item id
    start: int  # absolute 16 kHz sample
    speech_at: int | None = None  # first window above the speech threshold
    previewed_to: int | None = None  # buffer end at the last preview
    agreement: LocalAgreement | GrowingText = field(default_factory=lambda: LocalAgreement(hold_back=1))
    hypothesis: Hypothesis | None = None  # a re-decoding engine's last decode of this segment
    stream: object | None = None  # a cache-aware engine's stream (its handle); None once finished
    fed: int = 0  # absolute 16 kHz sample: the stream has the audio before it
    feeding: asyncio.Task | None = None  # its decode in flight
    shown: str = ""  # the stream's text last previewed
    broken: bool = False  # a decode of its stream failed: the final fails too


@dataclass
class FinalJob:
    segment: Segment
    audio: np.ndarray
    prefix: str  # text already sent as deltas: the final continues it
    closed_at: float  # monotonic time the segment ended (latency is measured from here)
    decode: asyncio.Future[str] | None = None  # started before the segment closed (a speculation)
    seconds: float | None = None  # audio the segment held, where ``audio`` is only its unfed tail (a stream)
    fed_from: int = 0  # a stream's: the absolute sample ``audio`` starts at

    @property
    def end(self) -> int:
        """Absolute 16 kHz sample where its audio ends."""
        return self.segment.start + len(self.audio)


class Session:
    def __init__(
        self,
        rules: TurnRules,
        settings: Settings,
        config: RealtimeConfig,
        transcription: TranscriptionConfig,
        engines: Mapping[str, EngineRuntime[TranscriptionEngine]],
        vad: VadBatcher,
        emit: Callable[[DomainEvent], None],
    ):
        self.rules = rules
        self.config = config
        self.transcription = transcription
        self.engines = engines
        self.vad = vad
        self.emit = emit
        self.settings = settings
        self.cache_aware = self._streams(settings)
        self.buffer = AudioBuffer(settings.rate, config.max_backlog_s)
        self.vad_stream = VadStream()
        # Window probabilities of about the last second: where an over-long segment is cut.
        self.recent: collections.deque[tuple[int, float]] = collections.deque(
            maxlen=SAMPLE_RATE // WINDOW + 2)
        self.turns = self._detector(settings)
        self.segment: Segment | None = None
        self.segments_opened = 0
        self.uncommitted_from = 0  # OpenAI: where the input buffer starts since the last commit or clear
        self.last_item_id: str | None = None
        self.input_samples = 0  # at the client's rate, for the session length cap
        self.final_texts: list[str] = []  # Voxt: transcription.completed joins them
        self._finals: collections.deque[FinalJob] = collections.deque()
        self._final_samples = 0
        self._final_task: asyncio.Task | None = None
        self._finals_idle = asyncio.Event()
        self._finals_idle.set()
        self._preview: asyncio.Task | None = None
        self._speculation: FinalJob | None = None  # the open segment's final, decoding since its speech paused
        self.speculations = 0  # started so far
        self.prompt_tokens: tuple[int, ...] = ()  # of settings.prompt, for the settings' model
        self.finished = False  # a cache-aware session's stream was committed (commit_ends_stream)
        self.sentences: list[Sentence] = []  # a cache-aware session's finals' sentences (transcription.completed)

    # --- settings ---------------------------------------------------------------------------------------

    @staticmethod
    def _detector(s: Settings) -> TurnDetector | None:
        if s.turns is None:
            return None
        return TurnDetector(s.turns.threshold, s.turns.prefix_padding_ms, s.turns.silence_duration_ms)

    async def update(self, settings: Settings) -> None:
        if (settings.prompt, settings.model) != (self.settings.prompt, self.settings.model):
            self.prompt_tokens = await self._tokenize(settings)
        if settings.rate != self.settings.rate:
            self.buffer = AudioBuffer(settings.rate, self.config.max_backlog_s)  # only before any audio
        if settings.turns != self.settings.turns:
            self.turns = self._detector(settings)
            if self.turns is not None:
                self.turns.window = self.vad_stream.windows
        self.settings = settings
        self.cache_aware = self._streams(settings)

    def _streams(self, s: Settings) -> bool:
        """The model streams (each chunk encoded once) rather than re-decoding segments: asked once per settings,
        not on every append."""
        return self.engines[s.model].engine.capabilities.streaming == "cache_aware"

    async def _tokenize(self, settings: Settings) -> tuple[int, ...]:
        """Once per prompt, on a worker thread (the prompt is capped, but the event loop waits for nobody)."""
        if not settings.prompt:
            return ()
        engine = self.engines[settings.model].engine
        return await asyncio.get_running_loop().run_in_executor(None, engine.prompt_tokens, settings.prompt)

    @property
    def audio_started(self) -> bool:
        return self.input_samples > 0

    @property
    def threshold(self) -> float:
        return self.settings.turns.threshold if self.settings.turns else self.config.vad_threshold

    @property
    def backlog_samples(self) -> int:
        return self.buffer.backlog + self._final_samples

    # --- audio ------------------------------------------------------------------------------------------

    async def append(self, samples: np.ndarray) -> None:
        if self.cache_aware and not self._stream_takes(len(samples)):
            return
        self.input_samples += len(samples)
        if self.input_samples / self.settings.rate > self.config.max_session_s and not self.cache_aware:
            raise SessionError("session_too_long", f"the session is over its {self.config.max_session_s:g} s cap")
        try:
            new = self.buffer.append(samples)
        except BufferOverflow as exc:
            raise SessionError("buffer_overflow", str(exc)) from None
        if self.backlog_samples > self.config.max_backlog_s * SAMPLE_RATE:
            raise SessionError(
                "buffer_overflow",
                f"more than {self.config.max_backlog_s:g} s of audio is waiting to be transcribed",
            )
        await self._analyse(new)

    def _stream_takes(self, samples: int) -> bool:
        """A cache-aware session refuses audio after its stream was committed, and past realtime.max_stream_s (the
        reference's errors: the audio is dropped, the session goes on)."""
        if self.finished:
            self.emit(de.Refused("session_finished", "The stream was committed; audio after it is not decoded."))
            return False
        if (self.input_samples + samples) / self.settings.rate > self.config.max_stream_s:
            self.emit(de.Refused("session_too_long",
                                 f"A session takes at most {_duration(self.config.max_stream_s)} of audio."))
            return False
        return True

    async def _analyse(self, new: np.ndarray) -> None:
        first = self.vad_stream.windows
        # A stream with manual turns is fed every sample and ends at the commit: speech probabilities would decide
        # nothing, and Silero's work would take the cores the stream's encoder needs.
        listen = len(new) and not (self.cache_aware and self.settings.manual)
        probs = await self.vad.feed(self.vad_stream, new) if listen else np.zeros(0, np.float32)
        if self.settings.manual and self.segment is None and self.buffer.end > self.uncommitted_from:
            self._open(self.uncommitted_from)
        for k, p in enumerate(probs, start=first):
            self._window(k, float(p))
        if self.cache_aware:
            self._trim()
            self._maybe_feed()
            return
        self._cut_if_long()
        self._trim()
        self._maybe_preview()

    def _window(self, k: int, p: float) -> None:
        self.recent.append((k, p))
        if self.turns is not None:
            for turn in self.turns.push(np.array([p], np.float32)):
                if turn.kind == "speech_started":
                    self._speech_started(turn.sample)
                else:
                    self._speech_stopped(turn.sample, (k + 1) * WINDOW)
        seg = self.segment
        if seg is not None and seg.speech_at is None and p >= self.threshold and (k + 1) * WINDOW > seg.start:
            seg.speech_at = max(seg.start, k * WINDOW)
        self._speculate((k + 1) * WINDOW)

    def _speculate(self, now: int) -> None:
        """Starts the open segment's final once speech has paused long enough; cancels it when speech resumes."""
        seg = self.segment
        if seg is not None and seg.stream is not None:
            return  # a stream's final is only its tail: nothing to start early
        pause_from = self.turns.silence_from if self.turns is not None else None  # set only inside a turn
        if self._speculation is not None and pause_from is None:
            log.info("speculation_cancelled", segment=self._speculation.segment.index)
            self._drop_speculation()
        if self._speculation is not None or pause_from is None or seg is None or seg.speech_at is None:
            return
        end = min(now, self.buffer.end)
        if now - pause_from < self._speculate_after_ms() * SAMPLE_RATE // 1000 or end <= seg.speech_at:
            return
        if self._busy():
            return  # the final starts when the turn ends
        self._cancel_preview()
        job = self._final_job(seg, self.buffer.view(seg.start, end).copy())
        job.decode = asyncio.ensure_future(self._transcribe_final(job))
        job.decode.add_done_callback(_retrieved)  # a dropped speculation's failure is nobody's to report
        self._speculation = job
        self.speculations += 1

    def _speculate_after_ms(self) -> int:
        """Soon when the model has nothing else to do (this session's own preview aside); later while other work is
        on it, where a speculation that speech cancels is work the others wait behind (a short pause inside a
        sentence is common)."""
        states = self.engines[self.settings.model].request_states
        own = 1 if self._preview is not None and not self._preview.done() else 0
        idle = sum(states.values()) <= own
        return self.config.speculate_after_ms if idle else self.config.loaded_speculate_after_ms

    def _drop_speculation(self) -> None:
        job, self._speculation = self._speculation, None
        if job is not None and job.decode is not None:
            job.decode.cancel()  # a no-op once it is done

    def _speech_started(self, sample: int) -> None:
        seg = self.segment or self._open(max(sample, self.buffer.start, self.uncommitted_from))
        self.emit(de.SpeechStarted(item_id=seg.item_id, audio_start_ms=_ms(seg.start)))

    def _speech_stopped(self, silence_from: int, now: int) -> None:
        seg = self.segment
        if seg is None:
            return
        self.emit(de.SpeechStopped(item_id=seg.item_id, audio_end_ms=_ms(silence_from)))
        # The segment keeps the silence that ended it: Whisper ends its decode more cleanly with it.
        self._close(min(now, self.buffer.end))

    def _open(self, start: int) -> Segment:
        seg = self.segment = Segment(self.segments_opened, new_item_id(), start)
        self.segments_opened += 1
        if self.cache_aware:
            s = self.settings
            engine: StreamingEngine = self.engines[s.model].engine  # type: ignore[assignment]
            seg.stream = engine.open_stream(s.language, s.chunk_ms, start / SAMPLE_RATE)
            seg.fed = start
            seg.agreement = GrowingText()
        return seg

    def _cut_if_long(self) -> None:
        seg = self.segment
        limit = int(self.config.max_segment_s * SAMPLE_RATE)
        if seg is None or self.buffer.end - seg.start < limit:
            return
        end = seg.start + limit
        if seg.speech_at is None:
            # Nothing said yet: drop the oldest silence and keep the segment open, rather than finalise empties.
            seg.start = self.buffer.end - limit // 2
            self.uncommitted_from = max(self.uncommitted_from, seg.start)
            return
        lo = -(-max(seg.start, end - SAMPLE_RATE) // WINDOW) * WINDOW
        probs = np.array([p for k, p in self.recent if lo <= k * WINDOW and (k + 1) * WINDOW <= end], np.float32)
        cut = lo + quietest_cut(self.buffer.view(lo, end), 1.0, probs if len(probs) else None)
        speaking = self.turns is not None and self.turns.in_speech
        self._close(cut)
        if self.settings.manual or speaking:
            opened = self._open(cut)
            after = [p for k, p in self.recent if k * WINDOW >= cut and p >= self.threshold]
            if speaking or after:
                opened.speech_at = cut
            if speaking:
                self.emit(de.SpeechStarted(item_id=opened.item_id, audio_start_ms=_ms(cut)))

    def _trim(self) -> None:
        """Audio before the open segment is consumed (a stream's, once fed); without one, server VAD keeps its
        prefix padding."""
        if self.segment is not None:
            keep = self.segment.fed if self.segment.stream is not None else self.segment.start
        elif self.turns is not None:
            keep = self.buffer.end - self.turns.prefix - 2 * WINDOW
        else:
            keep = self.uncommitted_from
        self.buffer.consume(keep)

    # --- turns ------------------------------------------------------------------------------------------

    async def commit(self) -> bool:
        """input_audio_buffer.commit. Returns False (after sending the error) when there is too little audio."""
        tail = self.buffer.flush()
        if len(tail):
            await self._analyse(tail)
        if self.buffer.end - self.uncommitted_from < self.rules.min_commit_samples:
            self.emit(de.Refused("input_audio_buffer_commit_empty",
                                 "buffer too small: at least 100 ms of audio must be appended before a commit"))
            return False
        if self.segment is None and self.rules.commit_opens_item:
            self._open(self.buffer.end)  # audio without speech: an item whose transcript is empty
        if self.segment is not None:
            self._close(self.buffer.end)
        if self.turns is not None:
            self.turns.end_turn()
        if self.cache_aware and self.rules.commit_ends_stream:
            self.finished = True
        return True

    def clear(self) -> None:
        self._cancel_preview()
        self._drop_speculation()
        if self.segment is not None and self.segment.feeding is not None:
            self.segment.feeding.cancel()
        self.segment = None
        self.buffer.consume(self.buffer.end)
        self.uncommitted_from = self.buffer.end
        if self.turns is not None:
            self.turns.end_turn()
        self.emit(de.Cleared())

    def _close(self, end: int) -> None:
        seg = self.segment
        assert seg is not None
        self._cancel_preview()
        spec = self._speculation
        if spec is not None and end < spec.end:
            self._drop_speculation()  # cut inside the speculated audio: decoded again at the cut
            spec = None
        self._speculation = None
        self.segment = None
        audio = self.buffer.view(seg.fed if seg.stream is not None else seg.start, end).copy()
        self.buffer.consume(end)
        self.uncommitted_from = max(self.uncommitted_from, end)
        self.emit(de.Committed(item_id=seg.item_id, previous_item_id=self.last_item_id))
        self.last_item_id = seg.item_id
        if seg.stream is not None:
            job = self._final_job(seg, audio)  # the audio its stream has not had yet
            job.seconds, job.fed_from = (end - seg.start) / SAMPLE_RATE, seg.fed
        else:
            if seg.speech_at is None or seg.speech_at >= end:
                audio = audio[:0]  # no speech: it finalises to empty text without the model
            # A speculation holds the turn up to where its speech paused; what came after is silence to VAD.
            job = spec if spec is not None else self._final_job(seg, audio)
        job.closed_at = time.monotonic()
        self._finals.append(job)
        self._final_samples += len(job.audio)
        self._finals_idle.clear()
        if self._final_task is None or self._final_task.done():
            self._final_task = asyncio.ensure_future(self._run_finals())

    # --- finals -----------------------------------------------------------------------------------------

    def _final_job(self, seg: Segment, audio: np.ndarray) -> FinalJob:
        prefix = seg.agreement.text() if self.rules.append_only else ""
        return FinalJob(seg, audio, prefix, time.monotonic())

    async def _run_finals(self) -> None:
        while self._finals:
            job = self._finals[0]
            said = None
            try:
                if job.segment.stream is not None:
                    update = await self._stream_final(job)
                    text, said = update.text, update.sentences
                elif job.decode is not None:
                    text = await job.decode
                else:
                    text = await self._transcribe_final(job) if len(job.audio) else ""
            except (asyncio.CancelledError, JobCancelledError):
                return
            except Exception as exc:  # noqa: BLE001  (any engine failure drops the segment, never commits it empty)
                log.warning("final_failed", error=type(exc).__name__)
                self._failed(job, exc)
            else:
                self._final(job, text, said)
            finally:
                if self._finals and self._finals[0] is job:
                    self._finals.popleft()
                    self._final_samples -= len(job.audio)
        self._finals_idle.set()

    def _busy(self) -> bool:
        """Other finals keep the model busy (realtime.busy_finals)."""
        return self.engines[self.settings.model].in_flight(Priority.FINAL) > self.config.busy_finals

    async def _transcribe_final(self, job: FinalJob) -> str:
        s = self.settings
        window = self.config.busy_final_window if self._busy() else None
        opts = transcribe_options(self.transcription, language=s.language, prompt=s.prompt,
                                  prompt_tokens=self.prompt_tokens, window=window)
        # Deltas already sent never change: the final continues the text they hold.
        return await transcription.final(self.engines[s.model], job.audio, opts, job.prefix)

    def _final(self, job: FinalJob, text: str, sentences: tuple[Sentence, ...] | None = None) -> None:
        seg = job.segment
        if self.rules.keeps_text:
            self.final_texts.append(text)
            self.sentences += sentences or ()
        seconds = job.seconds if job.seconds is not None else len(job.audio) / SAMPLE_RATE
        self.emit(de.Final(segment_id=seg.index, item_id=seg.item_id, text=text, agreed=seg.agreement.text(),
                           seconds=seconds, sentences=sentences))
        log.info("segment_final", segment=seg.index, chars=len(text),
                 latency_s=round(time.monotonic() - job.closed_at, 3), **content(text))

    def _failed(self, job: FinalJob, exc: Exception) -> None:
        self.emit(de.Failed(segment_id=job.segment.index, item_id=job.segment.item_id,
                            busy=isinstance(exc, QueueFullError)))

    async def drain(self) -> str:
        """Waits for every final; returns the session's text (Voxt's transcription.completed)."""
        await self._finals_idle.wait()
        return join_segments(self.final_texts)

    # --- streams ----------------------------------------------------------------------------------------

    def _maybe_feed(self) -> None:
        """The open segment's stream gets the audio that came since its last decode, one decode at a time."""
        seg = self.segment
        if seg is None or seg.stream is None or seg.broken or self.buffer.end <= seg.fed:
            return
        if seg.feeding is None or seg.feeding.done():
            # The audio is taken now, not when the task first runs: a commit in between consumes the buffer, and
            # its final leaves what this decode feeds to it.
            end = self.buffer.end
            seg.feeding = asyncio.ensure_future(self._feed(seg, self.buffer.view(seg.fed, end).copy(), end))

    async def _feed(self, seg: Segment, audio: np.ndarray, end: int) -> None:
        try:
            update = await transcription.stream(self.engines[self.settings.model], seg.stream, audio, finish=False)
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
            assert isinstance(seg.agreement, GrowingText)
            agreed = seg.agreement.update(update.text)
            self.emit(de.Preview(segment_id=seg.index, item_id=seg.item_id, text=update.text, agreed=agreed))
        self._after_feed(seg)

    def _after_feed(self, seg: Segment) -> None:
        if self.segment is seg:
            seg.feeding = None
            self._trim()
            self._maybe_feed()

    async def _stream_final(self, job: FinalJob) -> StreamUpdate:
        """After the decode in flight, the tail it did not have, then the stream's end, at final priority."""
        seg = job.segment
        if seg.feeding is not None:
            await asyncio.wait([seg.feeding])
        if seg.broken:
            raise RuntimeError("a decode of this stream failed")
        audio = job.audio[seg.fed - job.fed_from :]  # what the decode in flight fed is not fed again
        try:
            return await transcription.stream(self.engines[self.settings.model], seg.stream, audio, finish=True)
        finally:
            seg.stream = None  # its arrays go with it

    # --- previews ---------------------------------------------------------------------------------------

    def _maybe_preview(self) -> None:
        seg = self.segment
        if seg is None or seg.speech_at is None or (self._preview is not None and not self._preview.done()):
            return
        if self._speculation is not None:
            return  # the final is decoding: its prefix must not grow, and its result supersedes any preview
        if self._busy():
            return  # other sessions' finals come first: a preview now would only delay them
        end = self.buffer.end
        if seg.previewed_to is None:
            due = end - seg.speech_at >= self.config.first_preview_s * SAMPLE_RATE
        else:
            due = end - seg.previewed_to >= self.config.preview_interval_s * SAMPLE_RATE
        if due:
            seg.previewed_to = end
            audio = self.buffer.view(seg.start, end).copy()
            self._preview = asyncio.ensure_future(self._run_preview(seg, audio))

    async def _run_preview(self, seg: Segment, audio: np.ndarray) -> None:
        runtime = self.engines[self.settings.model]
        s = self.settings
        opts = transcribe_options(self.transcription, language=s.language, prompt=s.prompt,
                                  prompt_tokens=self.prompt_tokens, window=self.config.preview_window, temperature=0.0)
        opts = replace(opts, temperature_increment=0.0)  # a preview is never worth a retry
        try:
            if runtime.engine.capabilities.streaming == "redecode":
                seg.hypothesis = await transcription.redecode(runtime, audio, opts, seg.hypothesis)
                text = seg.hypothesis.text
            else:
                text = await transcription.preview(runtime, audio, opts, seg.agreement.text())
        except (QueueFullError, JobCancelledError):
            return  # the machine is behind: this preview is skipped, the next one will be fresher
        except Exception:  # noqa: BLE001  (a failed preview costs only that preview)
            log.warning("preview_failed")
            return
        if self.segment is not seg:
            return  # stale: its segment has closed
        # A hypothesis of the first moments of speech is too unsure to build on (tiny models lowercase a
        # sentence start, drop its punctuation): it is shown, and only the next one may agree with it.
        stable = seg.speech_at is not None and seg.start + len(audio) - seg.speech_at >= self.config.stable_after_s * SAMPLE_RATE
        assert isinstance(seg.agreement, LocalAgreement)
        if stable:
            agreed = seg.agreement.update(text)
        else:
            seg.agreement.observe(text)
            agreed = ""
        self.emit(de.Preview(segment_id=seg.index, item_id=seg.item_id, text=text, agreed=agreed))

    def _cancel_preview(self) -> None:
        if self._preview is not None and not self._preview.done():
            self._preview.cancel()
        self._preview = None

    # --- end --------------------------------------------------------------------------------------------

    def close(self) -> None:
        """The socket is gone: queued and running jobs are cancelled now (a stream's decode at its next chunk)."""
        self._cancel_preview()
        self._drop_speculation()
        for seg in [self.segment, *(job.segment for job in self._finals)]:
            if seg is not None and seg.feeding is not None:
                seg.feeding.cancel()
        if self._final_task is not None and not self._final_task.done():
            self._final_task.cancel()
        for job in self._finals:
            if job.decode is not None:
                job.decode.cancel()
        self._finals.clear()
        self._final_samples = 0


def _retrieved(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()


def _ms(sample: int) -> int:
    return sample * 1000 // SAMPLE_RATE


def _duration(seconds: float) -> str:
    """A cap in words: "24 hours", "90 seconds"."""
    if seconds % 3600 == 0:
        n, unit = int(seconds // 3600), "hour"
    elif seconds % 60 == 0:
        n, unit = int(seconds // 60), "minute"
    else:
        return f"{seconds:g} seconds"
    return f"{n} {unit}{'s' if n != 1 else ''}"
