"""Property-based fuzzing of everything a client controls (Hypothesis, fixed seed, bounded examples): multipart
bodies, form fields, audio headers, and realtime frames in both dialects, against one real daemon with the real
tiny.en and Silero VAD. Whatever is sent: never a 500, never a plain-text error, always the spec's error shape
and one of its codes; afterwards the daemon is healthy with nothing queued, and a session that ran alongside
got exactly its own transcript."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
from dataclasses import dataclass

import aiohttp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from omnid.audio import pcm16
from omnid.engine.options import TranscribeOptions
from tests.helpers import append, as_received, clip_audio
from tests.hostile_input import multipart, wav

FUZZ = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HTTP_STATUSES = {200, 400, 401, 403, 404, 413, 503}
HTTP_CODES = {"invalid_value", "invalid_audio", "missing_file", "invalid_multipart", "invalid_content_type",
              "too_many_parts", "too_long", "request_too_large", "model_not_found", "invalid_model_kind",
              "unsupported_language", "server_busy", "unknown_parameter", None}
SOCKET_CODES = {"invalid_json", "invalid_event", "invalid_audio", "unsupported_session", "transcription_failed",
                "input_audio_buffer_commit_empty", "invalid_frame", "frame_too_large", "session_too_long",
                "buffer_overflow"}
TERMINAL = {"invalid_frame", "frame_too_large", "session_too_long", "buffer_overflow"}
NEIGHBOUR = "ljspeech_LJ001-0013"
NEIGHBOUR_RUN: dict = {}


@pytest.fixture(scope="module")
def daemon(server):
    """The shared real daemon, with a Voxt session running alongside the fuzzing on another socket."""
    audio = clip_audio(NEIGHBOUR)
    result: dict = {}

    def neighbour() -> None:
        with connect(server.ws_url + "/v1/realtime?protocol=voxt", max_size=None) as ws:
            for i in range(0, len(audio), 1600):  # 100 ms appends at about real time, while the fuzzing runs
                ws.send(append(audio[i : i + 1600]))
                time.sleep(0.1)
            ws.send(json.dumps({"type": "transcription.done"}))
            while (event := json.loads(ws.recv(timeout=120)))["type"] != "transcription.completed":
                pass
            result["text"] = event["text"]

    thread = threading.Thread(target=neighbour, daemon=True)
    thread.start()
    NEIGHBOUR_RUN.update(thread=thread, result=result)
    return server


@dataclass
class Reply:
    status: int
    content_type: str
    body: bytes


def request(method: str, url: str, *, form: list[tuple[str, str]] | None = None, file: bytes | None = None,
            content: bytes | None = None, headers: dict | None = None) -> Reply:
    """One request with the aiohttp client (each Hypothesis example runs synchronously)."""

    async def send() -> Reply:
        data: aiohttp.FormData | bytes | None = content
        if content is None:
            data = aiohttp.FormData(default_to_multipart=True)
            for key, value in form or []:
                data.add_field(key, value)
            if file is not None:
                data.add_field("file", file, filename="f.wav")
        async with aiohttp.ClientSession() as http:
            async with http.request(method, url, data=data, headers=headers or {}) as resp:
                return Reply(resp.status, resp.headers.get("Content-Type", ""), await resp.read())

    return asyncio.run(send())


def check_http(resp: Reply) -> None:
    assert resp.status in HTTP_STATUSES, (resp.status, resp.body[:300])
    if resp.status == 200:
        return
    assert resp.content_type.startswith("application/json"), resp.body[:300]
    doc = json.loads(resp.body)
    assert set(doc) == {"error", "detail"} and set(doc["error"]) == {"message", "type", "param", "code"}
    assert doc["error"]["code"] in HTTP_CODES, doc
    assert len(resp.body) < 4096  # nothing the client sent is echoed whole


# --- strategies -------------------------------------------------------------------------------------------------

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.sampled_from(["1e39", "-0", "nan", "inf", "0x10", "1_000", " 3 ", "9" * 401, "", "1.5", "0.3"]),
)
values = st.one_of(numbers, st.text(max_size=40), st.sampled_from(
    ["json", "text", "srt", "vtt", "verbose_json", "whisper-1", "tiny.en", "silero-vad", "english", "en", "fr",
     "true", "false", "yes", "segment", "word", "reference", "xx" * 300]))
FIELDS = ["model", "language", "prompt", "response_format", "timestamp_granularities[]", "temperature", "stream",
          "max_new_tokens", "stop_at_end_of_text", "stop_on_token_loop", "include_generation_metadata",
          "audio_layout", "unknown_field"]
fields = st.lists(st.tuples(st.sampled_from(FIELDS), values), max_size=6)


@st.composite
def audio_files(draw) -> bytes:
    """A WAV of silence or faint noise (no speech: the VAD filter keeps the model out of it), under any header."""
    seconds = draw(st.floats(min_value=0.0, max_value=2.0))
    rate = draw(st.sampled_from([8000, 16000, 22050, 44100, 48000, 4000, 0, 1, 2**31 - 1, 96000]))
    samples = np.random.default_rng(draw(st.integers(0, 1000))).standard_normal(int(seconds * 16000)) * 0.001
    data = pcm16(samples)
    header = dict(rate=rate, channels=draw(st.sampled_from([1, 2, 0, 7, 65535])),
                  bits=draw(st.sampled_from([16, 8, 0, 24, 32, 13])), fmt=draw(st.sampled_from([1, 3, 0, 0xFFFE, 85])))
    body = wav(data=data, **header)
    cut = draw(st.one_of(st.none(), st.integers(0, len(body))))
    tail = draw(st.binary(max_size=64))
    return (body[:cut] if cut is not None else body) + tail


files = st.one_of(audio_files(), st.binary(max_size=2048))


@st.composite
def raw_bodies(draw) -> tuple[str, bytes]:
    """A multipart body built from parts with odd names, headers and boundaries, then mutated bytewise."""
    boundary = draw(st.text(alphabet="abcXYZ019-_'()+,./:=?", min_size=0, max_size=80))
    parts = draw(st.lists(st.tuples(st.sampled_from(FIELDS + ["file", "", "a\"b"]), st.binary(max_size=200),
                                    st.one_of(st.none(), st.text(max_size=20))), max_size=8))
    body = multipart([(n, v, f) for n, v, f in parts], boundary=boundary or "b",
                     preamble=draw(st.binary(max_size=100)))
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(body)))
        body = body[:at] + draw(st.binary(max_size=16)) + body[at + draw(st.integers(0, 16)):]
    ctype = draw(st.sampled_from([f"multipart/form-data; boundary={boundary}", "multipart/form-data",
                                  f'multipart/form-data; boundary="{boundary}"', "application/octet-stream",
                                  f"multipart/mixed; boundary={boundary}", "text/plain"]))
    return ctype, body


# --- HTTP -------------------------------------------------------------------------------------------------------


@FUZZ
@given(fields=fields, file=st.one_of(st.none(), files))
def test_form_fields_and_audio_headers(daemon, fields, file):
    for route in ("/v1/audio/transcriptions", "/v1/vad/speech_timestamps"):
        check_http(request("POST", daemon.url + route, form=fields, file=file))


@FUZZ
@given(body=raw_bodies())
def test_raw_multipart_bodies(daemon, body):
    ctype, content = body
    for route in ("/v1/audio/transcriptions", "/v1/vad/speech_timestamps"):
        check_http(request("POST", daemon.url + route, content=content, headers={"Content-Type": ctype}))


@st.composite
def raw_requests(draw) -> bytes:
    """Whole HTTP requests as bytes: odd methods, paths, versions, headers and bodies."""
    method = draw(st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"HEAD", b"BREW", b"G\x00T"]))
    path = draw(st.sampled_from([b"/health", b"/v1/models", b"/v1/audio/transcriptions", b"/v1/realtime",
                                 b"/v1/vad/speech_timestamps", b"/metrics", b"/%00", b"/" + b"a" * 3000]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTX/1.1"]))
    headers = draw(st.lists(st.tuples(st.sampled_from([b"Content-Length", b"Transfer-Encoding", b"Content-Type",
                                                       b"Upgrade", b"Connection", b"Expect", b"X-\xff"]),
                                      st.binary(max_size=40)), max_size=4))
    body = draw(st.binary(max_size=200))
    lines = [method + b" " + path + b" " + version, b"Host: 127.0.0.1"]
    lines += [k + b": " + v.replace(b"\r", b"").replace(b"\n", b"") for k, v in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def raw_exchange(port: int, data: bytes, wait_s: float = 1.0) -> bytes:
    """Sends the bytes and reads what comes back until the server closes or is quiet for ``wait_s`` (a request
    whose declared body never comes gets no answer, only the server's timeout)."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=wait_s) as sock:
        sock.sendall(data)
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except (TimeoutError, ConnectionResetError):
            pass
    return b"".join(chunks)


@settings(FUZZ, max_examples=150)
@given(data=raw_requests())
def test_raw_http_requests(daemon, data):
    """Whatever bytes arrive, the answer (if any: a client that stops mid-body may get none) is never a 5xx and
    never a plain-text page."""
    reply = raw_exchange(daemon.server.port, data)
    if not reply:
        return
    head, _, body = reply.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert status < 500, reply[:300]
    if status >= 400:
        assert b"content-type: application/json" in head.lower(), reply[:300]
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        if not data.startswith(b"HEAD ") and length:
            assert set(json.loads(body[:length])) == {"error", "detail"}, reply[:300]


# --- realtime ---------------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**500), max_value=10**500),
              st.floats(allow_nan=False), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)
