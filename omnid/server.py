"""``omnid serve``: one aiohttp application on uvloop, its engines loading while /health says so."""

from __future__ import annotations

import asyncio
import signal
import socket

import structlog
from aiohttp import web

from omnid.api.app import create_app
from omnid.config import Config
from omnid.services import Services

log = structlog.get_logger(__name__)


class Server:
    """Binds first (so /health answers 'loading' at once), then loads the engines."""

    def __init__(self, config: Config):
        self.config = config
        self.services = Services.create(config)
        # handler_cancellation: a client that disconnects cancels its handler, and so its engine job.
        self.runner = web.AppRunner(
            create_app(self.services), access_log=None, handle_signals=False, handler_cancellation=True
        )
        self.port: int | None = None

    async def start(self) -> None:
        await self.runner.setup()
        sock = socket.create_server((self.config.server.host, self.config.server.port), reuse_port=False)
        site = web.SockSite(self.runner, sock)
        await site.start()
        self.port = sock.getsockname()[1]
        log.info("server_listening", host=self.config.server.host, port=self.port)
        await self.services.start()

    async def stop(self) -> None:
        self.services.close()
        await self.runner.cleanup()


async def serve(config: Config) -> int:
    server = Server(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
    except Exception as exc:
        log.error("startup_failed", reason=str(exc))
        await server.stop()
        return 1
    print(f"omnid listening on http://{config.server.host}:{server.port}", flush=True)
    await stop.wait()
    await server.stop()
    return 0


def run(config: Config) -> int:
    try:
        import uvloop
    except ImportError:  # uvloop is optional off Unix
        return asyncio.run(serve(config))
    return uvloop.run(serve(config))
