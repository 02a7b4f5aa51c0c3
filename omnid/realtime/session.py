"""One realtime session: audio in, VAD-gated segments, live previews and one final per segment out.

The session owns its audio buffer (only the open segment, or in server-VAD mode the prefix padding, is kept), a
Silero VAD stream state, the turns, the finals waiting for the engine and a few counters; nothing else grows with its
length. It knows audio, VAD and an engine handle, never the socket: events leave through ``emit``.

How the open segment becomes previews and a final is the strategy of its model's streaming mode (realtime/strategy.py):
the session opens and closes segments, cuts one that grows too long where its strategy allows, and sends the finals
in order, one per closed segment, each at FINAL priority.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import time
from collections.abc import Callable, Mapping

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.config import RealtimeConfig, TranscriptionConfig
from omnid.engine.interface import Sentence, TranscriptionEngine
from omnid.logging import content
from omnid.realtime import events as de
from omnid.realtime.buffer import AudioBuffer, BufferOverflow
from omnid.realtime.cut import quietest_cut
from omnid.realtime.events import DomainEvent, TurnRules
from omnid.realtime.redecode import ReDecoding
from omnid.realtime.settings import Settings
from omnid.realtime.speakers import LiveSpeakers
from omnid.realtime.strategy import Decoded, FinalJob, Host, Segment, SessionError, Strategy
from omnid.realtime.stream import CacheAwareStream
from omnid.realtime.text import join_segments
from omnid.runtime import diarization, request_rules
from omnid.runtime.errors import JobCancelledError, QueueFullError
from omnid.runtime.scheduler import EngineRuntime
from omnid.vad.batcher import VadBatcher
from omnid.vad.segments import TurnDetector
from omnid.vad.silero import WINDOW
from omnid.vad.stream import VadStream

__all__ = ["Session", "SessionError"]

log = structlog.get_logger(__name__)

# The strategy of each streaming mode (engine/interface.py's Capabilities.streaming): a new mode is a new entry.
STRATEGIES: dict[str, Callable[[Host], Strategy]] = {
    "forced_prefix": ReDecoding,
    "redecode": ReDecoding,
    "cache_aware": CacheAwareStream,
}


def new_item_id() -> str:
    return "item_" + secrets.token_hex(10)


class Session:
    """One client's realtime session (see the module's docstring); the connection calls update, append, commit,
    clear, drain and close."""

    def __init__(
        self,
        rules: TurnRules,
        settings: Settings,
        config: RealtimeConfig,
        transcription: TranscriptionConfig,
        engines: Mapping[str, EngineRuntime[TranscriptionEngine]],
        vad: VadBatcher,
        emit: Callable[[DomainEvent], None],
        diarizer: diarization.Runtime | None = None,
    ) -> None:
        self.rules = rules
        self.config = config
        self.transcription = transcription
        self.engines = engines
        self.vad = vad
        self.emit = emit
        self.diarizer = diarizer  # the diarization model's runtime, for a session that asks for speakers
        self.speakers: LiveSpeakers | None = None  # its live speaker stream, while speakers are on
        self.settings = settings
        self.buffer = AudioBuffer(settings.rate, config.max_backlog_s)
        self.vad_stream = VadStream()
        # Window probabilities of about the last second: where an over-long segment is cut.
        self.recent: collections.deque[tuple[int, float]] = collections.deque(
            maxlen=SAMPLE_RATE // WINDOW + 2)
        self.turns = self._detector(settings)
        self.segments_opened = 0
        self.uncommitted_from = 0  # OpenAI: where the input buffer starts since the last commit or clear
        self.last_item_id: str | None = None
        self.input_samples = 0  # at the client's rate, for the session length cap
        self.final_texts: list[str] = []  # Voxt: transcription.completed joins them
        self.sentences: list[Sentence] = []  # the finals' timed sentences, where the strategy has them
        self.sentence_speakers: list[str | None] = []  # and their speakers, where the session asked for them
        self._finals: collections.deque[FinalJob] = collections.deque()
        self._final_samples = 0
        self._final_task: asyncio.Task | None = None
        self._finals_idle = asyncio.Event()
        self._finals_idle.set()
        self.speculations = 0  # finals started before their turn ended, so far
        self.prompt_tokens: tuple[int, ...] = ()  # of settings.prompt, for the settings' model
        self.strategy: Strategy = self._strategy_for(settings)(self)
        self._next_strategy: Strategy | None = None  # the model's, once the open segment has closed
        self._no_language = self._language_missing(settings)  # why audio cannot be decoded yet (None: it can)
        self._told_no_language = False

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
        self._no_language, self._told_no_language = self._language_missing(settings), False
        self._follow_model()
        self._follow_speakers()

    def _follow_speakers(self) -> None:
        """Starts or stops the live speaker stream as the settings say (they change only before the first audio)."""
        if self.settings.speakers and self.speakers is None and self.diarizer is not None:
            c = self.config
            self.speakers = LiveSpeakers(self.diarizer, c.speakers_feed_s, c.speakers_threshold, c.max_backlog_s)
        elif not self.settings.speakers and self.speakers is not None:
            self.speakers.close()
            self.speakers = None

    def _language_missing(self, s: Settings) -> str | None:
        """Why the settings' model cannot decode: it detects no language and the session has named none (possible
        only in a session that never said which, on a default model without a configured language; an update that
        leaves it so is refused). None: it can."""
        try:
            request_rules.language(s.language, self.engines[s.model].engine.capabilities, s.model, "session.language")
        except request_rules.RuleError as exc:
            return exc.message
        return None

    def _strategy_for(self, s: Settings) -> Callable[[Host], Strategy]:
        """Asked once per settings, not on every append (an engine builds its capabilities anew each time)."""
        return STRATEGIES[self.engines[s.model].engine.capabilities.streaming]

    def _follow_model(self) -> None:
        """Takes the strategy of the settings' model. An open segment's state is its strategy's, so a segment open
        under another mode ends under it, and the new strategy starts with the next segment."""
        make = self._strategy_for(self.settings)
        if type(self.strategy) is make:
            self._next_strategy = None
        elif self.segment is None:
            self.strategy, self._next_strategy = make(self), None
        else:
            self._next_strategy = make(self)

    async def _tokenize(self, settings: Settings) -> tuple[int, ...]:
        """Once per prompt, on a worker thread (the prompt is capped, but the event loop waits for nobody)."""
        if not settings.prompt:
            return ()
        engine = self.engines[settings.model].engine
        return await asyncio.get_running_loop().run_in_executor(None, engine.prompt_tokens, settings.prompt)

    @property
    def runtime(self) -> EngineRuntime[TranscriptionEngine]:
        return self.engines[self.settings.model]

    @property
    def segment(self) -> Segment | None:
        return self.strategy.segment

    @property
    def audio_started(self) -> bool:
        return self.input_samples > 0

    @property
    def settings_fixed(self) -> bool:
        """Settings apply only before the first audio (a stream's are its state)."""
        return self.audio_started and self.strategy.settings_fixed_by_audio

    def completed_sentences(self) -> tuple[Sentence, ...] | None:
        """The finals' timed sentences for the session's end, where its strategy times them (else None)."""
        return tuple(self.sentences) if self.strategy.timed else None

    @property
    def threshold(self) -> float:
        return self.settings.turns.threshold if self.settings.turns else self.config.vad_threshold

    @property
    def backlog_samples(self) -> int:
        return self.buffer.backlog + self._final_samples

    # --- audio ------------------------------------------------------------------------------------------

    async def append(self, samples: np.ndarray) -> None:
        if self._no_language is not None:
            # Nothing can be decoded until the session names a language: said once, the audio dropped until then.
            if not self._told_no_language:
                self._told_no_language = True
                self.emit(de.Refused("unsupported_session", self._no_language, "session.language"))
            return
        if not self.strategy.admits(len(samples)):
            return
        self.input_samples += len(samples)
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

    async def _analyse(self, new: np.ndarray) -> None:
        if self.speakers is not None and len(new):
            self.speakers.append(new)
        first = self.vad_stream.windows
        listen = len(new) and self.strategy.listens
        probs = await self.vad.feed(self.vad_stream, new) if listen else np.zeros(0, np.float32)
        if self.settings.manual and self.segment is None and self.buffer.end > self.uncommitted_from:
            self._open(self.uncommitted_from)
        for k, p in enumerate(probs, start=first):
            self._window(k, float(p))
        self._cut_if_long()
        self.trim()
        self.strategy.advance()

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
        self.strategy.heard((k + 1) * WINDOW)

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
        if self._next_strategy is not None:
            self.strategy, self._next_strategy = self._next_strategy, None
        index = self.segments_opened
        self.segments_opened += 1
        return self.strategy.open(index, new_item_id(), start)

    def _cut_if_long(self) -> None:
        seg = self.segment
        limit = self.strategy.segment_limit
        if seg is None or limit is None or self.buffer.end - seg.start < limit:
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

    def trim(self) -> None:
        """Audio before what the open segment needs is consumed; without one, server VAD keeps its prefix
        padding."""
        keep = self.strategy.needed_from()
        if keep is None:
            if self.turns is not None:
                keep = self.buffer.end - self.turns.prefix - 2 * WINDOW
            else:
                keep = self.uncommitted_from
        self.buffer.consume(keep)
        self._forget_speakers()

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
        self.strategy.committed()
        return True

    def clear(self) -> None:
        self.strategy.drop()
        self.buffer.consume(self.buffer.end)
        self.uncommitted_from = self.buffer.end
        if self.turns is not None:
            self.turns.end_turn()
        self.emit(de.Cleared())

    def _close(self, end: int) -> None:
        job = self.strategy.close(end)  # takes its audio from the buffer first
        job.segment.end = end
        self.buffer.consume(end)
        self.uncommitted_from = max(self.uncommitted_from, end)
        seg = job.segment
        self.emit(de.Committed(item_id=seg.item_id, previous_item_id=self.last_item_id))
        self.last_item_id = seg.item_id
        job.closed_at = time.monotonic()
        self._finals.append(job)
        self._final_samples += job.samples
        self._finals_idle.clear()
        if self._final_task is None or self._final_task.done():
            self._final_task = asyncio.ensure_future(self._run_finals())

    # --- finals -----------------------------------------------------------------------------------------

    async def _run_finals(self) -> None:
        while self._finals:
            job = self._finals[0]
            try:
                decoded = await job.decode()
                said = await self._speakers_of(job, decoded.sentences)
            except (asyncio.CancelledError, JobCancelledError):
                return
            except Exception as exc:  # noqa: BLE001  (any engine failure drops the segment, never commits it empty)
                log.warning("final_failed", error=type(exc).__name__)
                self._failed(job, exc)
            else:
                self._final(job, decoded, said)
            finally:
                if self._finals and self._finals[0] is job:
                    self._finals.popleft()
                    self._final_samples -= job.samples
                self._forget_speakers()
        self._finals_idle.set()

    async def _speakers_of(self, job: FinalJob, sentences: tuple[Sentence, ...] | None
                           ) -> tuple[str | None, tuple[str | None, ...] | None]:
        """The segment's speaker and its sentences' (None where the session did not ask), its text being ready:
        from the frames already fed where they hear someone in it and the segment ended speakers_wait_s ago, else
        once its remaining frames are fed. Its last feed is not started beside the decode: on a small CPU the two
        share the cores, and the final would wait for both (bench/live_speakers.py)."""
        seg = job.segment
        if self.speakers is None or seg.end is None:
            return None, None
        wait = max(0.0, job.closed_at + self.config.speakers_wait_s - time.monotonic())
        speaker = await self.speakers.speaker(seg.start, seg.end, wait)
        if sentences is None:
            return speaker, None
        return speaker, tuple(self.speakers.label_now(round(x.start * SAMPLE_RATE), round(x.end * SAMPLE_RATE))
                              for x in sentences)

    def _forget_speakers(self) -> None:
        """The speaker track keeps frames from the oldest span a final will still ask about."""
        if self.speakers is None:
            return
        starts = [job.segment.start for job in self._finals]
        if self.segment is not None:
            starts.append(self.segment.start)
        self.speakers.forget_before(min(starts, default=self.buffer.end))

    def _final(self, job: FinalJob, decoded: Decoded,
               said: tuple[str | None, tuple[str | None, ...] | None] = (None, None)) -> None:
        seg, (text, sentences), (speaker, sentence_speakers) = job.segment, decoded, said
        if self.rules.keeps_text:
            self.final_texts.append(text)
            self.sentences += sentences or ()
            self.sentence_speakers += sentence_speakers or [None] * len(sentences or ())
        self.emit(de.Final(segment_id=seg.index, item_id=seg.item_id, text=text, agreed=job.agreed,
                           seconds=job.seconds, sentences=sentences, speaker=speaker,
                           sentence_speakers=sentence_speakers))
        log.info("segment_final", segment=seg.index, chars=len(text),
                 latency_s=round(time.monotonic() - job.closed_at, 3), **content(text))

    def _failed(self, job: FinalJob, exc: Exception) -> None:
        self.emit(de.Failed(segment_id=job.segment.index, item_id=job.segment.item_id,
                            busy=isinstance(exc, QueueFullError)))

    async def drain(self) -> str:
        """Waits for every final; returns the session's text (Voxt's transcription.completed)."""
        await self._finals_idle.wait()
        return join_segments(self.final_texts)

    # --- end --------------------------------------------------------------------------------------------

    def close(self) -> None:
        """The socket is gone: queued and running jobs are cancelled now (a stream's decode at its next chunk)."""
        self.strategy.drop()
        if self.speakers is not None:
            self.speakers.close()
        if self._final_task is not None and not self._final_task.done():
            self._final_task.cancel()
        for job in self._finals:
            job.cancel()
        self._finals.clear()
        self._final_samples = 0


def _ms(sample: int) -> int:
    return sample * 1000 // SAMPLE_RATE
