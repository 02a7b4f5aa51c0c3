"""``omnid serve``: one aiohttp application on uvloop, its engines loading while /health says so.

Supervised mode (wire.md section 2) is how Voxt runs the daemon: exactly one JSON line on stdout when ready
(or failed), commands on stdin, and the parent's death (end of stdin) ends the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback

import structlog
from aiohttp import web

from omnid.api import diarization, realtime
from omnid.api.app import create_app
from omnid.api.errors import answer_protocol_errors_in_json
from omnid.cli import failures
from omnid.cli.process_exit import exit_now
from omnid.config import Config
from omnid.logging import reopen_log_file, set_log_content
from omnid.runtime.registry import Services

log = structlog.get_logger(__name__)


class PortInUse(Exception):
    """The port to serve on is taken: which, and how to choose another, in one line."""

    def __init__(self, host: str, port: int) -> None:
        other = port + 1 if port < 65535 else port - 1
        super().__init__(f"port {port} on {host} is already in use (another omnid, or another program). Choose "
                         f"another port: make serve PORT={other}, or omnid serve --port {other}")


class Server:
    """Binds first (so /health answers 'loading' at once), then loads the engines."""

    def __init__(self, config: Config, services: Services | None = None):
        self.config = config
        set_log_content(config.security.log_content)
        self.services = services or Services.create(config)
        # handler_cancellation: a client that disconnects cancels its handler, and so its engine job.
        self.app = create_app(self.services)
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False, handler_cancellation=True)
        self.port: int | None = None

    async def start(self) -> None:
        await self.runner.setup()
        assert self.runner.server is not None  # set by setup()
        answer_protocol_errors_in_json(self.runner.server)
        host, port = self.config.server.host, self.config.server.port
        try:
            sock = socket.create_server((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(host, port) from None
            raise
        site = web.SockSite(self.runner, sock)
        await site.start()
        self.port = sock.getsockname()[1]
        log.info("server_listening", host=self.config.server.host, port=self.port,
                 trims_heap_when_idle=self.services.heap.available)
        if self.config.default_model_chosen:
            log.info("default_model_chosen", model=self.config.transcription.default_model,
                     why=self.config.default_model_chosen)
        await self.services.start()

    async def drain(self, hurry: asyncio.Event) -> None:
        """SIGTERM: /health says "draining" for server.drain_notice_s while work is still taken (a load balancer
        stops sending any); then no new work; open realtime sessions get their finals and a closing error; running
        jobs may finish. Whatever is left after server.shutdown_grace_s is cancelled by stop()."""
        notice = self.config.server.drain_notice_s
        self.services.leaving = True
        if notice:  # a second SIGTERM or Ctrl-C cuts it short
            log.info("server_leaving", notice_s=notice)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(hurry.wait(), notice)
        grace = self.config.server.shutdown_grace_s
        started = time.monotonic()
        self.services.draining = True
        await realtime.shut_down(self.app[realtime.REGISTRY], grace)
        await diarization.shut_down(self.app[diarization.STREAMS])
        idle = await self.services.idle(max(0.0, grace - (time.monotonic() - started)))
        log.info("server_drained", idle=idle, seconds=round(time.monotonic() - started, 3))

    async def stop(self) -> None:
        self.services.close()
        await self.runner.cleanup()


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _emit_stopped() -> None:
    """The last line: the parent may be gone (its end of stdout closed, or a hung-up terminal), which must not
    turn a clean stop into a traceback."""
    with contextlib.suppress(OSError, ValueError):
        _emit({"event": "stopped"})


# A control line is a few dozen bytes; anything longer is skipped whole (up to its newline) and never buffered.
MAX_CONTROL_LINE = 65536


async def _watch_stdin(stop: asyncio.Event, reason: list[str]) -> None:
    """Follows the parent through stdin: a shutdown command or the end of input stops the daemon. Nothing the
    parent writes can end this watch early: end of input always stops the daemon (the parent is gone).

    Stdin is read by a blocking thread, whatever it is. The event loop cannot take every kind: libuv (uvloop)
    aborts the process (SIGABRT) on a descriptor epoll refuses, a regular file or /dev/null, and asyncio's own
    loop raises; watching a pipe or a terminal through the loop would also make the parent's descriptor
    non-blocking. A stdin closed when the process started is the end of input at once."""
    fd = _stdin_fd()
    if fd is None:
        reason.append("eof")
    else:
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[str] = loop.create_future()

        def settle(why: str) -> None:
            if not outcome.done():
                outcome.set_result(why)

        def follow() -> None:
            try:
                why = _follow_stdin(fd)
            except Exception:  # noqa: BLE001  (an unreadable stdin means no parent to follow: stop, not orphan)
                log.exception("stdin_watch_failed")
                why = "eof"
            with contextlib.suppress(RuntimeError):  # the loop already closed: the daemon has stopped anyway
                loop.call_soon_threadsafe(settle, why)

        # A daemon thread: a read blocked on a parent that never writes again must not hold the exit.
        threading.Thread(target=follow, name="omnid-stdin", daemon=True).start()
        reason.append(await outcome)
    stop.set()


def _stdin_fd() -> int | None:
    """Stdin's descriptor, or None when the process started without one (``0<&-``: Python then sets sys.stdin to
    None, and descriptor 0 may since have been reused, by the listening socket for one, so it is never read)."""
    if sys.stdin is None:
        return None
    try:
        return sys.stdin.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation: a stream without a descriptor
        return None


def _follow_stdin(fd: int) -> str:
    """Blocking: reads control lines from ``fd`` until a shutdown command ("shutdown") or the end of input
    ("eof")."""
    lines = ControlLines()
    while chunk := _read(fd):
        if any(_is_shutdown(line) for line in lines.feed(chunk)):
            return "shutdown"
    return "eof"


def _read(fd: int) -> bytes:
    """One chunk, waiting for it: a descriptor inherited in non-blocking mode (a parent may share it so) is
    waited on with select instead of being read as the end of input."""
    while True:
        try:
            return os.read(fd, MAX_CONTROL_LINE)
        except BlockingIOError:
            select.select([fd], [], [])


class ControlLines:
    """Splits stdin into lines, dropping any line longer than MAX_CONTROL_LINE without keeping it."""

    def __init__(self) -> None:
        self.partial = bytearray()
        self.skipping = False  # inside an over-long line, until its newline

    def feed(self, chunk: bytes) -> list[bytes]:
        *complete, rest = chunk.split(b"\n")
        lines = []
        for piece in complete:
            if not self.skipping:
                lines.append(bytes(self.partial + piece))
            self.partial.clear()
            self.skipping = False
        if not self.skipping:
            self.partial += rest
            if len(self.partial) > MAX_CONTROL_LINE:
                self.partial.clear()
                self.skipping = True
        return [line for line in lines if len(line) <= MAX_CONTROL_LINE]


def _is_shutdown(line: bytes) -> bool:
    try:
        command = json.loads(line)
    except (ValueError, RecursionError):
        return False  # malformed lines are ignored
    return isinstance(command, dict) and command.get("command") == "shutdown"


async def serve(config: Config, supervised: bool = False) -> int:
    started = time.monotonic()
    stop = asyncio.Event()
    hurry = asyncio.Event()  # a second signal while draining: end the drain notice now
    reason: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if sig == signal.SIGHUP and not supervised:
            reopen_log_file()  # log rotation; a supervised daemon exits on SIGHUP (wire.md section 2)
            return
        if stop.is_set():
            hurry.set()
        reason.append(sig.name.lower())
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)
    server: Server | None = None
    try:
        server = Server(config)
        await server.start()
    except Exception as exc:
        # One line naming the file (and the tensor or key), as every command's error (omnid/cli/failures.py): on
        # stdout as the failed event for the parent, on stderr for a person at the terminal; exit 1 either way.
        message = failures.one_line(exc)
        if supervised or config.server.log_file:
            log.error("startup_failed", reason=message)
        if supervised:
            if failures.debug():
                traceback.print_exception(exc, file=sys.stderr)
            _emit({"event": "failed", "reason": message})
        else:
            failures.report(exc)
        if server is not None:
            await server.stop()
        return 1
    if supervised:
        _emit({
            "event": "ready",
            "host": config.server.host,
            "port": server.port,
            "model_name": config.transcription.default_model,
            "server_pid": os.getpid(),
            "startup_s": round(time.monotonic() - started, 3),
        })
        watcher = asyncio.ensure_future(_watch_stdin(stop, reason))
    else:
        print(f"omnid listening on http://{config.server.host}:{server.port}", flush=True)
    await stop.wait()
    why = reason[0] if reason else "signal"
    log.info("server_stopping", reason=why)
    if why in ("sigterm", "sigint"):
        await server.drain(hurry)  # the parent's shutdown command, its death or SIGHUP cancel at once
    await server.stop()
    if supervised:
        watcher.cancel()
        _emit_stopped()  # however it stopped: the shutdown command, the end of stdin or a signal
    return 0


def run(config: Config, supervised: bool = False) -> int:
    """Serves until stopped, then ends the process at once with the exit code: everything the daemon owns is
    already closed by then, and leaving through interpreter teardown, with engine and executor threads still
    inside native code, can abort (SIGABRT) instead of returning the code Voxt relies on."""

    async def main() -> int:
        exit_now(await serve(config, supervised))

    try:
        import uvloop
    except ImportError:  # uvloop is optional off Unix
        return asyncio.run(main())
    return uvloop.run(main())