session_keys = st.sampled_from(["turn_detection", "language", "prompt", "input_audio_format", "model", "type",
                                "audio", "input_audio_transcription", "include"])
turn_detection = st.one_of(st.none(), st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["server_vad", "semantic_vad", "x"]),
    "threshold": st.one_of(st.floats(allow_nan=False), st.integers(-(10**400), 10**400)),
    "silence_duration_ms": st.one_of(st.integers(-(10**400), 10**400), st.floats(allow_nan=False)),
    "prefix_padding_ms": json_values}))
sessions = st.dictionaries(session_keys, st.one_of(json_values, turn_detection), max_size=4)
audio_payloads = st.one_of(
    st.binary(max_size=3200).map(lambda b: base64.b64encode(b).decode()),
    st.text(max_size=40), json_values,
)
events = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["session.update", "transcription_session.update"]),
                           "session": st.one_of(sessions, json_values)}),
    st.fixed_dictionaries({"type": st.just("input_audio_buffer.append"), "audio": audio_payloads}),
    st.fixed_dictionaries({"type": st.sampled_from(["input_audio_buffer.commit", "input_audio_buffer.clear",
                                                    "transcription.done", "response.create", "", "x" * 300])},
                          optional={"event_id": json_values}),
    st.dictionaries(st.text(max_size=10), json_values, max_size=4),
)
frames = st.one_of(
    events.map(json.dumps),
    st.text(max_size=200),
    st.sampled_from(["[" * 5000, "{" * 20000, '{"type": "\\udfff"}', "null", "[]", "1", '"s"']),
)


