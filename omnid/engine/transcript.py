"""A transcript as every engine returns it: the text, timed segments (with words where the model gives them),
the language, the audio's duration and how the decode ended."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float
    probability: float


@dataclass(frozen=True)
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] | None = None
    language: str | None = None  # the language detected in this part of the audio, where the engine tells


@dataclass(frozen=True)
class Transcript:
    text: str
    segments: list[Segment]
    language: str
    duration: float
    generated_tokens: int
    finish_reason: str
