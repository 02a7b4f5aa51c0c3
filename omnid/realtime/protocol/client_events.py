"""Client events of /v1/realtime (wire.md section 3) as msgspec Structs, one per event, and the decoding that
sorts a frame into an event, a recoverable error or a terminal one, plus the dialect a first event implies."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Union

import msgspec

from omnid.echo import shown

Dialect = Literal["voxt", "openai"]


class SessionUpdate(msgspec.Struct, tag_field="type", tag="session.update"):
    session: dict[str, Any] = msgspec.field(default_factory=dict)
    event_id: str | None = None


class TranscriptionSessionUpdate(msgspec.Struct, tag_field="type", tag="transcription_session.update"):
    session: dict[str, Any] = msgspec.field(default_factory=dict)
    event_id: str | None = None


class AudioAppend(msgspec.Struct, tag_field="type", tag="input_audio_buffer.append"):
    audio: Any = None  # validated by session.buffer.decode_pcm16, which names what is wrong
    event_id: str | None = None


class AudioCommit(msgspec.Struct, tag_field="type", tag="input_audio_buffer.commit"):
    event_id: str | None = None


class AudioClear(msgspec.Struct, tag_field="type", tag="input_audio_buffer.clear"):
    event_id: str | None = None


class TranscriptionDone(msgspec.Struct, tag_field="type", tag="transcription.done"):
    event_id: str | None = None


ClientEvent = Union[SessionUpdate, TranscriptionSessionUpdate, AudioAppend, AudioCommit, AudioClear, TranscriptionDone]


@dataclass(frozen=True)
class FrameError:
    code: str  # invalid_json | invalid_event | invalid_frame
    message: str
    terminal: bool
    event_id: str | None = None


def parse_frame(frame: str | bytes) -> ClientEvent | FrameError:
    """One text frame -> an event, or the error the spec names: not JSON (recoverable), a JSON value that is not
    an object (terminal), an unknown type or malformed fields (recoverable)."""
    try:
        value = msgspec.json.decode(frame)
    except msgspec.DecodeError as exc:
        value = _with_constants(frame)  # NaN and Infinity, as Python's json writes them: the field says what is wrong
        if value is None:
            return FrameError("invalid_json", f"frame is not valid JSON: {_why(frame, exc)}", terminal=False)
    except RecursionError:
        return FrameError("invalid_json", "frame is not valid JSON: nested too deeply", terminal=False)
    except UnicodeError:
        return FrameError("invalid_json", "frame is not valid JSON: it is not valid UTF-8", terminal=False)
    if not isinstance(value, dict):
        return FrameError("invalid_frame", "each frame must be one JSON object", terminal=True)
    event_id = value.get("event_id") if isinstance(value.get("event_id"), str) else None
    if event_id is not None and len(event_id) > MAX_EVENT_ID:
        event_id = None  # echoed back in errors: a client's id is at most this long
    kind = value.get("type")
    try:
        return msgspec.convert(value, ClientEvent)
    except msgspec.ValidationError as exc:
        if not isinstance(kind, str) or kind not in _TYPES:
            return FrameError("invalid_event", f"unknown event type {shown(kind)}", terminal=False, event_id=event_id)
        return FrameError("invalid_event", f"{kind}: {exc}", terminal=False, event_id=event_id)


MAX_EVENT_ID = 128
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _why(frame: str | bytes, exc: msgspec.DecodeError) -> str:
    """msgspec's reason, except where it misleads: a lone UTF-16 surrogate escape is reported as truncation."""
    text = frame if isinstance(frame, str) else frame.decode("utf-8", "replace")
    if "truncated" in str(exc) and _SURROGATE.search(text):
        return "a \\u escape names a lone UTF-16 surrogate (\\ud800-\\udfff without its pair)"
    return str(exc)


_TYPES = {cls.__struct_config__.tag for cls in ClientEvent.__args__}  # type: ignore[attr-defined]


def dialect_of(event: ClientEvent) -> Dialect | None:
    """The dialect a connection's first event implies, or None (the configured default applies)."""
    if isinstance(event, TranscriptionSessionUpdate):
        return "openai"
    if isinstance(event, SessionUpdate):
        return "openai" if ("type" in event.session or "audio" in event.session) else "voxt"
    if isinstance(event, TranscriptionDone):
        return "voxt"
    return None


def _with_constants(frame: str | bytes) -> Any:
    """A frame that is JSON but for NaN, Infinity or -Infinity (which Python's json.dumps writes), decoded with them
    as floats; None for anything else that is not JSON."""
    seen: list[str] = []

    def constant(name: str) -> float:
        seen.append(name)
        return float(name)

    try:
        value = json.loads(frame, parse_constant=constant)
    except (ValueError, RecursionError):
        return None
    return value if seen else None
