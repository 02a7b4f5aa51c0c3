"""Silero VAD routes: speech timestamps over an uploaded file, and probabilities over a WebSocket stream."""

from __future__ import annotations

import asyncio

import numpy as np
from aiohttp import WSMsgType, web

from omnid.api.errors import invalid, require_ready
from omnid.api.fallback import require_websocket_upgrade
from omnid.api.forms import FormLimits, integer, known_fields, number, read_form
from omnid.api.websocket import CappedWebSocket
from omnid.audio import SAMPLE_RATE, AudioDecodeError, decode_audio
from omnid.runtime import transcription
from omnid.runtime.errors import QueueFullError
from omnid.runtime.request_rules import SPEECH_MS, VAD_THRESHOLD
from omnid.vad.segments import SpeechParams, speech_timestamps
from omnid.vad.stream import VadStream

FIELDS = ("threshold", "min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms")


def add_routes(app: web.Application, key: web.AppKey, expect_handler) -> None:
    async def timestamps_handler(request: web.Request) -> web.Response:
        return await speech_timestamps_route(request, request.app[key])

    async def stream_handler(request: web.Request) -> web.WebSocketResponse:
        return await stream_route(request, request.app[key])

    app.router.add_post("/v1/vad/speech_timestamps", timestamps_handler, expect_handler=expect_handler)
    app.router.add_get("/v1/vad/stream", stream_handler, expect_handler=expect_handler)


async def speech_timestamps_route(request: web.Request, services) -> web.Response:
    require_ready(services)
    config = services.config
    form = await read_form(request, FormLimits(int(config.server.max_upload_mb * 1024 * 1024), config.server.max_form_parts))
    known_fields(form, FIELDS)
    defaults = SpeechParams()
    params = SpeechParams(
        threshold=_or(number(form, "threshold", VAD_THRESHOLD), defaults.threshold),
        min_speech_duration_ms=_or(integer(form, "min_speech_duration_ms", SPEECH_MS), defaults.min_speech_duration_ms),
        min_silence_duration_ms=_or(integer(form, "min_silence_duration_ms", SPEECH_MS), defaults.min_silence_duration_ms),
        speech_pad_ms=_or(integer(form, "speech_pad_ms", SPEECH_MS), defaults.speech_pad_ms),
    )
    if form.file is None:
        raise invalid("file", "file is required: a multipart part named 'file' with a filename", "missing_file")
    loop = asyncio.get_running_loop()
    try:
        audio = await loop.run_in_executor(None, decode_audio, form.file, config.transcription.max_audio_seconds)
    except AudioDecodeError as exc:
        raise invalid("file", f"file: {exc}", "invalid_audio") from exc
    probs = await transcription.speech_probabilities(services.vad, audio)
    spans = speech_timestamps(probs, len(audio), params)
    return web.json_response({"sample_rate": SAMPLE_RATE, "timestamps": spans})


def _or(value, default):
    return default if value is None else value


async def stream_route(request: web.Request, services) -> web.WebSocketResponse:
    require_websocket_upgrade(request)
    max_samples = int(services.config.vad.max_frame_seconds * SAMPLE_RATE)

    async def too_long() -> None:
        await ws.send_json({"error": f"a frame is longer than {max_samples / SAMPLE_RATE:g} s ({max_samples * 4} bytes)"})

    ws = CappedWebSocket(max_samples * 4, too_long, heartbeat=30)
    await ws.prepare(request)
    if services.draining or services.vad is None or not services.vad.loaded:
        await _fail(ws, "models are still loading")
        return ws
    stream = VadStream()
    async for msg in ws:
        if msg.type == WSMsgType.BINARY:
            error = _check_frame(msg.data)
            if error:
                await _fail(ws, error)
                break
            samples = np.frombuffer(msg.data, dtype="<f4")
            try:
                probs = await services.vad_batcher.feed(stream, samples)
            except QueueFullError as exc:
                await _fail(ws, str(exc))
                break
            await ws.send_json({"probability": float(probs[-1]) if len(probs) else None})
        elif msg.type == WSMsgType.TEXT:
            await _fail(ws, "text frames are not accepted: send binary float32 little-endian 16 kHz samples")
            break
        else:
            break
    return ws


def _check_frame(data: bytes) -> str | None:
    if len(data) % 4:
        return f"frame of {len(data)} bytes is not whole float32 samples (byte count must be divisible by 4)"
    if not np.all(np.isfinite(np.frombuffer(data, dtype="<f4"))):
        return "frame contains a non-finite sample (NaN or infinity)"
    return None


async def _fail(ws: web.WebSocketResponse, message: str) -> None:
    await ws.send_json({"error": message})
    await ws.close()
