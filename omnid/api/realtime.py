"""The realtime WebSocket /v1/realtime (wire.md section 3): translates frames into session calls and session
events into frames. Dialect selection, size caps and the socket's error codes live here; audio, VAD and the
engine live in omnid.realtime."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import msgspec
import structlog
from aiohttp import WSMsgType, web

from omnid.api.errors import invalid, require_loaded, require_ready
from omnid.api.fallback import require_websocket_upgrade
from omnid.api.websocket import CappedWebSocket
from omnid.realtime import settings as st
from omnid.realtime.buffer import InvalidAudio, decode_pcm16
from omnid.realtime.events import DomainEvent
from omnid.realtime.protocol import client_events as ce
from omnid.realtime.protocol import openai, voxt
from omnid.realtime.protocol import server_events as ev
from omnid.realtime.protocol.client_events import Dialect
from omnid.realtime.session import Session, SessionError
from omnid.runtime.errors import QueueFullError
from omnid.runtime.registry import Services

log = structlog.get_logger(__name__)
DIALECTS = ("voxt", "openai")
SERVER_ERRORS = {"too_many_sessions", "buffer_overflow", "session_too_long", "server_busy", "internal_error"}


class Outbox:
    """Events leave in order through one writer task; each gets its ``event_id`` (and in the Voxt dialect its
    ``event_index``) as it is queued. Bounded in count and in bytes: a client that stops reading ends its session
    (the events it will never read are dropped, not kept)."""

    def __init__(self, ws: web.WebSocketResponse, cap: int, max_bytes: int):
        self.ws = ws
        self.dialect: Dialect | None = None
        self.index = 0
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(cap)
        self.max_bytes = max_bytes
        self.pending_bytes = 0
        self.overflowed = False
        self.task = asyncio.ensure_future(self._write())

    def send(self, event: ev.ServerEvent) -> None:
        self.index += 1
        stamped = msgspec.structs.replace(
            event, event_id="evt_" + secrets.token_hex(16),
            event_index=self.index if self.dialect == "voxt" else None,
        )
        frame = msgspec.json.encode(stamped)
        if self.overflowed or self.pending_bytes + len(frame) > self.max_bytes:
            self.overflowed = True
            return
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            self.overflowed = True
            return
        self.pending_bytes += len(frame)

    async def _write(self) -> None:
        while (frame := await self.queue.get()) is not None:
            self.pending_bytes -= len(frame)
            try:
                await self.ws.send_str(frame.decode())
            except (ConnectionError, RuntimeError):
                return

    async def close(self) -> None:
        """Flushes what is queued, then stops the writer."""
        if not self.task.done():
            try:
                self.queue.put_nowait(None)
            except asyncio.QueueFull:
                self.task.cancel()
            try:
                await asyncio.wait_for(self.task, 10)
            except (TimeoutError, asyncio.CancelledError):
                self.task.cancel()


class Connection:
    """One socket = one session, created when the dialect is known."""

    def __init__(self, ws: web.WebSocketResponse, services: Services, dialect: Dialect | None):
        self.ws = ws
        self.services = services
        self.config = services.config.realtime
        self.out = Outbox(ws, self.config.max_pending_events, self.config.max_pending_bytes)
        self.dialect = dialect
        self.session: Session | None = None
        self.session_id = "sess_" + secrets.token_hex(10)
        self.caps = st.Capabilities(
            catalog=services.catalog,
            engines={mid: rt.engine.capabilities for mid, rt in services.transcribers.items() if rt.loaded},
            min_rate=self.config.min_rate,
            max_rate=self.config.max_rate,
            max_prompt_chars=services.config.transcription.max_prompt_chars,
            speakers=services.diarizer is not None and services.diarizer.loaded,
        )
        self.finished = False
        self.shutting_down = False
        if dialect is not None:
            self._start(dialect)

    def _start(self, dialect: Dialect) -> None:
        self.dialect = self.out.dialect = dialect
        settings = self.caps.initial(dialect)
        assert self.services.vad_batcher is not None  # created with the services
        rules, wire = (voxt.RULES, voxt.VoxtWire()) if dialect == "voxt" else (openai.RULES, openai.OpenAIWire())

        def emit(event: DomainEvent) -> None:
            for frame in wire(event):
                self.out.send(frame)

        self.session = Session(
            rules, settings, self.config, self.services.config.transcription, self.services.transcribers,
            self.services.vad_batcher, emit, self.services.diarizer,
        )
        log.info("realtime_session_started", dialect=dialect, session=self.session_id)
        if dialect == "openai":
            self.out.send(ev.SessionCreated(session=st.openai_view(settings, self.session_id)))

    def error(self, code: str, message: str, *, param: str | None = None, event_id: str | None = None) -> None:
        if self.out.dialect is None:
            self.out.dialect = self.dialect or self.config.default_dialect
        kind = "server_error" if code in SERVER_ERRORS else "invalid_request_error"
        self.out.send(ev.error(code, message, type=kind, param=param, event_id=event_id))

    async def frame(self, data: str) -> None:
        """One text frame (at most realtime.max_frame_bytes: the socket refuses more). Raises SessionError for the
        terminal errors."""
        parsed = ce.parse_frame(data)
        if isinstance(parsed, ce.FrameError):
            if parsed.terminal:
                raise SessionError(parsed.code, parsed.message)
            self.error(parsed.code, parsed.message, event_id=parsed.event_id)
            return
        if self.session is None:
            self._start(ce.dialect_of(parsed) or self.config.default_dialect)
        await self.event(parsed)

    async def event(self, e: ce.ClientEvent) -> None:
        session = self.session
        assert session is not None
        if isinstance(e, ce.AudioAppend):
            try:
                samples = decode_pcm16(e.audio)
            except InvalidAudio as exc:
                self.error("invalid_audio", str(exc), param="audio", event_id=e.event_id)
                return
            await session.append(samples)
        elif isinstance(e, ce.AudioCommit):
            await session.commit()
        elif isinstance(e, ce.AudioClear):
            session.clear()
        elif isinstance(e, (ce.SessionUpdate, ce.TranscriptionSessionUpdate)):
            await self._update(e)
        elif isinstance(e, ce.TranscriptionDone):
            if self.dialect != "voxt":
                self.error("invalid_event", "transcription.done belongs to the Voxt dialect; commit instead",
                           event_id=e.event_id)
                return
            if await session.commit():
                text = await session.drain()
                said = voxt.sentences(session.completed_sentences(), session.sentence_speakers)
                self.out.send(ev.TranscriptionCompleted(text=text, segments=said))
                self.finished = True

    async def _update(self, e: ce.SessionUpdate | ce.TranscriptionSessionUpdate) -> None:
        session = self.session
        assert session is not None
        if session.settings_fixed:
            # A stream's settings are fixed by its first audio (the reference's contract).
            self.error("session_started", "Settings apply before the first audio.", event_id=e.event_id)
            return
        try:
            if self.dialect == "voxt":
                new = st.voxt_update(session.settings, e.session, self.caps, session.audio_started)
            else:
                new = st.openai_update(session.settings, e.session, self.caps, session.audio_started)
        except st.SettingsError as exc:
            self.error(exc.code, exc.message, param=exc.param, event_id=e.event_id)
            return
        await session.update(new)
        if self.dialect == "voxt":
            self.out.send(ev.TranscriptionSessionUpdated(session=st.voxt_view(new)))
        elif isinstance(e, ce.TranscriptionSessionUpdate):
            self.out.send(ev.TranscriptionSessionUpdated(session=st.openai_beta_view(new, self.session_id)))
        else:
            self.out.send(ev.SessionUpdated(session=st.openai_view(new, self.session_id)))

    async def shut_down(self) -> None:
        """The daemon is stopping: the open segment is committed, its final sent, then the closing error."""
        self.shutting_down = True  # frames still arriving are ignored
        if self.session is not None:
            await self.session.commit()
            await self.session.drain()
        self.error("server_shutting_down", "the server is shutting down")
        await self.out.close()
        await self.ws.close()

    async def close(self) -> None:
        if self.session is not None:
            self.session.close()
        await self.out.close()


# The open sessions (capped by realtime.max_sessions).
REGISTRY = web.AppKey("realtime_sessions", set)


async def handle(request: web.Request, services: Services) -> web.StreamResponse:
    config = services.config.realtime
    dialect: Any = request.query.get("protocol")
    if dialect is not None and dialect not in DIALECTS:
        raise invalid("protocol", f"protocol must be one of {', '.join(DIALECTS)}")
    require_websocket_upgrade(request)
    require_ready(services)
    require_loaded(services.transcribers[services.catalog.default])  # a session starts on the default model
    conn: Connection | None = None

    async def too_large() -> None:
        """A frame over realtime.max_frame_bytes (bytes on the wire): the spec's error, then the close."""
        if conn is not None:
            conn.error("frame_too_large", f"a frame is over the {config.max_frame_bytes} byte cap")
            log.info("realtime_session_refused", code="frame_too_large", session=conn.session_id)
            await conn.out.close()

    ws = CappedWebSocket(config.max_frame_bytes, too_large, autoping=True, heartbeat=30)
    await ws.prepare(request)
    registry = request.app[REGISTRY]
    if len(registry) >= config.max_sessions:
        refused = Connection(ws, services, None)
        refused.error("too_many_sessions", f"the server already has {config.max_sessions} realtime sessions")
        await refused.close()
        await ws.close()
        return ws
    conn = Connection(ws, services, dialect)
    registry.add(conn)
    try:
        await _serve(ws, conn)
    finally:
        registry.discard(conn)
        if not conn.shutting_down:
            await conn.close()
            await ws.close()
        log.info("realtime_session_ended", session=conn.session_id)
    return ws


