"""Diarization served beside transcription: /v1/diarization/stream (the reference server's contract, every bad
option refused at the handshake, malformed feeds answered with its error texts), /v1/diarization/segments, the
model list and /health, with the golden tiny Sortformer on a real socket and real clients."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import websockets

from omnid.audio import wav_bytes
from omnid.engine.diarization import turns
from omnid.engine.sortformer.engine import PRESETS
from tests.sortformer_clips import two_voices

NEMO = Path(__file__).parent / "goldens" / "sortformer_tiny" / "tiny.nemo"
CAP = 240_639


@pytest.fixture
def daemon(sortformer_daemon):
    return sortformer_daemon


@pytest.fixture
def engine(sortformer_engine):
    return sortformer_engine


def get(url: str) -> tuple[int, dict]:
    async def go():
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            return r.status, await r.json()

    return asyncio.run(go())


def test_models_and_health_list_the_diarizer_beside_transcription(daemon):
    status, body = get(daemon.url + "/v1/models")
    kinds = {m["id"]: m["kind"] for m in body["data"]}
    assert status == 200 and kinds["sortformer-tiny"] == "sortformer" and kinds["tiny.en"] == "whisper"
    status, health = get(daemon.url + "/health")
    assert health["models"]["sortformer-tiny"]["status"] == "ready" and health["diarization_streams"] == 0


BAD = ["threshold=2", "threshold=high", "merge_gap=-1", "spkcache_max=0", "fifo_max=5000", "speakers=2", "threshold",
       "spkcache_max=700&fifo_max=700", "spkcache_max=1&fifo_max=1310", "spkcache_max=100&fifo_max=1200",
       "threshold=nan", "threshold=inf", "threshold=0.5x", "min_duration=3601", "fifo_max=1.5",
       "threshold=0.4&threshold=high"]


@pytest.mark.parametrize("query", BAD)
def test_every_bad_option_is_refused_at_the_handshake(daemon, query):
    async def go():
        with pytest.raises(websockets.InvalidStatus) as err:
            async with websockets.connect(f"{daemon.ws_url}/v1/diarization/stream?{query}"):
                pass
        return err.value.response

    response = asyncio.run(go())
    assert response.status_code == 400
    body = json.loads(response.body)
    named = query.split("&")[-1].split("=")[0]
    assert body["error"]["param"] == named or named in body["error"]["message"], body


@pytest.mark.parametrize("query", ["spkcache_max=700&fifo_max=600", "spkcache_max=1&fifo_max=1123", ""])
def test_the_largest_legal_options_are_accepted(daemon, query):
    async def go():
        async with websockets.connect(f"{daemon.ws_url}/v1/diarization/stream?{query}") as ws:
            await ws.send(np.zeros(1280, np.float32).tobytes())
            return json.loads(await ws.recv())

    reply = asyncio.run(go())
    assert reply["frames"] == 2 and reply["speakers"] == 4


MALFORMED = [
    ("text", "hello", f"A feed is a binary message of at most {CAP} samples."),
    ("partial sample", b"\x00" * 7, f"A feed is 2 to {CAP} float32 little-endian samples."),
    ("one sample", b"\x00" * 4, f"A feed is 2 to {CAP} float32 little-endian samples."),
    ("over the cap", np.zeros(CAP + 1, np.float32).tobytes(), f"A feed is a binary message of at most {CAP} samples."),
    ("over 30 s", np.zeros(480_001, np.float32).tobytes(), f"A feed is a binary message of at most {CAP} samples."),
    ("not finite", np.array([0.0, np.nan, 0.0], np.float32).tobytes(), "Audio must be finite."),
]


@pytest.mark.parametrize("name,feed,error", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_feed_gets_the_reference_error_then_a_close(daemon, name, feed, error):
    async def go():
        async with websockets.connect(f"{daemon.ws_url}/v1/diarization/stream", max_size=None) as ws:
            await ws.send(feed)
            replies = []
            try:
                while True:
                    replies.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
            except websockets.ConnectionClosed:
                return replies

    assert asyncio.run(go()) == [{"error": error}]


def fed(daemon, feeds: list[np.ndarray], query: str = "") -> list[dict]:
    """The replies of one stream to ``feeds``, sent one after another."""
    async def go() -> list[dict]:
        async with websockets.connect(f"{daemon.ws_url}/v1/diarization/stream{query}") as ws:
            out = []
            for feed in feeds:
                await ws.send(feed.tobytes())
                out.append(json.loads(await ws.recv()))
            return out

    return asyncio.run(go())


def test_voxt_feeds_answer_as_the_engine_computes_them(daemon, engine):
    audio = two_voices(30.0)
    feeds = [audio[i : i + 79_360] for i in range(0, len(audio), 79_360)]
    feeds[-1] = np.concatenate([feeds[-1], np.zeros(max(0, 1280 - len(feeds[-1])), np.float32)])

    replies = fed(daemon, feeds, "?merge_gap=0.3")
    state = engine.new_stream()
    for feed, reply in zip(feeds, replies):
        before = state.frames_processed
        probs = engine.feed(state, feed, 188, 188)
        assert reply["frames"] == len(feed) // 1280 + 1 == len(probs)
        assert np.abs(np.array(reply["probabilities"]) - probs).max() <= 1e-5
        assert reply["segments"] == [{"start": round(t.start, 6), "end": round(t.end, 6), "speaker": t.speaker}
                                     for t in turns(probs, 0.5, 0.0, 0.3, before)]
        assert reply["state"] == {"fifo_length": len(state.fifo), "spkcache_length": len(state.spkcache),
                                  "frames_processed": state.frames_processed}
    assert replies[-1]["state"]["frames_processed"] == sum(len(f) // 1280 + 1 for f in feeds)


def test_forty_streams_all_answer_and_closing_them_empties_health(daemon):
    async def go():
        sockets = [await websockets.connect(f"{daemon.ws_url}/v1/diarization/stream") for _ in range(40)]
        status, health = await asyncio.to_thread(get, daemon.url + "/health")
        assert health["diarization_streams"] == 40
        feed = two_voices(2.0).tobytes()
        for ws in sockets:
            await ws.send(feed)
        replies = [json.loads(await ws.recv()) for ws in sockets]
        assert all(r["frames"] == 32000 // 1280 + 1 for r in replies)
        # One more than diarization.max_streams is refused before the upgrade.
        with pytest.raises(websockets.InvalidStatus) as err:
            await websockets.connect(f"{daemon.ws_url}/v1/diarization/stream")
        assert err.value.response.status_code == 503
        for ws in sockets:
            await ws.close()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            if (await asyncio.to_thread(get, daemon.url + "/health"))[1]["diarization_streams"] == 0:
                return True
            await asyncio.sleep(0.05)
        return False

    assert asyncio.run(go())


def post_file(url: str, audio: np.ndarray, **fields) -> tuple[int, dict]:
    async def go():
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(audio), filename="a.wav", content_type="audio/wav")
        for k, v in fields.items():
            form.add_field(k, str(v))
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/diarization/segments", data=form) as r:
            return r.status, await r.json()

    return asyncio.run(go())


def test_the_file_route_runs_nemo_streaming_over_the_whole_file(daemon, engine):
    audio = two_voices(41.8)
    status, body = post_file(daemon.url, audio, latency="low", include_probabilities="true", merge_gap=0.0)
    assert status == 200
    from omnid.audio import decode_audio

    probs = engine.diarize(decode_audio(wav_bytes(audio)), PRESETS["low"])  # the audio as the WAV carried it
    assert body["frame_seconds"] == 0.08 and body["speakers"] == 4 and abs(body["duration"] - 41.8) < 1e-6
    assert np.abs(np.array(body["probabilities"]) - probs).max() <= 1e-5
    want = [{"start": round(t.start, 6), "end": round(t.end, 6), "speaker": t.speaker} for t in turns(probs, 0.5, 0, 0)]
    assert body["segments"] == want and want


@pytest.mark.parametrize("field,value", [("threshold", "1.5"), ("min_duration", "-1"), ("merge_gap", "abc"),
                                         ("latency", "fast"), ("include_probabilities", "maybe"), ("speakers", "2")])
def test_every_invalid_file_field_is_a_400_naming_it(daemon, field, value):
    status, body = post_file(daemon.url, two_voices(1.0), **{field: value})
    assert status == 400 and body["error"]["param"] == field


def test_a_diarizer_is_not_a_transcription_model(daemon):
    async def go():
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(two_voices(1.0)), filename="a.wav", content_type="audio/wav")
        form.add_field("model", "sortformer-tiny")
        async with aiohttp.ClientSession() as s, s.post(daemon.url + "/v1/audio/transcriptions", data=form) as r:
            return r.status, await r.json()

    status, body = asyncio.run(go())
    assert status == 400 and "diarization" in body["error"]["message"]


def test_without_a_diarization_model_the_routes_say_so(server):
    status, body = post_file(server.url, two_voices(1.0))
    assert status == 404 and body["error"]["code"] == "no_diarization_model"



@pytest.mark.parametrize("extreme", [1e30, 3.4e38])
def test_finite_but_extreme_samples_never_poison_a_stream(daemon, engine, extreme):
    """A feed of finite but extreme samples is computed safely (finite probabilities), and the stream goes on to
    answer the next, normal feeds exactly as the engine does after the same feeds."""
    loud = np.full(16000, extreme, np.float32)
    loud[::2] *= -1
    speech = two_voices(3.0)
    feeds = [loud, speech, speech]

    replies = fed(daemon, feeds)
    state = engine.new_stream()
    for feed, reply in zip(feeds, replies):
        probs = np.array(reply["probabilities"], dtype=np.float64)  # a NaN would have come as null
        assert np.isfinite(probs).all(), reply
        assert np.abs(probs - engine.feed(state, feed, 188, 188)).max() <= 1e-5
    assert np.isfinite(state.spkcache).all() and np.isfinite(state.fifo).all()


def test_a_feed_the_model_cannot_compute_leaves_the_stream_as_it_was(engine, monkeypatch):
    """Should the model's output ever be non-finite, the feed is refused before the state takes any of it."""
    state = engine.new_stream()
    engine.feed(state, two_voices(2.0), 188, 188)
    before = (state.spkcache.copy(), state.fifo.copy(), state.frames_processed)
    monkeypatch.setattr(engine, "_forward", lambda x: np.full((len(x), 4), np.nan, np.float32))
    with pytest.raises(FloatingPointError):
        engine.feed(state, two_voices(2.0), 188, 188)
    assert np.array_equal(state.spkcache, before[0]) and np.array_equal(state.fifo, before[1])
    assert state.frames_processed == before[2]
