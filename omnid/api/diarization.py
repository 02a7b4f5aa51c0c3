"""Speaker diarization routes (a model of kind "sortformer"): ``GET /v1/diarization/stream``, wire-compatible
with the reference server (options checked at the handshake, one binary feed -> one JSON reply), and
``POST /v1/diarization/segments`` over a whole file. Handlers translate between HTTP and the engine only."""

from __future__ import annotations

import asyncio
import math
import re
from urllib.parse import unquote_plus

import msgspec
import numpy as np
import structlog
from aiohttp import WSMsgType, web

from omnid.api.errors import ApiError, invalid, require_loaded, shutting_down
from omnid.api.fallback import require_websocket_upgrade
from omnid.api.forms import FormLimits, flag, known_fields, number, read_form, text
from omnid.api.security import KEY_PARAMETER
from omnid.api.websocket import CappedWebSocket
from omnid.audio import SAMPLE_RATE, AudioDecodeError, decode_audio
from omnid.engine.diarization import (
    FRAME_SECONDS,
    STREAM_FIFO_MAX,
    STREAM_SPKCACHE_MAX,
    DiarizationEngine,
    DiarizationStream,
    Turn,
    max_feed_samples,
    turns,
)
from omnid.runtime import diarization
from omnid.runtime.request_rules import Range

log = structlog.get_logger(__name__)

# The open streams (capped by diarization.max_streams); /health counts them.
STREAMS = web.AppKey("diarization_streams", set)
MAX_SECONDS = 3600.0  # min_duration and merge_gap: an hour
THRESHOLD, SECONDS = Range(0.0, 1.0), Range(0.0, MAX_SECONDS)
FILE_FIELDS = ("threshold", "min_duration", "merge_gap", "latency", "include_probabilities")
MAX_POSITIONS = 1500  # the reference's positional table: no sequence may be longer
_INT = re.compile(r"[+-]?[0-9]{1,9}")


class StreamOptions(msgspec.Struct):
    threshold: float = 0.5
    min_duration: float = 0.0
    merge_gap: float = 0.18
    spkcache_max: int = STREAM_SPKCACHE_MAX
    fifo_max: int = STREAM_FIFO_MAX


class Segment(msgspec.Struct):
    start: float
    end: float
    speaker: int


class StreamState(msgspec.Struct):
    fifo_length: int
    spkcache_length: int
    frames_processed: int


class FeedReply(msgspec.Struct):
    frames: int
    speakers: int
    probabilities: list[list[float]]
    segments: list[Segment]
    state: StreamState


class FileReply(msgspec.Struct, omit_defaults=True):
    duration: float
    frame_seconds: float
    speakers: int
    segments: list[Segment]
    probabilities: list[list[float]] | None = None


def add_routes(app: web.Application, key: web.AppKey, expect_handler) -> None:
    app[STREAMS] = set()

    async def stream_handler(request: web.Request) -> web.StreamResponse:
        return await stream_route(request, request.app[key])

    async def segments_handler(request: web.Request) -> web.Response:
        return await segments_route(request, request.app[key])

    app.router.add_get("/v1/diarization/stream", stream_handler, expect_handler=expect_handler)
    app.router.add_post("/v1/diarization/segments", segments_handler, expect_handler=expect_handler)


def diarizer(services) -> diarization.Runtime:
    if services.draining:
        raise shutting_down()
    runtime = services.diarizer
    if runtime is None:
        raise ApiError(404, "no diarization model is configured (a [[models]] entry with kind = \"sortformer\")",
                       code="no_diarization_model")
    require_loaded(runtime)
    return runtime


# --- the stream ------------------------------------------------------------------------------------------------


def parse_stream_options(query_string: str, engine: DiarizationEngine) -> StreamOptions:
    """The reference's five options, every one checked before the upgrade; the first bad one is named."""
    values: dict[str, object] = {}
    for part in query_string.split("&") if query_string else []:
        if "=" not in part:
            name = unquote_plus(part)
            raise invalid(name, f"option {name!r} needs a value (name=value)")
        name, raw = (unquote_plus(x) for x in part.split("=", 1))
        if name == KEY_PARAMETER:
            continue  # the API key, already checked by the security layer before any handler
        if name in ("threshold", "min_duration", "merge_gap"):
            high = 1.0 if name == "threshold" else MAX_SECONDS
            values[name] = _number(name, raw, 0.0, high)
        elif name in ("spkcache_max", "fifo_max"):
            values[name] = _integer(name, raw, 1 if name == "spkcache_max" else 0, 4096)
        else:
            raise invalid(name, f"unknown option {name!r}: the options are threshold, min_duration, merge_gap, "
                                "spkcache_max and fifo_max")
    options = StreamOptions(**values)  # type: ignore[arg-type]
    s = engine.streaming
    limit = engine.max_positions or MAX_POSITIONS
    positions = max(options.spkcache_max, s.spkcache_len) + options.fifo_max + s.chunk_left_context + s.spkcache_update_period
    if positions > limit:
        raise invalid("fifo_max", f"spkcache_max={options.spkcache_max} and fifo_max={options.fifo_max} need "
                                  f"{positions} encoder positions; max(spkcache_max, {s.spkcache_len}) + fifo_max + "
                                  f"{s.chunk_left_context + s.spkcache_update_period} must be at most {limit}")
    return options


def _number(name: str, raw: str, low: float, high: float) -> float:
    try:
        if raw != raw.strip() or len(raw) > 64:
            raise ValueError
        value = float(raw)
    except ValueError:
        raise invalid(name, f"{name} must be a number, got {raw[:64]!r}") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise invalid(name, f"{name} must be a number between {low:g} and {high:g}, got {raw!r}")
    return value


