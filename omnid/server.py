"""``omnid serve``: one aiohttp application on uvloop, its engines loading while /health says so.

Supervised mode (wire.md section 2) is how Voxt runs the daemon: exactly one JSON line on stdout when ready
(or failed), commands on stdin, and the parent's death (end of stdin) ends the daemon.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time

import structlog
from aiohttp import web

from omnid.api import realtime
from omnid.api.app import create_app
from omnid.config import Config
from omnid.logging import reopen_log_file, set_log_content
from omnid.services import Services

log = structlog.get_logger(__name__)


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
        sock = socket.create_server((self.config.server.host, self.config.server.port))
        site = web.SockSite(self.runner, sock)
        await site.start()
        self.port = sock.getsockname()[1]
        log.info("server_listening", host=self.config.server.host, port=self.port)
        await self.services.start()

    async def drain(self) -> None:
        """SIGTERM: no new work; open realtime sessions get their finals and a closing error; running jobs may
        finish. Whatever is left after server.shutdown_grace_s is cancelled by stop()."""
        grace = self.config.server.shutdown_grace_s
        started = time.monotonic()
        self.services.draining = True
        await realtime.shut_down(self.app[realtime.REGISTRY], grace)
        idle = await self.services.idle(max(0.0, grace - (time.monotonic() - started)))
        log.info("server_drained", idle=idle, seconds=round(time.monotonic() - started, 3))

    async def stop(self) -> None:
        self.services.close()
        await self.runner.cleanup()


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def _watch_stdin(stop: asyncio.Event, reason: list[str]) -> None:
    """Reads control lines from the parent: a shutdown command or end of input stops the daemon."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            reason.append("eof")
            break
        try:
            command = json.loads(line)
        except ValueError:
            continue  # malformed lines are ignored
        if isinstance(command, dict) and command.get("command") == "shutdown":
            reason.append("shutdown")
            break
    stop.set()


async def serve(config: Config, supervised: bool = False) -> int:
    started = time.monotonic()
    stop = asyncio.Event()
    reason: list[str] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if sig == signal.SIGHUP and not supervised:
            reopen_log_file()  # log rotation; a supervised daemon exits on SIGHUP (wire.md section 2)
            return
        reason.append(sig.name.lower())
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal, sig)
    server: Server | None = None
    try:
        server = Server(config)
        await server.start()
    except Exception as exc:
        log.error("startup_failed", reason=str(exc))
        if supervised:
            _emit({"event": "failed", "reason": str(exc)})
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
        await server.drain()  # the parent's shutdown command, its death or SIGHUP cancel at once
    await server.stop()
    if supervised:
        watcher.cancel()
        if reason and reason[0] == "shutdown":
            _emit({"event": "stopped"})
    return 0


def run(config: Config, supervised: bool = False) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional off Unix
        return asyncio.run(serve(config, supervised))
    return uvloop.run(serve(config, supervised))
