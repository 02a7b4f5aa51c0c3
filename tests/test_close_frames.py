"""Every WebSocket route answers an oversized message with its error event, then a 1009 close frame, then a clean
close: the client may finish sending, reads both, and the connection ends with the closing handshake and a FIN, not
a reset (issue 42). A real daemon, real sockets, real clients (aiohttp, websockets, and a raw socket that looks at
the bytes and at how the connection ends)."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
import threading

import aiohttp
import pytest
import websockets

from omnid.api.websocket import PeerFrames

TOO_BIG = 1009
VAD = "/v1/vad/stream"
DIARIZATION = "/v1/diarization/stream"
REALTIME = "/v1/realtime?protocol=voxt"

# The route, the oversized message, and a piece of its error event (the route's own text).
CASES = [
    pytest.param(VAD, bytes(40_000_000), "longer than 30 s", id="vad 40 MB"),
    pytest.param(DIARIZATION, bytes(1_048_576), "at most 240639 samples", id="diarization 1 MB"),
    pytest.param(DIARIZATION, bytes(8_388_608), "at most 240639 samples", id="diarization 8 MB"),
    pytest.param(DIARIZATION, bytes(40_000_000), "at most 240639 samples", id="diarization 40 MB"),
    pytest.param(REALTIME, "x" * 3_000_000, "frame_too_large", id="realtime 3 MB"),
    pytest.param(REALTIME, "x" * 40_000_000, "frame_too_large", id="realtime 40 MB"),
]


@pytest.fixture
def daemon(request, server):
    """The diarization stream needs the daemon with the tiny Sortformer; the others are on the default one."""
    return request.getfixturevalue("sortformer_daemon") if request.node.callspec.params["route"] == DIARIZATION \
        else server


@pytest.mark.parametrize("route, message, says", CASES)
def test_aiohttp_reads_the_error_then_the_1009_close_frame(daemon, route, message, says):
    async def go() -> tuple[list[str], int | None, BaseException | None]:
        async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + route, max_msg_size=0) as ws:
            if isinstance(message, str):
                await ws.send_str(message)  # a reset while sending raises here: the test fails on it
            else:
                await ws.send_bytes(message)
            texts = [msg.data async for msg in ws if msg.type == aiohttp.WSMsgType.TEXT]
            return texts, ws.close_code, ws.exception()

    texts, code, failure = asyncio.run(asyncio.wait_for(go(), 60))
    assert len(texts) == 1 and says in texts[0], texts
    assert code == TOO_BIG, (code, failure)  # 1006 when the close frame never came


@pytest.mark.parametrize("route, message, says", CASES)
def test_websockets_reads_the_error_then_the_1009_close_frame(daemon, route, message, says):
    async def go() -> tuple[list[str], websockets.ConnectionClosed]:
        async with websockets.connect(daemon.ws_url + route, max_size=None, open_timeout=30) as ws:
            await ws.send(message)  # a reset while sending raises ConnectionClosedError here
            texts = []
            try:
                while True:
                    texts.append(await ws.recv())
            except websockets.ConnectionClosed as closed:
                return texts, closed

    texts, closed = asyncio.run(asyncio.wait_for(go(), 60))
    assert len(texts) == 1 and says in texts[0], texts
    assert closed.rcvd is not None and closed.rcvd.code == TOO_BIG, closed
    assert closed.sent is not None and closed.sent.code == TOO_BIG  # the handshake's reply


def _handshake(port: int, route: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(f"GET {route} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)  # byte by byte: nothing after the handshake is taken here
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def _frame(opcode: int, payload: bytes) -> bytes:
    """A client's frame: masked (with a zero mask, so the payload is sent as is)."""
    n = len(payload)
    size = bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n) if n < 65536 \
        else bytes([0x80 | 127]) + struct.pack("!Q", n)
    return bytes([0x80 | opcode]) + size + bytes(4) + payload


def _read_frame(sock: socket.socket) -> tuple[int, bytes]:
    def exactly(n: int) -> bytes:
        got = b""
        while len(got) < n:
            chunk = sock.recv(n - len(got))
            assert chunk, f"the connection ended inside a frame (after {got!r})"
            got += chunk
        return got

    first, second = exactly(2)
    n = second & 0x7F
    n = struct.unpack("!H", exactly(2))[0] if n == 126 else struct.unpack("!Q", exactly(8))[0] if n == 127 else n
    return first & 0x0F, exactly(n)


@pytest.mark.parametrize("route, message, says", [c for c in CASES if "40 MB" in c.id])
def test_the_connection_ends_with_the_closing_handshake_and_a_fin(daemon, route, message, says):
    """On the wire: the whole message is sent (no reset while sending), the error event and a 1009 close frame come,
    and after the client's own close frame the server ends the connection with a FIN (recv gives b""), not a reset."""
    sock = _handshake(daemon.server.port, route)
    payload = message.encode() if isinstance(message, str) else message
    sent: list[BaseException | None] = []

    def send() -> None:
        try:
            sock.sendall(_frame(0x1 if isinstance(message, str) else 0x2, payload))
            sent.append(None)
        except OSError as exc:
            sent.append(exc)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        frames = [_read_frame(sock), _read_frame(sock)]
        assert frames[0][0] == 0x1 and says in frames[0][1].decode(), frames
        assert frames[1][0] == 0x8 and struct.unpack("!H", frames[1][1][:2])[0] == TOO_BIG, frames
        sender.join(60)
        assert sent == [None], sent  # a reset while the message was still going out
        sock.sendall(_frame(0x8, struct.pack("!H", TOO_BIG)))
        assert sock.recv(65536) == b""  # a FIN; a reset raises ConnectionResetError
    finally:
        sock.close()
        sender.join(60)


def test_the_server_still_answers_a_client_that_never_closes(server, monkeypatch):
    """A peer that sends its oversized frame and then nothing: the server closes after LINGER_S all the same."""
    from omnid.api import websocket

    monkeypatch.setattr(websocket, "LINGER_S", 0.5)
    sock = _handshake(server.server.port, VAD)
    try:
        sock.sendall(_frame(0x2, bytes(2_000_000)))
        assert _read_frame(sock)[0] == 0x1 and _read_frame(sock)[0] == 0x8
        assert sock.recv(65536) == b""  # closed without the client's close frame
    finally:
        sock.close()


# --- the frame follower itself ------------------------------------------------------------------------------------


def _follow(data: bytes, chunk: int) -> int:
    closes = []
    frames = PeerFrames(lambda: closes.append(True))
    for i in range(0, len(data), chunk):
        frames.feed(data[i : i + chunk])
    return len(closes)


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000, 10**9])
def test_the_peers_close_frame_is_found_after_frames_of_every_length_form(chunk):
    close = _frame(0x8, struct.pack("!H", 1000))
    stream = (_frame(0x2, bytes(100)) + _frame(0x1, b"\x88" * 300) + _frame(0x2, b"\x88\x82" * 40_000)
              + _frame(0x9, b"ping") + _frame(0x0, bytes(70_000)))
    assert _follow(stream, chunk) == 0  # close bytes inside payloads are payload
    assert _follow(stream + close[:-1], chunk) == 0  # not complete yet
    assert _follow(stream + close, chunk) == 1
    assert _follow(_frame(0x8, b""), chunk) == 1


def test_an_unmasked_header_is_followed_too():
    closes = []
    frames = PeerFrames(lambda: closes.append(True))
    frames.feed(bytes([0x82, 126]) + struct.pack("!H", 300) + bytes(300) + bytes([0x88, 2]) + b"\x03\xe8")
    assert closes == [True]

