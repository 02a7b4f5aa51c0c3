"""Hostile and broken inputs, built for the hardening and fuzzing tests: decompression bombs, malformed WAV headers,
raw multipart bodies and raw HTTP requests (bytes no well-behaved client would send)."""

from __future__ import annotations

import asyncio
import io
import struct

import av
import numpy as np

from omnid.audio import pcm16


def flac_silence(seconds: float, rate: int = 48000) -> bytes:
    """A FLAC file of digital silence: about 0.5 MB holds an hour at 48 kHz (a decompression bomb)."""
    buf = io.BytesIO()
    with av.open(buf, "w", format="flac") as container:
        stream = container.add_stream("flac", rate=rate, layout="mono")
        block = 4608
        zeros = np.zeros((1, block), np.int16)
        for _ in range(int(seconds * rate) // block):
            frame = av.AudioFrame.from_ndarray(zeros, format="s16", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buf.getvalue()


def wav(samples: np.ndarray | None = None, *, rate: int = 16000, channels: int = 1, bits: int = 16,
        fmt: int = 1, data: bytes | None = None) -> bytes:
    """A RIFF/WAVE file with any header fields, valid or not (the wave module writes only valid ones; valid files
    come from omnid.audio.wav_bytes)."""
    if data is None:
        data = pcm16(samples) if samples is not None else b""
    align = channels * max(bits, 0) // 8
    fmt_chunk = struct.pack("<HHIIHH", fmt & 0xFFFF, channels & 0xFFFF, rate & 0xFFFFFFFF,
                            (rate * align) & 0xFFFFFFFF, align & 0xFFFF, bits & 0xFFFF)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt_chunk + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def noise(seconds: float, level: float = 0.05, seed: int = 0, rate: int = 16000) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(int(seconds * rate)) * level).astype(np.float32)


BOUNDARY = "fuzzboundary7MA4YWxkTrZu0gW"


def multipart(parts: list[tuple[str, bytes, str | None]], boundary: str = BOUNDARY, preamble: bytes = b"") -> bytes:
    """A multipart/form-data body from (name, value, filename) parts."""
    out = [preamble]
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out)


async def raw_request(port: int, head: bytes, body: bytes = b"", timeout: float = 60) -> tuple[int, dict[str, str], bytes]:
    """Sends bytes as they are and reads one HTTP/1.1 response: (status, headers, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout)
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        data = await asyncio.wait_for(reader.readexactly(length), timeout) if length else b""
        return status, headers, data
    finally:
        writer.close()


def post_head(path: str, body_length: int, content_type: str = f"multipart/form-data; boundary={BOUNDARY}",
              extra: bytes = b"") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {body_length}\r\nConnection: close\r\n").encode() + extra + b"\r\n"


async def health_latencies(url: str, until: asyncio.Future) -> list[float]:
    """Seconds each GET /health took, polled every 20 ms until ``until`` is done."""
    import time

    import aiohttp

    out = []
    async with aiohttp.ClientSession() as http:
        while not until.done():
            started = time.perf_counter()
            async with http.get(url + "/health") as resp:
                await resp.read()
            out.append(time.perf_counter() - started)
            await asyncio.sleep(0.02)
    return out
