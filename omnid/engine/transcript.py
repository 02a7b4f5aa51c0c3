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
    emotion: str | None = None  # the speaker's emotion the model heard, where it tells (SenseVoice)
    events: tuple[str, ...] | None = None  # the audio events the model heard (laughter, applause...), where it tells
    speaker: str | None = None  # who speaks in it ("A", "B", ...), where the model itself tells (MOSS-Transcribe-Diarize)


@dataclass(frozen=True)
class Transcript:
    text: str
    segments: list[Segment]
    language: str
    duration: float
    generated_tokens: int
    finish_reason: str


def after_prefix(text: str, prefix: str) -> str:
    """A decode's text made to start with ``prefix`` (the words a realtime final has already sent as append-only
    deltas): the prefix, then the decode's words past as many words as the prefix has (a transducer cannot be
    forced to continue a text)."""
    sent = prefix.strip()
    if not sent or text.startswith(sent):
        return text
    return " ".join([sent, *text.split()[len(sent.split()) :]])
