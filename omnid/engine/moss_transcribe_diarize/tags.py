"""MOSS-Transcribe-Diarize's output read into segments, as transformers' processor reads it
(``extract_speaker_dict``): every ``[start][S<n>]text[end]`` in order, times in seconds or as ``MM:SS`` /
``HH:MM:SS``, the text stripped; anything outside such a segment is dropped. A segment whose time is not a number
(a bracketed aside such as ``[laughs]`` read as its end) is dropped too, where the processor raises. Output with no
segment at all is the model's text as it is (the processor's fallback), with no speaker or times."""

from __future__ import annotations

import re
from dataclasses import dataclass

SEGMENT = re.compile(r"\[(?P<start>[^\[\]]+)\]\[S(?P<speaker>\d+)\](?P<content>.*?)\[(?P<end>[^\[\]]+)\]", re.DOTALL)


@dataclass(frozen=True)
class Said:
    start: float
    end: float
    speaker: int  # the model's speaker number (S01 -> 1)
    text: str


def seconds(value: str) -> float:
    """parse_timestamp: a plain number, or colon-separated minutes and seconds (and hours)."""
    return sum(float(part) * 60**i for i, part in enumerate(reversed(value.strip().split(":"))))


def parse(text: str) -> list[Said] | None:
    """The segments of the model's decoded text (specials skipped), or None where it has none."""
    text = text.strip()
    if text.startswith("assistant"):
        text = text[len("assistant") :].strip()
    out = []
    for m in SEGMENT.finditer(text):
        try:
            out.append(Said(seconds(m["start"]), seconds(m["end"]), int(m["speaker"]), m["content"].strip()))
        except ValueError:
            continue
    return out or None
