"""The re-decoding strategy (Whisper's forced prefix, the "redecode" engines Qwen3-ASR and Parakeet): previews decode
the open segment again, and its final is one decode of all of it.

At most one preview is in flight, at PREVIEW priority, started only when enough new audio has come; it is cancelled
when its segment closes, and one that cannot be queued is skipped, so a machine that falls behind thins previews and
never loses a final. Previews' stable words become the segment's agreement (LocalAgreement), which the OpenAI
dialect's deltas and the final continue.

With server VAD the final starts before the turn is over: once speech has paused for ``speculate_after_ms``
(``loaded_speculate_after_ms`` while other work is on the model) the segment so far is decoded at FINAL priority (a
speculation); speech resuming cancels it, the turn ending makes its result the final. While one is pending no
preview starts, so the text it continues cannot grow under it. While other sessions' finals keep the model busy
there is no preview and no speculation, and finals take the cheaper window (``busy_finals``, ``busy_final_window``),
so a loaded model catches up instead of falling further behind.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.interface import Hypothesis
from omnid.realtime import events as de
from omnid.realtime.strategy import Decoded, Host, Segment, SessionError
from omnid.realtime.text import LocalAgreement
from omnid.runtime import transcription
from omnid.runtime.errors import JobCancelledError, QueueFullError
from omnid.runtime.models import transcribe_options
from omnid.runtime.scheduler import Priority

log = structlog.get_logger(__name__)


@dataclass
class Redecoded(Segment):
    """A segment that previews decode again: where they got to, and what they agreed on."""

    previewed_to: int | None = None  # buffer end at the last preview
    agreement: LocalAgreement = field(default_factory=lambda: LocalAgreement(hold_back=1))
    hypothesis: Hypothesis | None = None  # a "redecode" engine's last decode of this segment


@dataclass
class RedecodeFinal:
    """A segment's final: one decode of its audio, or the speculation started at its pause."""

    strategy: ReDecoding
    segment: Redecoded
    audio: np.ndarray
    prefix: str  # text already sent as deltas: the final continues it
    closed_at: float
    speculation: asyncio.Future[str] | None = None  # its decode, started before the segment closed

    @property
    def end(self) -> int:
        """Absolute 16 kHz sample where its audio ends."""
        return self.segment.start + len(self.audio)

    @property
    def samples(self) -> int:
        return len(self.audio)

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE

    @property
    def agreed(self) -> str:
        return self.segment.agreement.text()

    async def decode(self) -> Decoded:
        if self.speculation is not None:
            return Decoded(await self.speculation)
        return Decoded(await self.strategy.transcribe(self) if len(self.audio) else "")

    def cancel(self) -> None:
        if self.speculation is not None:
            self.speculation.cancel()  # a no-op once it is done


