"""The daemon as Voxt and a new user start it: supervised mode, the README's start command, config errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import CORPUS, get, manifest, ready_line, reference, spawn

ROOT = Path(__file__).resolve().parents[1]


def test_supervised_ready_then_shutdown_command():
    proc = spawn("serve", "--supervised", "--port", "0")
    try:
        ready = ready_line(proc)
        assert ready["event"] == "ready" and ready["host"] == "127.0.0.1" and ready["port"] > 0
        assert ready["model_name"] == "tiny.en" and ready["server_pid"] == proc.pid and ready["startup_s"] > 0
        status, health = get(f"http://127.0.0.1:{ready['port']}/health")
        assert status == 200 and health["status"] == "healthy" and health["request_states"] == {}
        proc.stdin.write("this is not json\n")  # ignored
        proc.stdin.write('{"command": "shutdown"}\n')
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline()) == {"event": "stopped"}
        assert proc.wait(15) == 0
        assert proc.stdout.read() == ""  # nothing else on stdout
    finally:
        proc.kill()


def test_supervised_exits_when_stdin_closes_and_on_signals():
    proc = spawn("serve", "--supervised", "--port", "0")
    try:
        assert ready_line(proc)["event"] == "ready"
        proc.stdin.close()
        assert proc.wait(15) == 0
    finally:
        proc.kill()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        proc = spawn("serve", "--supervised", "--port", "0")
        try:
            assert ready_line(proc)["event"] == "ready"
            proc.send_signal(sig)
            assert proc.wait(15) == 0, sig
        finally:
            proc.kill()


def test_supervised_failure_is_one_failed_line_and_exit_1():
    busy = spawn("serve", "--supervised", "--port", "0")
    try:
        port = ready_line(busy)["port"]
        proc = spawn("serve", "--supervised", "--port", str(port))
        failed = ready_line(proc)
        assert failed["event"] == "failed" and "in use" in failed["reason"].lower()
        assert proc.wait(15) == 1
    finally:
        busy.kill()


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["--port", "eighty"], {}, "--port"),
        (["--port", "70000"], {}, "--port"),
        (["--bogus"], {}, "--bogus"),
        ([], {"OMNID_SERVER_PORT": "abc"}, "OMNID_SERVER_PORT"),
        ([], {"OMNID_ENGINE_MAX_QUEUE": "0"}, "OMNID_ENGINE_MAX_QUEUE"),
    ],
)
def test_bad_options_exit_2_naming_the_option_with_nothing_on_stdout(args, env, needle):
    proc = spawn("serve", "--supervised", *args, env=env)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and out == "" and needle in err


def test_config_precedence_file_then_env_then_flags(tmp_path):
    from omnid.config import load_config

    user = tmp_path / "omnid.toml"
    user.write_text("[server]\nport = 9001\nhost = '127.0.0.2'\n[engine]\nmax_queue = 5\n")
    config = load_config(user)
    assert (config.server.port, config.server.host, config.engine.max_queue) == (9001, "127.0.0.2", 5)
    config = load_config(user, environ={"OMNID_SERVER_PORT": "9002"})
    assert config.server.port == 9002 and config.engine.max_queue == 5
    config = load_config(user, {"server": {"port": 9003}}, environ={"OMNID_SERVER_PORT": "9002"})
    assert config.server.port == 9003


def test_readme_start_command_serves_a_transcription_with_curl():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1).splitlines()
    start = first_block[0].split("#")[0].strip()
    assert "serve" in start
    proc = subprocess.Popen(start, shell=True, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMNID_SERVER_PORT": "0"}, start_new_session=True)
    try:
        port = None
        deadline = time.monotonic() + 180
        while port is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            if m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
                port = int(m.group(1))
        status, health = get(f"http://127.0.0.1:{port}/health")
        assert status == 200 and health["status"] == "healthy"
        clip = "ljspeech_LJ001-0002"
        out = subprocess.run(
            ["curl", "-sS", f"http://127.0.0.1:{port}/v1/audio/transcriptions",
             "-F", f"file=@{CORPUS / manifest()[clip]['path']}", "-F", "model=whisper-1"],
            capture_output=True, text=True, timeout=60,
        )
        assert json.loads(out.stdout)["text"] == reference()[clip].strip()
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the user's terminal
        proc.wait(30)
