"""The one call path from the daemon's callers to a diarization engine, as transcription.py is for transcription:
each function is one job on the model's runtime (queued by priority, cancellable, counted in the metrics with the
audio it covers)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.engine.diarization import DiarizationEngine, DiarizationStream
from omnid.jobs import JobRunner, Priority

Runtime = JobRunner[DiarizationEngine]


async def diarize(runtime: Runtime, audio: np.ndarray, latency: str, priority: Priority = Priority.FILE,
                  on_progress: Callable[[float, float], None] | None = None) -> np.ndarray:
    """A whole recording's speaker probabilities (frames, speakers) at the latency preset named ``latency`` (one
    of the engine's ``presets``)."""
    engine = runtime.engine
    preset = engine.presets[latency]
    return await runtime.submit(lambda check: engine.diarize(audio, preset, check, on_progress), priority,
                                audio_s=len(audio) / SAMPLE_RATE)


async def feed(runtime: Runtime, stream: DiarizationStream, samples: np.ndarray, spkcache_max: int,
               fifo_max: int) -> np.ndarray:
    """One feed of a live stream -> its frames' probabilities, at final priority: the audio is live."""
    engine = runtime.engine
    return await runtime.submit(lambda check: engine.feed(stream, samples, spkcache_max, fifo_max), Priority.FINAL,
                                audio_s=len(samples) / SAMPLE_RATE)
