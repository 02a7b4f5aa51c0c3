"""What every speaker diarization engine offers, whatever its kind: the interface the diarization routes,
``omnid diarize`` and the speakers of a transcription use (through runtime/diarization.py), and the grid of frames
its speaker probabilities come on, with the reference server's rule that turns them into speaker turns.

Turns: per speaker, runs of frames with p > threshold (strict) become [start, end) segments; runs shorter than
``min_duration`` are dropped; then runs of the same speaker at most ``merge_gap`` apart are merged (when
merge_gap > 0); all speakers' segments in order of start (stable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from omnid.engine.interface import Check

# One row of speaker probabilities per 80 ms of audio (Sortformer's encoder frame: 8 feature hops of 10 ms). The
# speakers of a transcript and the routes' turns read every diarization engine's rows on this grid.
FRAME_SECONDS = 0.08
SAMPLES_PER_FRAME = 1280  # 80 ms at 16 kHz
# A live stream's bounds when its client names none (the reference server's defaults): speaker-cache and FIFO
# frames kept between feeds.
STREAM_SPKCACHE_MAX = 188
STREAM_FIFO_MAX = 188
ABSOLUTE_MAX_FEED = 480_000  # 30 s: no feed of a live stream is longer, whatever the checkpoint


class StreamLimits(Protocol):
    """The streaming sizes (in frames) that bound what one feed of a live stream may ask for."""

    @property
    def spkcache_len(self) -> int: ...

    @property
    def chunk_left_context(self) -> int: ...

    @property
    def spkcache_update_period(self) -> int: ...


class DiarizationStream(Protocol):
    """A live stream's state, kept by its caller between feeds: its speaker cache, its FIFO of recent frames and the
    frames it has given so far."""

    @property
    def spkcache(self) -> Sized: ...

    @property
    def fifo(self) -> Sized: ...

    @property
    def frames_processed(self) -> int: ...


class DiarizationEngine(Protocol):
    """Synchronous and thread-confined: only its runtime's worker thread calls diarize and feed."""

    @property
    def presets(self) -> Mapping[str, Any]:
        """Its latency presets for whole recordings, by the name a request or the configuration gives."""

    @property
    def streaming(self) -> StreamLimits: ...

    @property
    def max_positions(self) -> int | None:
        """The longest sequence its network takes (None: no limit of its own)."""

    def diarize(self, audio: np.ndarray, preset: Any = None, check: Check = ...,
                on_progress: Callable[[float, float], None] | None = None) -> np.ndarray:
        """A whole recording at one of ``presets`` -> (frames, speakers) probabilities."""

    def new_stream(self) -> DiarizationStream: ...

    def feed(self, state: Any, samples: np.ndarray, spkcache_max: int, fifo_max: int) -> np.ndarray:
        """One feed of the live stream ``state`` (one of new_stream's) -> its frames' probabilities; the state
        moves on."""


def max_feed_samples(engine: DiarizationEngine) -> int:
    """The longest feed of a live stream: one update period of frames, less a sample (a feed's frames then never
    exceed it), and at most 30 s."""
    return min(ABSOLUTE_MAX_FEED, engine.streaming.spkcache_update_period * SAMPLES_PER_FRAME - 1)


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: int


def turns(probs: np.ndarray, threshold: float = 0.5, min_duration: float = 0.0, merge_gap: float = 0.18,
          offset_frames: int = 0) -> list[Turn]:
    """Speaker probabilities (one row per frame) -> speaker turns, by the rule of the module docstring.
    ``offset_frames``: frames before ``probs[0]`` (a feed's place in its stream)."""
    offset = offset_frames * FRAME_SECONDS
    out: list[Turn] = []
    for spk in range(probs.shape[1] if probs.ndim == 2 else 0):
        active = np.concatenate([[False], probs[:, spk] > threshold, [False]])
        edges = np.flatnonzero(active[1:] != active[:-1])
        runs: list[Turn] = []
        for i, j in zip(edges[0::2].tolist(), edges[1::2].tolist()):
            start, end = i * FRAME_SECONDS, j * FRAME_SECONDS
            if end - start >= min_duration:
                runs.append(Turn(start + offset, end + offset, spk))
        if merge_gap > 0:
            merged: list[Turn] = []
            for run in runs:
                if merged and run.start - merged[-1].end <= merge_gap:
                    merged[-1] = Turn(merged[-1].start, run.end, spk)
                else:
                    merged.append(run)
            runs = merged
        out.extend(runs)
    out.sort(key=lambda t: t.start)
    return out
