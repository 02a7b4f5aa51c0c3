"""Server events of /v1/realtime (wire.md section 3), one msgspec Struct per event. The connection stamps
``event_id`` (and, in the Voxt dialect, ``event_index``) as it sends them."""

from __future__ import annotations

from typing import Any

import msgspec


class ServerEvent(msgspec.Struct, tag_field="type", kw_only=True, omit_defaults=True):
    event_id: str = ""
    event_index: int | None = None  # Voxt dialect only


class ErrorDetail(msgspec.Struct, omit_defaults=True):
    type: str
    code: str
    message: str
    param: str | None = None
    event_id: str | None = None


class Error(ServerEvent, tag="error"):
    error: ErrorDetail


# --- both dialects / Voxt --------------------------------------------------------------------------------------


class TranscriptionSessionUpdated(ServerEvent, tag="transcription_session.updated"):
    session: dict[str, Any]


class Sentence(msgspec.Struct):
    """A cache-aware stream's sentence (the reference's speaker segment shape; it knows no speakers)."""

    start: float
    end: float
    speaker: str
    text: str


class TranscriptionSegment(ServerEvent, tag="transcription.segment"):
    segment_id: int
    text: str
    is_final: bool
    segments: list[Sentence] | None = None  # a cache-aware model's final
    speaker: str | None = None  # omnid: a final's speaker, in a session that asked for speakers


class TranscriptionCompleted(ServerEvent, tag="transcription.completed"):
    text: str
    segments: list[Sentence] | None = None  # a cache-aware model's session


# --- OpenAI --------------------------------------------------------------------------------------------------


class SessionCreated(ServerEvent, tag="session.created"):
    session: dict[str, Any]


class SessionUpdated(ServerEvent, tag="session.updated"):
    session: dict[str, Any]


class SpeechStarted(ServerEvent, tag="input_audio_buffer.speech_started"):
    item_id: str
    audio_start_ms: int


class SpeechStopped(ServerEvent, tag="input_audio_buffer.speech_stopped"):
    item_id: str
    audio_end_ms: int


class Committed(ServerEvent, tag="input_audio_buffer.committed"):
    item_id: str
    previous_item_id: str | None


class Cleared(ServerEvent, tag="input_audio_buffer.cleared"):
    pass


class TranscriptDelta(ServerEvent, tag="conversation.item.input_audio_transcription.delta"):
    item_id: str
    content_index: int
    delta: str


class Usage(msgspec.Struct):
    seconds: float
    type: str = "duration"


class TranscriptCompleted(ServerEvent, tag="conversation.item.input_audio_transcription.completed"):
    item_id: str
    content_index: int
    transcript: str
    usage: Usage
    speaker: str | None = None  # omnid: its speaker, in a session that asked for speakers


class TranscriptFailed(ServerEvent, tag="conversation.item.input_audio_transcription.failed"):
    item_id: str
    content_index: int
    error: ErrorDetail


def error(code: str, message: str, *, type: str = "invalid_request_error", param: str | None = None,
          event_id: str | None = None) -> Error:
    return Error(error=ErrorDetail(type=type, code=code, message=message, param=param, event_id=event_id))


def transcription_failed(busy: bool) -> ErrorDetail:
    """Why a segment has no transcript: the engine's queue was full, or the engine failed."""
    message = "the server is too busy to transcribe this segment" if busy else "transcription failed"
    return ErrorDetail(type="server_error", code="transcription_failed", message=message)
