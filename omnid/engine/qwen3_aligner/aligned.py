"""What Qwen3-ForcedAligner gives (timed units of a transcript), how much audio it takes at a time, and how a
transcribed chunk becomes timed segments with words."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from omnid.engine.transcript import Segment, Word

MAX_SECONDS = 180.0  # the official MAX_FORCE_ALIGN_INPUT_SECONDS: the length timed transcription cuts at
SPLIT_SEARCH_S = 5.0  # the official cut's search for a quiet point around each multiple of it
LIMIT_S = MAX_SECONDS + SPLIT_SEARCH_S  # the longest chunk such a cut gives
SENTENCE_END = re.compile(r"[.!?。！？…]")


@dataclass(frozen=True)
class AlignedUnit:
    text: str  # the unit as aligned (letters, digits and apostrophes of a word, or one ideograph)
    start: float  # seconds from the audio's start
    end: float
    char_start: int  # where it lies in the transcript
    char_end: int


def timed_segments(segment: Segment, aligned: list[AlignedUnit], max_s: float) -> list[Segment]:
    """A transcribed chunk cut into timed segments by its aligned units (times relative to the chunk): each unit a
    word (with no probability from the aligner: 1.0), a segment ending after a unit followed by a sentence end in
    the text, or before the unit that would take it past ``max_s``. Each segment's text is the transcript's own,
    punctuation included, its times its first and last words'; ids are the caller's to number."""
    if not aligned:
        return [segment]
    groups: list[list[AlignedUnit]] = [[]]
    for i, unit in enumerate(aligned):
        group = groups[-1]
        if group and unit.end - group[0].start > max_s:
            groups.append(group := [])
        group.append(unit)
        gap = segment.text[unit.char_end : aligned[i + 1].char_start] if i + 1 < len(aligned) else ""
        if SENTENCE_END.search(gap) and i + 1 < len(aligned):
            groups.append([])
    out: list[Segment] = []
    offset = segment.start
    for group in (g for g in groups if g):
        first, last = group[0], group[-1]
        after = aligned.index(last) + 1
        begin = first.char_start if out else 0  # the first segment keeps any opening punctuation
        following = aligned[after].char_start if after < len(aligned) else len(segment.text)
        words = [Word(u.text, round(offset + u.start, 3), round(offset + u.end, 3), 1.0) for u in group]
        out.append(replace(segment, start=round(offset + first.start, 3), end=round(offset + last.end, 3),
                           text=segment.text[begin:following].strip(), words=words,
                           tokens=segment.tokens if not out else []))
    return out
