"""A WebSocket response whose size cap is the route's own, in bytes on the wire, and whose over-cap message gets the
route's documented error, then a 1009 close frame and a clean close.

aiohttp refuses a data frame whose declared length passes ``max_msg_size`` as soon as it has read the frame's header
(none of the payload is kept; the rest is read and dropped), and likewise a fragmented or compressed message as soon
as its bytes pass the cap. It then closes the socket with 1009 inside ``receive()``, before the route could say
anything: this response says the route's error first.

aiohttp also closes the TCP connection right after its close frame, while the peer is still sending the rest of the
message: the kernel answers the unread bytes with a reset, and a client still writing loses the error and the close
frame it had not read (it sees 1006: no close frame). Here the closing handshake is completed instead: the rest of
the refused message is read and dropped, and the connection is closed (a FIN) once the peer's own close frame has
come, or the peer has closed, or ``LINGER_S`` have passed. ``PeerFrames`` finds the peer's close frame: aiohttp's
reader stops parsing at the refusal, so the frame boundaries are followed beside it from the first byte."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import WSCloseCode, web

# How long a refused peer may go on sending (its bytes are dropped unread) before the server closes anyway.
LINGER_S = 10.0
OP_CLOSE = 0x8


class PeerFrames:
    """The frame boundaries of the bytes a peer sends (headers parsed, payloads skipped, nothing kept but a partial
    header), calling ``on_close`` once the peer's close frame is complete."""

    def __init__(self, on_close: Callable[[], None]) -> None:
        self.on_close = on_close
        self.header = bytearray()
        self.skip = 0  # payload bytes of the current frame still to come
        self.closing = False  # the current frame is the peer's close frame

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self.skip:
                n = min(self.skip, len(view))
                self.skip -= n
                view = view[n:]
            else:
                need = self._header_length() - len(self.header)
                self.header += view[:need]
                view = view[need:]
                if len(self.header) < self._header_length():
                    continue  # the rest of the header is in a later chunk
                self.closing = self.header[0] & 0x0F == OP_CLOSE
                self.skip = self._payload_length()
                self.header.clear()
            if self.closing and not self.skip:
                self.closing = False
                self.on_close()

    def _header_length(self) -> int:
        if len(self.header) < 2:
            return 2
        size = self.header[1] & 0x7F
        return 2 + {126: 2, 127: 8}.get(size, 0) + (4 if self.header[1] & 0x80 else 0)

    def _payload_length(self) -> int:
        size = self.header[1] & 0x7F
        if size < 126:
            return size
        width = 2 if size == 126 else 8
        return int.from_bytes(self.header[2 : 2 + width], "big")


class _Refusable:
    """aiohttp's frame reader with the peer's frames followed beside it. Once the reader refuses (it parses nothing
    more), the connection is kept open, not closed: later bytes are only followed, for the peer's close frame."""

    def __init__(self, reader, frames: PeerFrames) -> None:
        self.reader, self.frames = reader, frames
        self.refused = False

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        self.frames.feed(data)
        if not self.refused:
            eof, tail = self.reader.feed_data(data)
            if not eof:
                return eof, tail
            self.refused = True  # the reader's error is queued for receive(), which closes
        return False, b""

    def feed_eof(self) -> None:
        self.reader.feed_eof()


class CappedWebSocket(web.WebSocketResponse):
    def __init__(self, max_bytes: int, too_large: Callable[[], Awaitable[None]], **kwargs) -> None:
        # aiohttp refuses a message of max_msg_size bytes or more: one more byte lets exactly max_bytes through.
        super().__init__(max_msg_size=max_bytes + 1, **kwargs)
        self._too_large: Callable[[], Awaitable[None]] | None = too_large
        self._transport: asyncio.BaseTransport | None = None
        self._peer_closed = asyncio.Event()
        self._lingering = False

    @property
    def refused_too_large(self) -> bool:
        """Whether a message over the cap ended this socket (its error already sent)."""
        return self._too_large is None

    def _post_start(self, request, protocol, writer) -> None:
        """aiohttp's start, with its reader wrapped before it reads a byte (the bytes that came with the handshake
        included), so that the frames are followed from the first."""
        handler = request.protocol
        early = bytes(getattr(handler, "_message_tail", b""))
        super()._post_start(request, protocol, writer)
        reader = getattr(handler, "_payload_parser", None)
        if reader is None:
            return  # another aiohttp: the close stays aiohttp's own
        frames = PeerFrames(self._peer_closed.set)
        frames.feed(early)
        handler._payload_parser = _Refusable(reader, frames)
        self._transport = request.transport

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        if code != WSCloseCode.MESSAGE_TOO_BIG or self.closed or self._too_large is None:
            return await super().close(code=code, message=message, drain=drain)
        say, self._too_large = self._too_large, None
        with contextlib.suppress(ConnectionError, RuntimeError):  # a peer already gone hears nothing
            await say()
        self._lingering = self._transport is not None
        try:
            return await super().close(code=code, message=message, drain=drain)
        finally:
            if self._lingering:
                self._lingering = False
                await self._close_after_peer()

    def _close_transport(self) -> None:
        """aiohttp's last step of a close; after an over-cap message, ``_close_after_peer`` takes it instead."""
        if not self._lingering:
            super()._close_transport()

    async def _close_after_peer(self) -> None:
        """The end of the closing handshake: the peer's close frame (its refused message read and dropped before
        it), or its end of the connection (aiohttp then cancels this handler), or LINGER_S; then the close."""
        assert self._transport is not None
        if self._transport.is_closing():
            return  # the peer is gone already
        try:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._peer_closed.wait(), LINGER_S)
        finally:
            self._transport.close()
