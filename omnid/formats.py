"""Transcript output formats shared by the CLI and the HTTP API: json, text, verbose_json, srt, vtt, and
diarized_json (OpenAI's shape, with a speaker per segment) when a diarization model labelled the speakers."""

from __future__ import annotations

from typing import Literal

import msgspec

from omnid.engine.languages import LANGUAGES
from omnid.engine.transcript import Transcript
from omnid.runtime.speakers import Speakers

ResponseFormat = Literal["json", "text", "verbose_json", "srt", "vtt", "diarized_json"]
FORMATS: tuple[str, ...] = ("json", "text", "verbose_json", "srt", "vtt")
# Formats that need a diarization model (the HTTP API only).
SPEAKER_FORMATS: tuple[str, ...] = ("diarized_json",)
CONTENT_TYPES: dict[str, str] = {
    "json": "application/json",
    "verbose_json": "application/json",
    "diarized_json": "application/json",
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
    emotion: str | None = None  # the emotion the model heard, where it tells (SenseVoice)
    events: list[str] | None = None  # the audio events it heard (speech, laughter, applause...), where it tells
    speaker: str | None = None  # with diarize=true


class WordJson(msgspec.Struct, omit_defaults=True):
    word: str
    start: float
    end: float
    speaker: str | None = None


class Usage(msgspec.Struct, tag_field="type", tag="duration"):
    seconds: float


class DiarizedSegment(msgspec.Struct, tag_field="type", tag="transcript.text.segment"):
    id: str
    start: float
    end: float
    text: str
    speaker: str


class DiarizedJson(msgspec.Struct):
    task: str
    duration: float
    text: str
    segments: list[DiarizedSegment]
    usage: Usage


class VerboseJson(msgspec.Struct, omit_defaults=True):
    task: str
    language: str
    duration: float
    text: str
    segments: list[SegmentJson]
    words: list[WordJson] | None = None


def render(transcript: Transcript, fmt: str, task: str = "transcribe", words: bool = False,
           speakers: Speakers | None = None) -> str:
    if fmt == "json":
        return msgspec.json.encode(TranscriptionJson(transcript.text)).decode()
    if fmt == "text":
        return transcript.text + "\n"
    if fmt == "verbose_json":
        return msgspec.json.encode(_verbose(transcript, task, words, speakers)).decode()
    if fmt == "diarized_json":
        if speakers is None:
            raise ValueError("diarized_json needs speakers")
        turns = [DiarizedSegment(f"seg_{i}", round(t.start, 3), round(t.end, 3), t.text, t.speaker)
                 for i, t in enumerate(speakers.turns)]
        duration = round(transcript.duration, 3)
        return msgspec.json.encode(DiarizedJson(task, duration, transcript.text, turns, Usage(duration))).decode()
    if fmt in ("srt", "vtt"):
        return _subtitles(transcript, fmt)
    raise ValueError(f"unknown format {fmt!r}")


def _verbose(transcript: Transcript, task: str, words: bool, speakers: Speakers | None) -> VerboseJson:
    own = ("language", "speaker", "events")
    segments = [SegmentJson(**{f: getattr(s, f) for f in SegmentJson.__struct_fields__ if f not in own},
                            language=LANGUAGES.get(s.language, s.language) if s.language else None,
                            events=list(s.events) if s.events is not None else None,
                            speaker=speakers.segments[i] if speakers else None)
                for i, s in enumerate(transcript.segments)]
    word_list = None
    if words:
        word_list = [WordJson(w.word.strip(), w.start, w.end,
                              speakers.words[i][j] if speakers and speakers.words else None)
                     for i, s in enumerate(transcript.segments) for j, w in enumerate(s.words or [])]
    return VerboseJson(task=task, language=LANGUAGES.get(transcript.language, transcript.language),
                       duration=round(transcript.duration, 3), text=transcript.text, segments=segments,
                       words=word_list)


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
        if seg.speaker is not None:  # a model that names its speakers: "[A] text" (SRT), a voice span (WebVTT)
            text = f"[{seg.speaker}] {text}" if fmt == "srt" else f"<v {seg.speaker}>{text}"
        cues.append(f"{i}\n{span}\n{text}\n" if fmt == "srt" else f"{span}\n{text}\n")
    body = "\n".join(cues)
    return body if fmt == "srt" else "WEBVTT\n\n" + body