async def shut_down(registry: set[Connection], grace_s: float) -> None:
    """Ends every open session gracefully, within ``grace_s``."""
    sessions = list(registry)
    if sessions:
        done, _ = await asyncio.wait([asyncio.ensure_future(c.shut_down()) for c in sessions], timeout=grace_s)
        log.info("realtime_sessions_shut_down", sessions=len(sessions), in_time=len(done))


async def _serve(ws: CappedWebSocket, conn: Connection) -> None:
    async for msg in ws:
        if conn.shutting_down:
            continue  # shut_down owns the session now; read on until it closes the socket
        try:
            if msg.type == WSMsgType.TEXT:
                await conn.frame(msg.data)
            elif msg.type == WSMsgType.BINARY:
                conn.error("invalid_json", "frames must be text: one JSON object each")
            elif msg.type == WSMsgType.ERROR:
                if ws.refused_too_large:
                    return  # its error went out before the close
                raise SessionError("invalid_frame", f"unreadable frame: {ws.exception()}")
        except SessionError as exc:
            conn.error(exc.code, exc.message)
            log.info("realtime_session_refused", code=exc.code, session=conn.session_id)
            return
        except QueueFullError:  # the shared VAD is saturated: this frame's audio could not be analysed
            conn.error("server_busy", "the server is too busy to analyse this audio; it was dropped")
        except Exception:  # noqa: BLE001  (a bug must cost one frame, not the session)
            log.exception("realtime_frame_failed", session=conn.session_id)
            conn.error("internal_error", "the server failed to handle this event")
        if conn.out.overflowed:
            log.warning("realtime_client_too_slow", session=conn.session_id)
            return
        if conn.finished:
            return
