"""A busy port is one clear line naming it and how to choose another (``make serve PORT=...`` or ``omnid serve
--port``), exit 1, no traceback; ``make serve PORT=...`` serves on that port, and without PORT on the config's
(issue 42). Real processes on real sockets."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def busy_port():
    """A port a listening socket holds for the test."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        yield holder.getsockname()[1]


def serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "omnid", "serve", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.PIPE, cwd=ROOT)


def test_omnid_serve_on_a_busy_port_is_one_line_naming_it(busy_port):
    proc = serve("--port", str(busy_port))
    assert proc.returncode == 1, proc
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"port {busy_port} " in lines[0] and "already in use" in lines[0], lines
    assert f"make serve PORT={busy_port + 1}" in lines[0] and f"omnid serve --port {busy_port + 1}" in lines[0]


def test_supervised_the_failed_line_says_the_same(busy_port):
    proc = serve("--port", str(busy_port), "--supervised")
    assert proc.returncode == 1, proc
    (line,) = proc.stdout.splitlines()
    event = json.loads(line)
    assert event["event"] == "failed" and f"port {busy_port} " in event["reason"], event
    assert "omnid serve --port" in event["reason"] and "Traceback" not in proc.stderr


def test_make_serve_on_a_busy_port_shows_the_line(busy_port):
    # -o setup: the set-up step counts as done (the test runs in a set-up checkout, and must not install anything)
    proc = subprocess.run(["make", "-s", "-o", "setup", "serve", f"PORT={busy_port}"], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert proc.returncode != 0, proc
    assert "Traceback" not in proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith("omnid: ") and f"port {busy_port} " in first and "make serve PORT=" in first, proc.stderr


def test_make_passes_port_only_when_it_is_set():
    def dry(*args: str) -> str:
        return subprocess.run(["make", "-n", "-o", "setup", *args], capture_output=True, text=True, timeout=60,
                              cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "PORT"}).stdout

    assert "omnid serve --port 8123" in dry("serve", "PORT=8123")
    assert "--port" not in dry("serve")  # the config's server.port, as before
    sample = "tests/corpus/audio/en/jfk_inaugural_excerpt.flac"
    assert sample in dry("transcribe") and (ROOT / sample).is_file()  # make transcribe's clip is in the checkout


def test_make_serve_port_serves_there():
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # free a moment ago
    proc = subprocess.Popen(["make", "-s", "-o", "setup", "serve", f"PORT={port}"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, cwd=ROOT,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        assert select.select([proc.stdout], [], [], 300)[0], "no line from make serve"
        assert proc.stdout.readline().strip() == f"omnid listening on http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
