"""Transcript output formats shared by the CLI and the HTTP API: json, text, verbose_json, srt, vtt."""

from __future__ import annotations

from typing import Literal

import msgspec

from omnid.engine.languages import LANGUAGES
from omnid.engine.transcript import Transcript

ResponseFormat = Literal["json", "text", "verbose_json", "srt", "vtt"]
FORMATS: tuple[str, ...] = ("json", "text", "verbose_json", "srt", "vtt")
CONTENT_TYPES: dict[str, str] = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}
EXTENSIONS: dict[str, str] = {"json": "json", "verbose_json": "json", "text": "txt", "srt": "srt", "vtt": "vtt"}


class TranscriptionJson(msgspec.Struct):
    text: str


class SegmentJson(msgspec.Struct, omit_defaults=True):
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
    language: str | None = None  # the language detected in this segment, where the engine tells (Qwen3-ASR chunks)


class WordJson(msgspec.Struct):
    word: str
    start: float
    end: float


class VerboseJson(msgspec.Struct, omit_defaults=True):
    task: str
    language: str
    duration: float
    text: str
    segments: list[SegmentJson]
    words: list[WordJson] | None = None


def render(transcript: Transcript, fmt: str, task: str = "transcribe", words: bool = False) -> str:
    if fmt == "json":
        return msgspec.json.encode(TranscriptionJson(transcript.text)).decode()
    if fmt == "text":
        return transcript.text + "\n"
    if fmt == "verbose_json":
        segments = [SegmentJson(**{f: getattr(s, f) for f in SegmentJson.__struct_fields__ if f != "language"},
                                language=LANGUAGES.get(s.language, s.language) if s.language else None)
                    for s in transcript.segments]
        body = VerboseJson(
            task=task,
            language=LANGUAGES.get(transcript.language, transcript.language),
            duration=round(transcript.duration, 3),
            text=transcript.text,
            segments=segments,
            words=[WordJson(w.word.strip(), w.start, w.end) for s in transcript.segments for w in s.words or []]
            if words else None,
        )
        return msgspec.json.encode(body).decode()
    if fmt in ("srt", "vtt"):
        return _subtitles(transcript, fmt)
    raise ValueError(f"unknown format {fmt!r}")


def timestamp(seconds: float, decimal: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, rem = divmod(ms, 3_600_000)
    m, rem = divmod(rem, 60_000)
    s, ms = divmod(rem, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{decimal}{ms:03d}"


def _subtitles(transcript: Transcript, fmt: str) -> str:
    decimal = "," if fmt == "srt" else "."
    cues = []
    for i, seg in enumerate(transcript.segments, start=1):
        span = f"{timestamp(seg.start, decimal)} --> {timestamp(seg.end, decimal)}"
        text = seg.text.strip().replace("-->", "->")
        cues.append(f"{i}\n{span}\n{text}\n" if fmt == "srt" else f"{span}\n{text}\n")
    body = "\n".join(cues)
    return body if fmt == "srt" else "WEBVTT\n\n" + body
