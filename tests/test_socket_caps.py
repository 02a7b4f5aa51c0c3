"""Every size cap is counted in bytes on the wire, and a message past it gets the route's documented error before
the close: the exact cases an outside probe found ending without one, on a real daemon with real clients."""

from __future__ import annotations

import asyncio
import gzip
import json

import aiohttp
import numpy as np
import pytest
import websockets

from omnid.audio import wav_bytes
from tests.helpers import clip_audio

CAP = 240_639  # the tiny Sortformer's feed cap, as the reference server's
TOO_BIG = 1009


async def refused(url: str, frame: str | bytes) -> tuple[list, int | None]:
    """Sends one frame; the replies until the close, and the close code the server sent."""
    async with websockets.connect(url, max_size=None, open_timeout=30) as ws:
        try:
            await ws.send(frame)
        except websockets.ConnectionClosed:  # closed while still sending: what was said before is still read
            pass
        replies = []
        try:
            while True:
                replies.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        except websockets.ConnectionClosed as closed:
            return replies, closed.rcvd.code if closed.rcvd else None


def health(url: str) -> dict:
    async def go() -> dict:
        async with aiohttp.ClientSession() as http, http.get(url + "/health") as resp:
            return await resp.json()
    return asyncio.run(go())


def settled(url: str) -> dict:
    """/health once the daemon has no request open (the socket's handler ends just after the close)."""
    for _ in range(100):
        h = health(url)
        if h["request_states"] == {}:
            return h
        asyncio.run(asyncio.sleep(0.05))
    return h


@pytest.mark.parametrize("frame", [
    "x" * 3_000_000,  # past aiohttp's own reader cap as well
    "\u20ac" * 400_000,  # 400,000 characters, 1.2 MB on the wire: over the 1 MiB cap in bytes
], ids=["3 MB", "1.2 MB of 3-byte characters"])
def test_a_realtime_frame_over_the_cap_gets_frame_too_large_then_a_close(server, frame):
    replies, code = asyncio.run(refused(server.ws_url + "/v1/realtime?protocol=voxt", frame))
    assert [r["error"]["code"] for r in replies] == ["frame_too_large"], replies
    assert code == TOO_BIG
    h = settled(server.url)
    assert h["status"] == "healthy" and h["request_states"] == {}


def test_a_realtime_frame_at_the_cap_is_read(server):
    """Exactly max_frame_bytes on the wire is within the cap: it is parsed (here: not JSON), not refused."""
    async def go() -> dict:
        async with websockets.connect(server.ws_url + "/v1/realtime?protocol=voxt", max_size=None) as ws:
            await ws.send("x" * 1_048_576)
            return json.loads(await asyncio.wait_for(ws.recv(), 30))

    assert asyncio.run(go())["error"]["code"] == "invalid_json"  # and the session goes on


def test_a_vad_frame_of_40_mb_gets_its_error_then_a_close(server):
    replies, code = asyncio.run(refused(server.ws_url + "/v1/vad/stream", bytes(40_000_000)))
    assert len(replies) == 1 and "longer than 30 s" in replies[0]["error"], replies
    assert code == TOO_BIG
    assert settled(server.url)["request_states"] == {}


def test_a_diarization_feed_of_480001_samples_gets_the_reference_error(sortformer_daemon):
    replies, code = asyncio.run(refused(sortformer_daemon.ws_url + "/v1/diarization/stream",
                                        np.zeros(480_001, np.float32).tobytes()))
    assert replies == [{"error": f"A feed is a binary message of at most {CAP} samples."}]
    assert code == TOO_BIG
    assert settled(sortformer_daemon.url)["request_states"] == {}


@pytest.mark.parametrize("body, says", [(b"this is not gzip at all", "not valid 'gzip' data"),
                                        (gzip.compress(b"--b\r\n")[:-4], "file")],
                         ids=["not gzip", "truncated gzip"])
def test_a_transcription_body_that_is_not_the_gzip_it_claims_is_a_400(server, body, says):
    async def go() -> tuple[int, dict]:
        headers = {"Content-Type": "multipart/form-data; boundary=b", "Content-Encoding": "gzip"}
        async with aiohttp.ClientSession() as http, http.post(server.url + "/v1/audio/transcriptions", data=body,
                                                              headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)

    status, error = asyncio.run(go())
    assert status == 400, error
    assert error["error"]["type"] == "invalid_request_error" and error["error"]["param"] == "file"
    assert says in error["detail"]
    assert settled(server.url)["request_states"] == {}


def test_a_gzip_body_that_is_gzip_is_read(server):
    """The same header on a real gzip body is honoured: the transcription answers."""
    boundary = "b0undary"
    form = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'.encode()
            + wav_bytes(clip_audio("ljspeech_LJ001-0002")) + f"\r\n--{boundary}--\r\n".encode())

    async def go() -> tuple[int, dict]:
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Encoding": "gzip"}
        async with aiohttp.ClientSession() as http, http.post(server.url + "/v1/audio/transcriptions",
                                                              data=gzip.compress(form), headers=headers) as resp:
            return resp.status, await resp.json(content_type=None)

    status, body = asyncio.run(go())
    assert status == 200 and body["text"], body
