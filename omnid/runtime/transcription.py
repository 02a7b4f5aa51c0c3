"""The one call path from the daemon's callers to an engine: each function is one job on the model's runtime (queued
by priority, cancellable, counted in the metrics with the audio it covers). On an engine that batches, the job is
its program, run together with the others queued for that model. The realtime VAD batcher alone submits its own
batched jobs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import cast

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.engine.alignment import AlignerEngine, timed_segments
from omnid.engine.interface import (
    BatchingEngine,
    Capabilities,
    Hypothesis,
    Program,
    RedecodingEngine,
    StreamingEngine,
    StreamUpdate,
    TranscriptionEngine,
)
from omnid.engine.languages import LANGUAGES
from omnid.engine.options import TranscribeOptions
from omnid.engine.transcript import Segment, Transcript
from omnid.runtime.scheduler import EngineRuntime, Priority
from omnid.vad.filter import speech_clips
from omnid.vad.silero import SileroVAD
from omnid.vad.stream import probabilities

Runtime = EngineRuntime[TranscriptionEngine]
SILERO_THRESHOLD = 0.5  # Silero's own default speech threshold


def capabilities(runtime: Runtime) -> Capabilities:
    """What a model offers, with its forced aligner's times where it has one (Qwen3-ASR gives none by itself)."""
    can = runtime.engine.capabilities
    if runtime.aligner is not None:
        return replace(can, timestamps=True, word_timestamps=True)
    return can


async def transcribe(runtime: Runtime, audio: np.ndarray, opts: TranscribeOptions, *,
                     priority: Priority = Priority.FILE, clips: list[tuple[int, int]] | None = None,
                     on_segment: Callable[[Segment], None] | None = None,
                     on_progress: Callable[[float, float], None] | None = None) -> Transcript:
    """A whole clip, or only its ``clips`` (sample spans; an empty list is an empty transcript, no model work).
    With ``opts.timed`` and a forced aligner, every transcribed chunk is then aligned on the aligner's runtime
    (at the same priority) and cut into timed segments with words."""
    transcript = await _transcribe(runtime, audio, opts, priority, clips, on_segment, on_progress)
    if opts.timed and runtime.aligner is not None:
        return await _aligned(runtime, transcript, audio, priority)
    return transcript


async def _aligned(runtime: Runtime, transcript: Transcript, audio: np.ndarray, priority: Priority) -> Transcript:
    aligner = runtime.aligner
    assert aligner is not None
    engine: AlignerEngine = aligner.engine
    segments: list[Segment] = []
    for seg in transcript.segments:
        first, last = round(seg.start * SAMPLE_RATE), round(seg.end * SAMPLE_RATE)
        chunk = audio[first:last]
        language = LANGUAGES.get(seg.language or transcript.language or "", "")

        def job(check, chunk=chunk, text=seg.text, language=language):
            return engine.align(chunk, text, language, check)

        units = await aligner.submit(job, priority, audio_s=len(chunk) / SAMPLE_RATE) if seg.text.strip() else []
        segments += timed_segments(seg, units, engine.segment_max_s)
    segments = [replace(s, id=i) for i, s in enumerate(segments)]
    return replace(transcript, segments=segments)


async def _transcribe(runtime: Runtime, audio: np.ndarray, opts: TranscribeOptions, priority: Priority,
                      clips: list[tuple[int, int]] | None, on_segment: Callable[[Segment], None] | None,
                      on_progress: Callable[[float, float], None] | None) -> Transcript:
    engine = runtime.engine
    if clips is not None and not clips:
        return engine.transcribe_clips(audio, [], opts)
    heard = len(audio) if clips is None else sum(end - start for start, end in clips)
    if runtime.batching:
        def program(e: BatchingEngine) -> Program:
            if clips is None:
                return e.transcribe_program(audio, opts, on_segment, on_progress)
            return e.clips_program(audio, clips, opts, on_segment)
        return await runtime.submit_program(program, priority, audio_s=heard / SAMPLE_RATE)
    if clips is None:
        def job(check) -> Transcript:
            return engine.transcribe(audio, opts, check, on_segment=on_segment, on_progress=on_progress)
    else:
        def job(check) -> Transcript:
            return engine.transcribe_clips(audio, clips, opts, check, on_segment=on_segment)
    return await runtime.submit(job, priority, audio_s=heard / SAMPLE_RATE)


