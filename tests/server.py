"""A real omnid server on a real socket, in a thread with its own event loop, for tests with real clients."""

from __future__ import annotations

import asyncio
import threading

from omnid.cli.serve import Server
from omnid.config import Config, load_config


class ServerThread:
    def __init__(self, config: Config | None = None, overrides: dict | None = None, services=None):
        self.config = config or load_config(overrides={"server": {"port": 0}, **(overrides or {})})
        self.loop = asyncio.new_event_loop()
        self.server = Server(self.config, services(self.config) if services else None)
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> "ServerThread":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(120)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.server.port}"
