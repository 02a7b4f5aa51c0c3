"""A WebSocket response whose size cap is the route's own, in bytes on the wire, and whose over-cap message gets the
route's documented error before the close.

aiohttp refuses a data frame whose declared length passes ``max_msg_size`` as soon as it has read the frame's header
(none of the payload is kept; the rest is read and dropped), and likewise a fragmented or compressed message as soon
as its bytes pass the cap. It then closes the socket with 1009 inside ``receive()``, before the route could say
anything: this response says the route's error first."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import WSCloseCode, web


class CappedWebSocket(web.WebSocketResponse):
    def __init__(self, max_bytes: int, too_large: Callable[[], Awaitable[None]], **kwargs) -> None:
        # aiohttp refuses a message of max_msg_size bytes or more: one more byte lets exactly max_bytes through.
        super().__init__(max_msg_size=max_bytes + 1, **kwargs)
        self._too_large: Callable[[], Awaitable[None]] | None = too_large

    @property
    def refused_too_large(self) -> bool:
        """Whether a message over the cap ended this socket (its error already sent)."""
        return self._too_large is None

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        if code == WSCloseCode.MESSAGE_TOO_BIG and not self.closed and self._too_large is not None:
            say, self._too_large = self._too_large, None
            with contextlib.suppress(ConnectionError, RuntimeError):  # a peer already gone hears nothing
                await say()
        return await super().close(code=code, message=message, drain=drain)