def _events_until_barrier(ws, barrier: str) -> tuple[list[dict], bool]:
    """Events up to the reply to our barrier; and whether the socket closed instead."""
    seen = []
    try:
        while True:
            event = json.loads(ws.recv(timeout=30))
            seen.append(event)
            if event["type"] == barrier:
                return seen, False
    except ConnectionClosed:
        return seen, True


@FUZZ
@given(dialect=st.sampled_from(["voxt", "openai"]), frame_list=st.lists(frames, min_size=1, max_size=4))
def test_realtime_frames_in_both_dialects(daemon, dialect, frame_list):
    """After each frame a session update is the barrier: every event before its reply is checked, and the socket
    may close only after one of the spec's terminal errors."""
    kind = "session.update" if dialect == "voxt" else "transcription_session.update"
    with connect(daemon.ws_url + f"/v1/realtime?protocol={dialect}", max_size=None, close_timeout=2) as ws:
        if dialect == "openai":
            assert json.loads(ws.recv(timeout=10))["type"] == "session.created"
        for frame in frame_list:
            if dialect == "voxt" and '"transcription.done"' in frame:
                continue  # Voxt's done ends the session by design (tested in test_realtime)
            try:
                ws.send(frame)
                ws.send(json.dumps({"type": kind, "session": {}}))
            except ConnectionClosed:
                pass  # closed by the server: what it sent before is read below
            seen, closed = _events_until_barrier(ws, "transcription_session.updated")
            errors = [e["error"] for e in seen if e["type"] == "error"]
            for err in errors:
                assert err["code"] in SOCKET_CODES, err
                assert len(err["message"]) < 600
            if closed:
                assert errors and errors[-1]["code"] in TERMINAL, (frame[:80], seen)
                return


# --- afterwards -------------------------------------------------------------------------------------------------


def test_the_daemon_is_healthy_and_the_neighbour_untouched(daemon, engine):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        health = json.loads(request("GET", daemon.url + "/health").body)
        if not health["request_states"] and health["realtime_sessions"] == 0:
            break
        time.sleep(0.2)
    assert health["status"] == "healthy" and health["request_states"] == {}, health
    audio = clip_audio(NEIGHBOUR)
    expected = engine.transcribe(as_received(audio), TranscribeOptions()).text
    NEIGHBOUR_RUN["thread"].join(180)
    assert NEIGHBOUR_RUN["result"].get("text") == expected
