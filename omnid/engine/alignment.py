"""What every forced aligner offers, whatever its kind: the interface runtime/transcription.py times a transcript
with (a transcription model's aligner, attached to its runtime), the timed units it gives, and how a transcribed
chunk becomes timed segments with words by them."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from omnid.engine.interface import Check
from omnid.engine.transcript import Segment, Word

SENTENCE_END = re.compile(r"[.!?。！？…]")


@dataclass(frozen=True)
class AlignedUnit:
    text: str  # the unit as aligned (letters, digits and apostrophes of a word, or one ideograph)
    start: float  # seconds from the audio's start
    end: float
    char_start: int  # where it lies in the transcript
    char_end: int


class AlignerEngine(Protocol):
    """Synchronous and thread-confined: only its runtime's worker thread calls align."""

    # Timed segments are cut before they pass this many seconds (timed_segments' ``max_s``).
    segment_max_s: float

    def align(self, audio: np.ndarray, text: str, language: str, check: Check = ...) -> list[AlignedUnit]:
        """The units of ``text`` (in ``language``, as the model names it) timed in ``audio``."""


def timed_segments(segment: Segment, aligned: list[AlignedUnit], max_s: float) -> list[Segment]:
    """A transcribed chunk cut into timed segments by its aligned units (times relative to the chunk): each unit a
    word (with no probability from the aligner: 1.0), a segment ending after a unit followed by a sentence end in
    the text, or before the unit that would take it past ``max_s``. Each segment's text is the transcript's own,
    punctuation included, its times its first and last words'; ids are the caller's to number."""
    if not aligned:
        return [segment]
    starts = [0]  # the first unit of each segment
    for i in range(1, len(aligned)):
        after_sentence = SENTENCE_END.search(segment.text[aligned[i - 1].char_end : aligned[i].char_start])
        if after_sentence or aligned[i].end - aligned[starts[-1]].start > max_s:
            starts.append(i)
    out: list[Segment] = []
    for first, stop in zip(starts, starts[1:] + [len(aligned)]):
        group = aligned[first:stop]
        begin = group[0].char_start if first else 0  # the first segment keeps any opening punctuation
        following = aligned[stop].char_start if stop < len(aligned) else len(segment.text)
        words = [Word(u.text, round(segment.start + u.start, 3), round(segment.start + u.end, 3), 1.0)
                 for u in group]
        out.append(replace(segment, start=words[0].start, end=words[-1].end,
                           text=segment.text[begin:following].strip(), words=words,
                           tokens=segment.tokens if not first else []))
    return out
