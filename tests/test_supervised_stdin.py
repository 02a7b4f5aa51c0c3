"""The supervised daemon follows whatever stdin its parent gives it: a pipe, /dev/null, a regular file, a closed
descriptor, a terminal. Each gives its ready line, then ``{"event": "stopped"}`` and exit 0 when its input ends
(or says shutdown). uvloop used to abort (SIGABRT, exit 134) on any stdin epoll refuses: /dev/null, a file.

The real daemon runs here; every wait is a generous timeout, and nothing is timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SERVE = ["-m", "omnid", "serve", "--supervised", "--port", "0"]
SHUTDOWN = json.dumps({"command": "shutdown"})
TIMEOUT_S = 300  # a loaded machine loads tiny.en slowly: only a hang reaches this


def start(tmp_path: Path, stdin, close_stdin: bool = False) -> tuple[subprocess.Popen, Path]:
    """The daemon with the given stdin (``close_stdin``: none at all, as ``0<&-`` gives), its log in a file."""
    log = tmp_path / "stderr.log"
    with log.open("wb") as err:
        if close_stdin:  # the shell closes descriptor 0, then becomes the daemon (same pid)
            argv = ["sh", "-c", 'exec "$0" "$@" 0<&-', sys.executable, *SERVE]
        else:
            argv = [sys.executable, *SERVE]
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=stdin, stdout=subprocess.PIPE, stderr=err, text=True)
    return proc, log


def ready(proc: subprocess.Popen, log: Path) -> dict:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, log.read_text()[-4000:]
    event = json.loads(line)
    assert event["event"] == "ready" and event["port"] > 0 and event["server_pid"] == proc.pid, event
    return event


def stops_cleanly(proc: subprocess.Popen, log: Path, reason: str, written: str | None = None) -> None:
    """After the ready line: exactly ``stopped`` on stdout, exit 0, and the log naming why it stopped.
    ``written``: what the test writes down the stdin pipe before closing it."""
    # Not communicate(): it reads the pipe's descriptor, past what ready()'s readline already buffered, and a daemon
    # that stops at once (a closed stdin, on a busy machine) may have sent its stopped line in the same read.
    assert proc.stdout is not None
    try:
        if proc.stdin is not None:
            if written is not None:
                proc.stdin.write(written)
            proc.stdin.close()
        proc.wait(timeout=TIMEOUT_S)
        rest = proc.stdout.read()
    finally:
        proc.kill()
    logged = log.read_text()
    assert proc.returncode == 0, (proc.returncode, logged[-4000:])
    assert [json.loads(line) for line in rest.splitlines()] == [{"event": "stopped"}]
    stopping = [json.loads(line) for line in logged.splitlines() if '"server_stopping"' in line]
    assert [event["reason"] for event in stopping] == [reason], logged[-4000:]


def test_stdin_from_dev_null_is_the_end_of_input(tmp_path):
    with open(os.devnull, "rb") as null:
        proc, log = start(tmp_path, null)
    ready(proc, log)
    stops_cleanly(proc, log, "eof")


def test_stdin_from_a_file_with_a_garbage_line_then_nothing(tmp_path):
    commands = tmp_path / "commands"
    commands.write_text("this is not json\n")
    with commands.open("rb") as f:
        proc, log = start(tmp_path, f)
    ready(proc, log)
    stops_cleanly(proc, log, "eof")


def test_stdin_from_a_file_is_read_as_commands(tmp_path):
    commands = tmp_path / "commands"  # an over-long line and a malformed one are skipped; the command is obeyed
    commands.write_text("x" * 100_000 + "\n" + "[" * 1000 + "\n" + SHUTDOWN + "\n" + "after the command\n")
    with commands.open("rb") as f:
        proc, log = start(tmp_path, f)
    ready(proc, log)
    stops_cleanly(proc, log, "shutdown")


def test_stdin_closed_from_the_start(tmp_path):
    proc, log = start(tmp_path, None, close_stdin=True)
    ready(proc, log)
    stops_cleanly(proc, log, "eof")


def test_a_pipe_the_parent_closes(tmp_path):
    proc, log = start(tmp_path, subprocess.PIPE)
    ready(proc, log)
    stops_cleanly(proc, log, "eof", written="not json\n" + "y" * 100_000 + "\n")  # ignored, then the pipe closes


@pytest.mark.parametrize("typed, reason", [(SHUTDOWN + "\n", "shutdown"), ("\x04", "eof")],
                         ids=["shutdown_command", "ctrl_d"])
def test_a_terminal(tmp_path, typed, reason):
    """A pseudo-terminal as stdin, as when someone runs the command by hand: a typed command, or Ctrl-D at the
    start of a line (the terminal's end of input)."""
    main, sub = os.openpty()
    try:
        proc, log = start(tmp_path, sub)
        os.close(sub)
        sub = -1
        ready(proc, log)
        os.write(main, typed.encode())
        stops_cleanly(proc, log, reason)
    finally:
        os.close(main)
        if sub >= 0:
            os.close(sub)
