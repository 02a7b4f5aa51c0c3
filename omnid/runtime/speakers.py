"""Speakers on a transcript: each word (or, where the engine gives no word times, each segment) takes the speaker
with the largest summed probability over its 80 ms diarization frames; a word where no speaker's probability is
above the threshold joins its neighbour's turn; segments are split where their words change speaker. Labels are
"A", "B", ... in order of first appearance: arrival slots within this one file, not identities."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from omnid.engine.diarization import FRAME_SECONDS
from omnid.engine.transcript import Transcript

LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
T = TypeVar("T")


@dataclass(frozen=True)
class Turn:
    start: float
    end: float
    text: str
    speaker: str


@dataclass(frozen=True)
class Speakers:
    turns: list[Turn]  # the transcript cut where the speaker changes (diarized_json's segments)
    segments: list[str]  # one per transcript segment (verbose_json): the speaker of most of its words
    words: list[list[str]] | None  # per segment, per word; None when the engine gave no word times


def span_speaker(probs: np.ndarray, start: float, end: float, threshold: float) -> int | None:
    """The speaker with the largest summed probability over the frames [start, end) touches; None when no speaker
    is above ``threshold`` in any of them (or the span lies past the probability track). Equal sums: the lower
    slot."""
    # Times on the 80 ms grid are not exact in binary (1.44 / 0.08 = 17.999...): snap before rounding.
    first = max(0, int(math.floor(start / FRAME_SECONDS + 1e-6)))
    last = max(first + 1, int(math.ceil(end / FRAME_SECONDS - 1e-6)))
    frames = probs[first:last]
    if len(frames) == 0 or not (frames > threshold).any():
        return None
    return int(frames.sum(axis=0).argmax())


def _fill(ids: list[T | None]) -> list[T | None]:
    """Unassigned items join the turn before them (or, at the start, the one after)."""
    out = list(ids)
    for i in range(1, len(out)):
        if out[i] is None:
            out[i] = out[i - 1]
    for i in range(len(out) - 2, -1, -1):
        if out[i] is None:
            out[i] = out[i + 1]
    return out


def _labels(ids: list[int | None]) -> list[str]:
    order: dict[int | None, str] = {}
    for i in ids:
        if i not in order:
            order[i] = LABELS[len(order)]
    return [order[i] for i in ids]


def named(transcript: Transcript) -> Speakers:
    """The speakers a model named itself in its segments (MOSS-Transcribe-Diarize), as diarized files carry them:
    each segment one turn; a segment it named nobody in (output it did not tag) joins the turn before it (or after
    it), and where it named nobody at all, everything is "A"."""
    segments = transcript.segments
    labels = [label or LABELS[0] for label in _fill([s.speaker for s in segments])]
    turns = [Turn(s.start, s.end, s.text.strip(), label) for s, label in zip(segments, labels) if s.text.strip()]
    return Speakers(turns, labels, None)


def assign(transcript: Transcript, probs: np.ndarray, threshold: float = 0.5) -> Speakers:
    segments = [s for s in transcript.segments]
    if segments and all(s.words for s in segments if s.text.strip()):
        return _by_word(transcript, probs, threshold)
    ids = _fill([span_speaker(probs, s.start, s.end, threshold) for s in segments])
    labels = _labels(ids)
    turns = [Turn(s.start, s.end, s.text.strip(), label) for s, label in zip(segments, labels) if s.text.strip()]
    return Speakers(turns, labels, None)


def _by_word(transcript: Transcript, probs: np.ndarray, threshold: float) -> Speakers:
    flat = [(i, w) for i, s in enumerate(transcript.segments) for w in s.words or []]
    labels = _labels(_fill([span_speaker(probs, w.start, w.end, threshold) for _, w in flat]))
    per_segment: list[list[str]] = [[] for _ in transcript.segments]
    turns: list[Turn] = []
    current: list[tuple] = []

    def close() -> None:
        if current:
            text = "".join(w.word for w, _ in current).strip()
            turns.append(Turn(current[0][0].start, current[-1][0].end, text, current[0][1]))
            current.clear()

    last_segment = None
    for (i, word), label in zip(flat, labels):
        per_segment[i].append(label)
        if current and (i != last_segment or label != current[-1][1]):
            close()
        current.append((word, label))
        last_segment = i
    close()
    # A segment's speaker: the label of most of its words (the first such in order of appearance on a tie); a
    # segment without words (silence) takes its neighbour's.
    majority = _fill([max(dict.fromkeys(ws), key=ws.count) if ws else None for ws in per_segment])
    return Speakers(turns, [label or "A" for label in majority], per_segment)
