"""``omnid listen`` as a user runs it: a subprocess streaming a corpus file at real-time speed to a running
daemon, printing each final on its own line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from omnid.engine.options import TranscribeOptions
from tests.helpers import CORPUS, as_received, clip_audio, manifest, word_errors

CLIP = "librispeech_3080-5032-0000"  # 4.6 s


def listen(server, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "omnid", "listen", "--url", server.url, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMNID_LOG_LEVEL": "warning"},
    )


@pytest.mark.parametrize("protocol", ["voxt", "openai"])
def test_listen_file_prints_the_clips_transcript(server, engine, protocol):
    offline = engine.transcribe(as_received(clip_audio(CLIP)), TranscribeOptions()).text
    proc = listen(server, "--protocol", protocol, "--file", str(CORPUS / manifest()[CLIP]["path"]))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    # Server VAD may end a turn at a pause inside the clip: the lines together are the transcript.
    assert word_errors(" ".join(out.splitlines()), offline) <= 1, (out, offline)


def test_ctrl_c_flushes_what_was_said(server, engine):
    path = CORPUS / manifest()["ljspeech_LJ001-0001"]["path"]  # 9.7 s, interrupted after ~4 s
    proc = listen(server, "--file", str(path))
    time.sleep(5.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)  # it flushes the turn's final, then exits
    assert proc.returncode == 0, err
    said = " ".join(out.split())
    full = engine.transcribe(clip_audio("ljspeech_LJ001-0001"), TranscribeOptions()).text
    assert said and len(said) < len(full), (said, full)
    assert said.split()[0].strip(",").lower() == full.split()[0].strip(",").lower()


def test_without_portaudio_the_microphone_is_a_clear_message(monkeypatch, capsys):
    from omnid.cli import listen as module

    monkeypatch.setitem(sys.modules, "sounddevice", None)  # import fails as it does without libportaudio
    assert module.portaudio_status() is not None
    assert module.run("http://127.0.0.1:9", "voxt", None, 1.0, None) == 1
    err = capsys.readouterr().err
    assert "PortAudio" in err and "--file" in err and "Traceback" not in err


def test_an_unreachable_daemon_is_a_clear_message(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "omnid", "listen", "--url", "http://127.0.0.1:9",
         "--file", str(CORPUS / manifest()[CLIP]["path"])], capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1 and "cannot reach omnid" in proc.stderr and "Traceback" not in proc.stderr