class ReDecoding:
    """The session's open segment decoded again for each preview; its final one decode, maybe started early."""

    settings_fixed_by_audio = False
    timed = False
    listens = True

    def __init__(self, host: Host) -> None:
        self.host = host
        self.segment: Redecoded | None = None
        self._preview: asyncio.Task | None = None
        self._speculation: RedecodeFinal | None = None  # the open segment's final, decoding since its speech paused

    @property
    def segment_limit(self) -> int:
        return int(self.host.config.max_segment_s * SAMPLE_RATE)

    def admits(self, samples: int) -> bool:
        h = self.host
        if (h.input_samples + samples) / h.settings.rate > h.config.max_session_s:
            raise SessionError("session_too_long", f"the session is over its {h.config.max_session_s:g} s cap")
        return True

    def open(self, index: int, item_id: str, start: int) -> Redecoded:
        self.segment = Redecoded(index, item_id, start)
        return self.segment

    def needed_from(self) -> int | None:
        return self.segment.start if self.segment is not None else None

    def advance(self) -> None:
        self._maybe_preview()

    def committed(self) -> None:
        pass  # the session goes on: the next speech opens the next segment

    def drop(self) -> None:
        self._cancel_preview()
        self._drop_speculation()
        self.segment = None

    def close(self, end: int) -> RedecodeFinal:
        seg = self.segment
        assert seg is not None
        self._cancel_preview()
        spec, self._speculation = self._speculation, None
        if spec is not None and end < spec.end:
            spec.cancel()  # cut inside the speculated audio: decoded again at the cut
            spec = None
        self.segment = None
        if spec is not None:
            # A speculation holds the turn up to where its speech paused; what came after is silence to VAD.
            return spec
        audio = self.host.buffer.view(seg.start, end).copy()
        if seg.speech_at is None or seg.speech_at >= end:
            audio = audio[:0]  # no speech: it finalises to empty text without the model
        return self._final_job(seg, audio)

    def _final_job(self, seg: Redecoded, audio: np.ndarray) -> RedecodeFinal:
        prefix = seg.agreement.text() if self.host.rules.append_only else ""
        return RedecodeFinal(self, seg, audio, prefix, time.monotonic())

    def _busy(self) -> bool:
        """Other finals keep the model busy (realtime.busy_finals)."""
        return self.host.runtime.in_flight(Priority.FINAL) > self.host.config.busy_finals

    async def transcribe(self, job: RedecodeFinal) -> str:
        h = self.host
        s = h.settings
        window = h.config.busy_final_window if self._busy() else None
        opts = transcribe_options(h.transcription, language=s.language, prompt=s.prompt,
                                  prompt_tokens=h.prompt_tokens, window=window, punctuation=s.punctuation,
                                  itn=s.itn)
        # Deltas already sent never change: the final continues the text they hold.
        return await transcription.final(h.runtime, job.audio, opts, job.prefix)

    # --- speculation ----------------------------------------------------------------------------------------

    def heard(self, now: int) -> None:
        """Starts the open segment's final once speech has paused long enough; cancels it when speech resumes."""
        h = self.host
        seg = self.segment
        pause_from = h.turns.silence_from if h.turns is not None else None  # set only inside a turn
        if self._speculation is not None and pause_from is None:
            log.info("speculation_cancelled", segment=self._speculation.segment.index)
            self._drop_speculation()
        if self._speculation is not None or pause_from is None or seg is None or seg.speech_at is None:
            return
        end = min(now, h.buffer.end)
        if now - pause_from < self._speculate_after_ms() * SAMPLE_RATE // 1000 or end <= seg.speech_at:
            return
        if self._busy():
            return  # the final starts when the turn ends
        self._cancel_preview()
        job = self._final_job(seg, h.buffer.view(seg.start, end).copy())
        job.speculation = asyncio.ensure_future(self.transcribe(job))
        job.speculation.add_done_callback(_retrieved)  # a dropped speculation's failure is nobody's to report
        self._speculation = job
        h.speculations += 1

    def _speculate_after_ms(self) -> int:
        """Soon when the model has nothing else to do (this session's own preview aside); later while other work is
        on it, where a speculation that speech cancels is work the others wait behind (a short pause inside a
        sentence is common)."""
        states = self.host.runtime.request_states
        own = 1 if self._preview is not None and not self._preview.done() else 0
        idle = sum(states.values()) <= own
        return self.host.config.speculate_after_ms if idle else self.host.config.loaded_speculate_after_ms

    def _drop_speculation(self) -> None:
        job, self._speculation = self._speculation, None
        if job is not None:
            job.cancel()

    # --- previews -------------------------------------------------------------------------------------------

    def _maybe_preview(self) -> None:
        seg = self.segment
        if seg is None or seg.speech_at is None or (self._preview is not None and not self._preview.done()):
            return
        if self._speculation is not None:
            return  # the final is decoding: its prefix must not grow, and its result supersedes any preview
        if self._busy():
            return  # other sessions' finals come first: a preview now would only delay them
        end = self.host.buffer.end
        if seg.previewed_to is None:
            due = end - seg.speech_at >= self.host.config.first_preview_s * SAMPLE_RATE
        else:
            due = end - seg.previewed_to >= self.host.config.preview_interval_s * SAMPLE_RATE
        if due:
            seg.previewed_to = end
            audio = self.host.buffer.view(seg.start, end).copy()
            self._preview = asyncio.ensure_future(self._run_preview(seg, audio))

    async def _run_preview(self, seg: Redecoded, audio: np.ndarray) -> None:
        try:
            text = await self._preview_text(seg, audio)
        except (QueueFullError, JobCancelledError):
            return  # the machine is behind: this preview is skipped, the next one will be fresher
        except Exception:  # noqa: BLE001  (a failed preview costs only that preview)
            log.warning("preview_failed")
            return
        if self.segment is not seg:
            return  # stale: its segment has closed
        # A hypothesis of the first moments of speech is too unsure to build on (tiny models lowercase a
        # sentence start, drop its punctuation): it is shown, and only the next one may agree with it.
        config = self.host.config
        stable = seg.speech_at is not None and seg.start + len(audio) - seg.speech_at >= config.stable_after_s * SAMPLE_RATE
        if stable:
            agreed = seg.agreement.update(text)
        else:
            seg.agreement.observe(text)
            agreed = ""
        self.host.emit(de.Preview(segment_id=seg.index, item_id=seg.item_id, text=text, agreed=agreed))

    async def _preview_text(self, seg: Redecoded, audio: np.ndarray) -> str:
        """The segment decoded again: with its stable words as a forced prefix, or by the engine's own streaming
        recipe (a "redecode" engine continues its last hypothesis)."""
        h = self.host
        runtime, s = h.runtime, h.settings
        opts = transcribe_options(h.transcription, language=s.language, prompt=s.prompt, prompt_tokens=h.prompt_tokens,
                                  window=h.config.preview_window, temperature=0.0, punctuation=s.punctuation, itn=s.itn,
                                  fallback=False)  # a preview is never worth a retry
        if runtime.engine.capabilities.streaming == "redecode":
            seg.hypothesis = await transcription.redecode(runtime, audio, opts, seg.hypothesis)
            return seg.hypothesis.text
        return await transcription.preview(runtime, audio, opts, seg.agreement.text())

    def _cancel_preview(self) -> None:
        if self._preview is not None and not self._preview.done():
            self._preview.cancel()
        self._preview = None


def _retrieved(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()
