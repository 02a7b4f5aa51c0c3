"""The realtime socket's own rules, with a real server, real aiohttp clients, real Silero VAD and real speech, but
a stand-in Whisper (tests/fake_engine.py) where a test must control time or failure: every error code of
wire.md 3, the caps, VAD gating and cancellation. The real engine's side is in test_realtime.py."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aiohttp
import numpy as np
import pytest
import soxr

from omnid.api.realtime import REGISTRY
from tests.fake_engine import fake_services
from tests.helpers import append, clip_audio, collect, silence
from tests.server import ServerThread

CAPS = {"max_sessions": 3, "max_frame_bytes": 65536, "max_session_s": 40.0, "max_segment_s": 2.0,
        "max_backlog_s": 5.0}


@pytest.fixture(scope="module")
def fake():
    with ServerThread(overrides={"realtime": CAPS}, services=fake_services()) as srv:
        yield srv


def engine_of(srv):
    return srv.server.services.fake


def speech() -> np.ndarray:
    return clip_audio("ljspeech_LJ001-0001")


async def connect(http, srv, protocol: str | None = None):
    query = f"?protocol={protocol}" if protocol else ""
    return await http.ws_connect(srv.ws_url + "/v1/realtime" + query)


async def send(ws, event: dict) -> None:
    await ws.send_str(json.dumps(event))


async def next_event(ws, timeout: float = 10.0) -> dict:
    msg = await ws.receive(timeout=timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return json.loads(msg.data)


async def expect_error(ws, code: str, frame: str | bytes) -> dict:
    await (ws.send_bytes(frame) if isinstance(frame, bytes) else ws.send_str(frame))
    event = await next_event(ws)
    assert event["type"] == "error" and event["error"]["code"] == code, (frame, event)
    assert event["error"]["message"]
    return event


async def expect_closed(ws) -> None:
    msg = await ws.receive(timeout=10)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg


def to24k(audio: np.ndarray) -> np.ndarray:
    return soxr.resample(audio, 16000, 24000).astype(np.float32)


async def send_audio(ws, audio: np.ndarray, chunk: int) -> None:
    for i in range(0, len(audio), chunk):
        await ws.send_str(append(audio[i : i + chunk]))


def b64_bytes(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# --- recoverable errors --------------------------------------------------------------------------------------


async def test_recoverable_errors_leave_the_session_working(fake):
    def upd(session) -> str:
        return json.dumps({"type": "session.update", "session": session})

    async with aiohttp.ClientSession() as http, await connect(http, fake, "voxt") as ws:
        await expect_error(ws, "invalid_json", "{not json")
        await expect_error(ws, "invalid_json", b"\x00\x01")
        bad = await expect_error(ws, "invalid_event", json.dumps({"type": "no.such.event", "event_id": "e1"}))
        assert bad["error"]["event_id"] == "e1"
        await expect_error(ws, "invalid_event", json.dumps({"type": "session.update", "session": 5}))
        await expect_error(ws, "invalid_event", json.dumps({"type": "input_audio_buffer.commit", "event_id": 5}))
        for audio in (5, "", "AAA", b64_bytes(b"\x01\x02\x03"), "!!!!"):
            await expect_error(ws, "invalid_audio", json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
        await expect_error(ws, "unsupported_session", upd({"input_audio_format": "g711_ulaw"}))
        await expect_error(ws, "unsupported_session", upd({"turn_detection": {"type": "semantic_vad"}}))
        await expect_error(ws, "invalid_event", upd({"turn_detection": {"type": "server_vad", "threshold": "high"}}))
        await expect_error(ws, "unsupported_session", upd({"turn_detection": {"threshold": 1.5}}))
        await send(ws, {"type": "session.update", "session": {"language": "en", "prompt": "Hello."}})
        ok = await next_event(ws)
    assert ok["type"] == "transcription_session.updated" and ok["session"]["language"] == "en"
    assert ok["event_index"] == 15  # every error above was an event of this connection, in order


async def test_openai_recoverable_errors(fake):
    async with aiohttp.ClientSession() as http, await connect(http, fake, "openai") as ws:
        assert (await next_event(ws))["type"] == "session.created"
        await expect_error(ws, "input_audio_buffer_commit_empty", json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(append(silence(0.05, 24000)))
        await expect_error(ws, "input_audio_buffer_commit_empty", json.dumps({"type": "input_audio_buffer.commit"}))
        await expect_error(ws, "unsupported_session", json.dumps({"type": "session.update", "session": {
            "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}}))
        await expect_error(ws, "unsupported_session", json.dumps({"type": "session.update", "session": {
            "type": "realtime"}}))
        await expect_error(ws, "unsupported_session", json.dumps({"type": "transcription_session.update", "session": {
            "input_audio_transcription": {"model": "no-such-model"}}}))
        await expect_error(ws, "invalid_event", json.dumps({"type": "transcription.done"}))
        await send(ws, {"type": "input_audio_buffer.clear"})
        assert (await next_event(ws))["type"] == "input_audio_buffer.cleared"
        # 200 ms after the clear is enough to commit: an item with nothing said in it.
        await ws.send_str(append(silence(0.2, 24000)))
        await send(ws, {"type": "input_audio_buffer.commit"})
        committed, completed = await next_event(ws), await next_event(ws)
    assert committed["type"] == "input_audio_buffer.committed"
    assert completed["type"] == "conversation.item.input_audio_transcription.completed"
    assert completed["item_id"] == committed["item_id"] and completed["transcript"] == ""


async def test_a_failed_transcription_drops_the_segment_and_the_session_goes_on(fake):
    audio = speech()[: 16000 * 3 // 2]
    async with aiohttp.ClientSession() as http:
        async with await connect(http, fake, "voxt") as ws:
            await send(ws, {"type": "session.update", "session": {"prompt": "FAIL"}})
            await next_event(ws)
            await ws.send_str(append(audio))
            await send(ws, {"type": "input_audio_buffer.commit"})
            events = await collect(ws, lambda e: e["type"] == "error", 20)
            assert events[-1]["error"]["code"] == "transcription_failed"
            assert not [e for e in events if e.get("is_final")], "a failed segment is never sent as final"
            await send(ws, {"type": "session.update", "session": {"prompt": None}})
            await ws.send_str(append(audio))
            await send(ws, {"type": "transcription.done"})
            events = await collect(ws, lambda e: e["type"] == "transcription.completed", 20)
            finals = [e for e in events if e.get("is_final")]
            assert [f["segment_id"] for f in finals] == [1] and finals[0]["text"].endswith("samples")
            assert events[-1]["text"] == finals[0]["text"]
        async with await connect(http, fake, "openai") as ws:
            await send(ws, {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
                "transcription": {"prompt": "FAIL"}, "turn_detection": None}}}})
            await send_audio(ws, to24k(audio), 2400)
            await send(ws, {"type": "input_audio_buffer.commit"})
            events = await collect(ws, lambda e: e["type"].endswith("failed"), 20)
    (committed,) = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    failed = events[-1]
    assert failed["item_id"] == committed["item_id"] and failed["error"]["code"] == "transcription_failed"
    assert not [e for e in events if e["type"].endswith("completed")]


# --- terminal errors -------------------------------------------------------------------------------------------


async def test_a_json_value_that_is_not_an_object_ends_the_session(fake):
    async with aiohttp.ClientSession() as http, await connect(http, fake, "voxt") as ws:
        await expect_error(ws, "invalid_frame", "[1, 2]")
        await expect_closed(ws)


async def test_a_frame_over_the_cap_ends_the_session(fake):
    async with aiohttp.ClientSession() as http, await connect(http, fake, "voxt") as ws:
        big = json.dumps({"type": "input_audio_buffer.append", "audio": "A" * CAPS["max_frame_bytes"]})
        await expect_error(ws, "frame_too_large", big)
        await expect_closed(ws)


async def test_too_many_sessions_is_the_first_event_and_others_carry_on(fake):
    async with aiohttp.ClientSession() as http:
        open_ = [await connect(http, fake, "openai") for _ in range(CAPS["max_sessions"])]
        for ws in open_:
            assert (await next_event(ws))["type"] == "session.created"
        async with await connect(http, fake, "openai") as extra:
            first = await next_event(extra)
            assert first["type"] == "error" and first["error"]["code"] == "too_many_sessions"
            await expect_closed(extra)
        for ws in open_:  # the open sessions are untouched
            await send(ws, {"type": "transcription_session.update", "session": {"turn_detection": None}})
            assert (await next_event(ws))["type"] == "transcription_session.updated"
            await ws.close()
        await asyncio.sleep(0.2)
        async with await connect(http, fake, "openai") as again:
            assert (await next_event(again))["type"] == "session.created"


async def test_a_session_over_its_length_cap_ends(fake):
    async with aiohttp.ClientSession() as http, await connect(http, fake, "voxt") as ws:
        chunk = silence(1.0)
        for _ in range(int(CAPS["max_session_s"])):
            await ws.send_str(append(chunk))
        await send(ws, {"type": "session.update", "session": {}})
        assert (await next_event(ws))["type"] == "transcription_session.updated"  # silence sends no segments
        await expect_error(ws, "session_too_long", append(chunk))
        await expect_closed(ws)


async def test_more_backlog_than_the_cap_ends_the_session(fake):
    engine_of(fake).delay = 1.0  # finals fall behind: 2 s segments, 1 s each, audio sent much faster
    try:
        async with aiohttp.ClientSession() as http, await connect(http, fake, "voxt") as ws:
            audio = np.tile(speech(), 2)
            for i in range(0, len(audio), 8000):
                await ws.send_str(append(audio[i : i + 8000]))
            events = await collect(ws, lambda e: e["type"] == "error", 30)
            assert events[-1]["error"]["code"] == "buffer_overflow"
            await expect_closed(ws)
    finally:
        engine_of(fake).delay = 0.0


# --- gating, bounds, cancellation ------------------------------------------------------------------------------


async def test_silence_is_never_decoded(fake):
    engine = engine_of(fake)
    async with aiohttp.ClientSession() as http:
        async with await connect(http, fake, "voxt") as ws:
            calls = engine.calls
            await ws.send_str(append(silence(1.5)))
            await send(ws, {"type": "transcription.done"})
            events = await collect(ws, lambda e: e["type"] == "transcription.completed")
            assert [(e["text"], e["is_final"]) for e in events if e["type"] == "transcription.segment"] == [("", True)]
            assert events[-1]["text"] == "" and engine.calls == calls
        async with await connect(http, fake, "openai") as ws:  # server VAD by default
            await next_event(ws)
            for _ in range(6):
                await ws.send_str(append(silence(1.0, 24000)))
            await send(ws, {"type": "input_audio_buffer.commit"})
            events = await collect(ws, lambda e: e["type"].endswith("completed"))
            assert [e["type"].rsplit(".", 1)[-1] for e in events] == ["committed", "completed"]
            assert events[-1]["transcript"] == "" and engine.calls == calls
            await send_audio(ws, to24k(speech()[:32000]), 2400)  # 2 s of speech
            await ws.send_str(append(silence(1.0, 24000)))
            events = await collect(ws, lambda e: e["type"].endswith("completed"))
            assert events[0]["type"] == "input_audio_buffer.speech_started" and engine.calls > calls


async def test_audio_is_trimmed_and_segments_cut_at_the_cap(fake):
    async with aiohttp.ClientSession() as http:
        async with await connect(http, fake, "openai") as ws:  # server VAD, no speech: only the prefix is kept
            await next_event(ws)
            for _ in range(20):
                await ws.send_str(append(silence(1.0, 24000)))
            await send(ws, {"type": "transcription_session.update", "session": {}})
            await next_event(ws)
            (conn,) = [c for c in fake.server.runner.app[REGISTRY] if c.dialect == "openai"]
            assert conn.session.buffer.backlog <= 16000 * 0.3 + 2 * 512 + 16000
            assert conn.session.buffer.start > 16000 * 18
        async with await connect(http, fake, "voxt") as ws:  # manual turns, 2 s segment cap, 9.7 s of speech
            audio = speech()
            peak, events = 0, []
            for i in range(0, len(audio), 1600):
                await ws.send_str(append(audio[i : i + 1600]))
                await send(ws, {"type": "session.update", "session": {}})  # a round trip: the append is done
                events += await collect(ws, lambda e: e["type"] == "transcription_session.updated")
                (conn,) = [c for c in fake.server.runner.app[REGISTRY] if c.dialect == "voxt"]
                peak = max(peak, conn.session.buffer.backlog)
            await send(ws, {"type": "transcription.done"})
            events += await collect(ws, lambda e: e["type"] == "transcription.completed", 30)
    assert peak <= 2 * 16000 + 1600
    finals = [e for e in events if e.get("is_final")]
    sizes = [int(e["text"].split()[0]) for e in finals]
    assert len(finals) >= 4 and [f["segment_id"] for f in finals] == list(range(len(finals)))
    # Each cut lies in the last second before the 2 s cap (the quietest moment there), never past it.
    assert all(16000 <= n <= 32000 for n in sizes[:-1]), sizes
    assert sum(sizes) == len(audio)


async def test_closing_the_socket_cancels_the_sessions_jobs(fake):
    engine = engine_of(fake)
    engine.delay = 60.0  # far longer than any machine takes to cancel it
    try:
        async with aiohttp.ClientSession() as http:
            ws = await connect(http, fake, "voxt")
            await ws.send_str(append(speech()[:24000]))
            await send(ws, {"type": "input_audio_buffer.commit"})
            cancelled = engine.cancelled
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not fake.server.services.transcribers["tiny.en"].request_states:
                await asyncio.sleep(0.02)
            assert fake.server.services.transcribers["tiny.en"].request_states, "the final is running"
            started = time.monotonic()
            await ws.close()
            # A cancelled job counts itself (a finished one does not), however slow the machine.
            while engine.cancelled == cancelled and time.monotonic() - started < 60:
                await asyncio.sleep(0.02)
            assert engine.cancelled > cancelled, "the running job was stopped"
            async with http.get(fake.url + "/health") as r:
                health = await r.json()
            assert health["request_states"] == {} and health["realtime_sessions"] == 0
    finally:
        engine.delay = 0.0


async def test_voxt_with_server_vad_ends_turns_by_itself(fake):
    a = speech()[:16000]  # 1 s: with prefix and silence a turn stays under this server's 2 s segment cap
    audio = np.concatenate([silence(0.5), a, silence(1.5), a, silence(1.5)])
    async with aiohttp.ClientSession() as http, await connect(http, fake, "voxt") as ws:
        await send(ws, {"type": "session.update", "session": {"turn_detection": {"type": "server_vad",
                                                                                 "silence_duration_ms": 500}}})
        updated = await next_event(ws)
        assert updated["session"]["turn_detection"]["silence_duration_ms"] == 500
        await send_audio(ws, audio, 1600)
        events = await collect(ws, lambda e: e.get("is_final") and e["segment_id"] == 1, 20)
    finals = [e for e in events if e.get("is_final")]
    assert [f["segment_id"] for f in finals] == [0, 1]  # two turns, each final without a commit
    assert not [e for e in events if e["type"].startswith("input_audio_buffer.")]  # OpenAI's events only
    # Each turn holds its utterance: from 300 ms before speech to the 500 ms of silence that ended it.
    sizes = [int(f["text"].split()[0]) for f in finals]
    assert all(len(a) <= n <= len(a) + 16000 * 1.0 for n in sizes), sizes