async def preview(runtime: Runtime, audio: np.ndarray, opts: TranscribeOptions, prefix: str) -> str:
    """The text of an open segment so far, continuing ``prefix``, at preview priority."""
    engine = runtime.engine
    if runtime.batching:
        return await runtime.submit_program(lambda e: e.preview_program(audio, opts, prefix), Priority.PREVIEW,
                                            audio_s=len(audio) / SAMPLE_RATE)
    return await runtime.submit(lambda check: engine.preview(audio, opts, prefix, check), Priority.PREVIEW,
                                audio_s=len(audio) / SAMPLE_RATE)


async def redecode(runtime: Runtime, audio: np.ndarray, opts: TranscribeOptions,
                   previous: Hypothesis | None) -> Hypothesis:
    """A re-decoding engine's next hypothesis of an open segment (its streaming recipe), at preview priority."""
    engine = cast(RedecodingEngine, runtime.engine)
    if runtime.batching:
        return await runtime.submit_program(lambda e: e.redecode_program(audio, opts, previous), Priority.PREVIEW,
                                            audio_s=len(audio) / SAMPLE_RATE)
    return await runtime.submit(lambda check: engine.redecode(audio, opts, previous, check), Priority.PREVIEW,
                                audio_s=len(audio) / SAMPLE_RATE)


async def final(runtime: Runtime, audio: np.ndarray, opts: TranscribeOptions, sent: str) -> str:
    """A closed segment's authoritative text, at final priority: the same decode as a file transcription, or, when
    append-only deltas were already sent, one decode forced to continue their text (decoding freely first and
    again only when that diverged cost two decodes whenever it did)."""
    engine = runtime.engine
    if runtime.batching:
        return await runtime.submit_program(lambda e: e.final_program(audio, opts, sent), Priority.FINAL,
                                            audio_s=len(audio) / SAMPLE_RATE)

    def job(check) -> str:
        if sent.strip():
            return engine.preview(audio, opts, sent, check)
        return engine.transcribe(audio, opts, check).text

    return await runtime.submit(job, Priority.FINAL, audio_s=len(audio) / SAMPLE_RATE)


async def stream(runtime: Runtime, live: object, audio: np.ndarray, finish: bool) -> StreamUpdate:
    """A cache-aware engine's live stream fed ``audio`` (then, with ``finish``, ended). At final priority: unlike a
    re-decoding preview, no chunk may be skipped or stopped half-way, and each session has one such job at a time."""
    return await runtime.submit_program(
        lambda e: cast(StreamingEngine, e).stream_program(live, audio, finish), Priority.FINAL,
        audio_s=len(audio) / SAMPLE_RATE)


async def model_clips(runtime: Runtime, vad: EngineRuntime[SileroVAD], audio: np.ndarray, pad_s: float,
                      threshold: float = SILERO_THRESHOLD) -> list[tuple[int, int]] | None:
    """The speech clips a model that takes at most ``max_clip_s`` at once is given of audio longer than that
    (vad/filter.py's speech_clips, ``pad_s`` of silence kept at each edge); None where the model takes the audio
    whole."""
    limit = capabilities(runtime).max_clip_s
    if limit is None or not needs_clips(runtime, audio):
        return None
    probs = await speech_probabilities(vad, audio)
    return speech_clips(probs, len(audio), threshold, limit, pad_s)


def needs_clips(runtime: Runtime, audio: np.ndarray) -> bool:
    """Whether the model takes this audio only as clips (it is longer than the model's max_clip_s)."""
    limit = capabilities(runtime).max_clip_s
    return limit is not None and len(audio) > limit * SAMPLE_RATE


async def speech_probabilities(runtime: EngineRuntime[SileroVAD], audio: np.ndarray) -> np.ndarray:
    """Silero's speech probability for every window of a whole file, at file priority."""
    vad = runtime.engine
    return await runtime.submit(lambda check: probabilities(vad, audio, check), Priority.FILE,
                                audio_s=len(audio) / SAMPLE_RATE)
