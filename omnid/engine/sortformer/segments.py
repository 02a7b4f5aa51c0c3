"""Speaker probabilities (one row per 80 ms frame) -> speaker turns, by the reference server's rule: per speaker,
runs of frames with p > threshold (strict) become [start, end) segments; runs shorter than ``min_duration`` are
dropped; then runs of the same speaker at most ``merge_gap`` apart are merged (when merge_gap > 0); all speakers'
segments in order of start (stable)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FRAME_SECONDS = 0.08


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    speaker: int


def turns(probs: np.ndarray, threshold: float = 0.5, min_duration: float = 0.0, merge_gap: float = 0.18,
          offset_frames: int = 0) -> list[Turn]:
    """``offset_frames``: frames before ``probs[0]`` (a feed's place in its stream)."""
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