def _integer(name: str, raw: str, low: int, high: int) -> int:
    if not _INT.fullmatch(raw):
        raise invalid(name, f"{name} must be an integer, got {raw[:64]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise invalid(name, f"{name} must be between {low} and {high}, got {value}")
    return value


def not_a_feed(cap: int) -> str:
    """The reference's text for a text message or a message over the cap (the socket refuses those by itself)."""
    return f"A feed is a binary message of at most {cap} samples."


def feed_error(data: bytes | str, cap: int) -> str | None:
    """The reference's error texts for a malformed feed; None when the feed is good."""
    if isinstance(data, str):
        return not_a_feed(cap)
    if len(data) % 4 or len(data) < 8:
        return f"A feed is 2 to {cap} float32 little-endian samples."
    if not np.isfinite(np.frombuffer(data, "<f4")).all():
        return "Audio must be finite."
    return None


async def stream_route(request: web.Request, services) -> web.StreamResponse:
    runtime = diarizer(services)
    options = parse_stream_options(request.query_string, runtime.engine)
    require_websocket_upgrade(request)
    config = services.config.diarization
    streams = request.app[STREAMS]
    if len(streams) >= config.max_streams:
        raise ApiError(503, f"the server already has {config.max_streams} diarization streams open",
                       code="too_many_streams", type="server_error", headers={"Retry-After": "1"})
    cap = max_feed_samples(runtime.engine)

    async def too_large() -> None:
        await ws.send_json({"error": not_a_feed(cap)})

    ws = CappedWebSocket(cap * 4, too_large, autoping=True, heartbeat=30)
    await ws.prepare(request)
    streams.add(ws)
    state = runtime.engine.new_stream()
    log.info("diarization_stream_opened", streams=len(streams))
    try:
        while True:
            try:
                msg = await ws.receive(timeout=config.idle_timeout_s)
            except asyncio.TimeoutError:
                await ws.close(code=1001, message=b"idle timeout")
                break
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                break
            error = feed_error(msg.data, cap) if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT) else None
            if error is not None:
                await ws.send_json({"error": error})
                await ws.close()
                break
            samples = np.frombuffer(msg.data, "<f4").copy()
            reply = await _feed(runtime, state, samples, options)
            await ws.send_str(msgspec.json.encode(reply).decode())
    except Exception as exc:  # noqa: BLE001  (a failed feed ends this stream only)
        if not ws.closed:
            log.warning("diarization_feed_failed", error=type(exc).__name__)
            await ws.send_json({"error": "the server could not diarize this feed"})
            await ws.close()
    finally:
        streams.discard(ws)
        log.info("diarization_stream_closed", frames=state.frames_processed, streams=len(streams))
    return ws


async def _feed(runtime: diarization.Runtime, state: DiarizationStream, samples: np.ndarray,
                options: StreamOptions) -> FeedReply:
    before = state.frames_processed
    probs = await diarization.feed(runtime, state, samples, options.spkcache_max, options.fifo_max)
    found = turns(probs, options.threshold, options.min_duration, options.merge_gap, before)
    return FeedReply(len(probs), int(probs.shape[1]), probs.tolist(), [_segment(t) for t in found],
                     StreamState(len(state.fifo), len(state.spkcache), state.frames_processed))


def _segment(t: Turn) -> Segment:
    return Segment(round(t.start, 6), round(t.end, 6), t.speaker)


# --- files -----------------------------------------------------------------------------------------------------


async def segments_route(request: web.Request, services) -> web.Response:
    runtime = diarizer(services)
    config = services.config
    form = await read_form(request, FormLimits(int(config.server.max_upload_mb * 1024 * 1024),
                                               config.server.max_form_parts))
    known_fields(form, FILE_FIELDS)
    threshold = _or(number(form, "threshold", THRESHOLD), 0.5)
    min_duration = _or(number(form, "min_duration", SECONDS), 0.0)
    merge_gap = _or(number(form, "merge_gap", SECONDS), 0.18)
    latency = (text(form, "latency", max_chars=32) or config.diarization.file_latency).strip()
    presets = runtime.engine.presets
    if latency not in presets:
        raise invalid("latency", f"latency must be one of {', '.join(presets)}, got {latency[:32]!r}")
    with_probs = flag(form, "include_probabilities") if form.get("include_probabilities") else False
    if form.file is None:
        raise invalid("file", "file is required: a multipart part named 'file' with a filename", "missing_file")
    loop = asyncio.get_running_loop()
    try:
        audio = await loop.run_in_executor(None, decode_audio, form.file, config.transcription.max_audio_seconds)
    except AudioDecodeError as exc:
        raise invalid("file", f"file: {exc}", "invalid_audio") from exc
    probs = await diarization.diarize(runtime, audio, latency)
    found = turns(probs, threshold, min_duration, merge_gap)
    reply = FileReply(round(len(audio) / SAMPLE_RATE, 6), FRAME_SECONDS, int(probs.shape[1]),
                      [_segment(t) for t in found], probs.tolist() if with_probs else None)
    return web.Response(body=msgspec.json.encode(reply), content_type="application/json")


def _or(value, default):
    return default if value is None else value


async def shut_down(streams: set[web.WebSocketResponse]) -> None:
    """Daemon shutdown: every open stream is closed (1001, going away) after the feed it is answering."""
    for ws in list(streams):
        await ws.close(code=1001, message=b"server shutting down")
