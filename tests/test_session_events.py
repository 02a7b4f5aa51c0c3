"""Decoding realtime client frames into typed events and errors, and dialect selection by the first event."""

from __future__ import annotations

import json

import pytest

from omnid.realtime.protocol.client_events import (
    AudioAppend,
    AudioClear,
    AudioCommit,
    FrameError,
    SessionUpdate,
    TranscriptionDone,
    TranscriptionSessionUpdate,
    dialect_of,
    parse_frame,
)


@pytest.mark.parametrize(
    "frame, cls",
    [
        ({"type": "input_audio_buffer.append", "audio": "AAAA"}, AudioAppend),
        ({"type": "input_audio_buffer.commit", "event_id": "e1"}, AudioCommit),
        ({"type": "input_audio_buffer.clear"}, AudioClear),
        ({"type": "transcription.done"}, TranscriptionDone),
        ({"type": "session.update", "session": {"language": "en"}}, SessionUpdate),
        ({"type": "transcription_session.update", "session": {"input_audio_format": "pcm16"}}, TranscriptionSessionUpdate),
    ],
)
def test_each_client_event_decodes_to_its_struct(frame, cls):
    assert isinstance(parse_frame(json.dumps(frame)), cls)


@pytest.mark.parametrize(
    "frame, code, terminal",
    [
        ("{not json", "invalid_json", False),
        ("[1, 2]", "invalid_frame", True),
        ('"text"', "invalid_frame", True),
        ('{"type": "response.create"}', "invalid_event", False),
        ('{"no": "type"}', "invalid_event", False),
        ('{"type": "session.update", "session": "flat string"}', "invalid_event", False),
    ],
)
def test_bad_frames_become_the_spec_errors(frame, code, terminal):
    err = parse_frame(frame)
    assert isinstance(err, FrameError) and err.code == code and err.terminal is terminal


def test_event_id_is_kept_for_error_replies():
    err = parse_frame('{"type": "bogus", "event_id": "evt_9"}')
    assert isinstance(err, FrameError) and err.event_id == "evt_9"


@pytest.mark.parametrize(
    "frame, dialect",
    [
        ({"type": "transcription_session.update", "session": {}}, "openai"),
        ({"type": "session.update", "session": {"type": "transcription"}}, "openai"),
        ({"type": "session.update", "session": {"audio": {"input": {}}}}, "openai"),
        ({"type": "session.update", "session": {"language": "en", "turn_detection": None}}, "voxt"),
        ({"type": "transcription.done"}, "voxt"),
        ({"type": "input_audio_buffer.append", "audio": "AAAA"}, None),
    ],
)
def test_first_event_selects_the_dialect(frame, dialect):
    assert dialect_of(parse_frame(json.dumps(frame))) == dialect
