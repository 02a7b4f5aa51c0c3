"""What many tests share: the corpus, audio as the daemon receives it, realtime clients' frames and event reading,
the daemon as a subprocess, and small random checkpoints. Tests import from here, never from each other."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import cache
from pathlib import Path

import aiohttp
import mlx.core as mx
import numpy as np

import omnid  # noqa: F401  (preloads OpenBLAS before anything imports mlx)
from omnid.audio import decode_audio, pcm16
from omnid.engine.whisper.checkpoint import expected_shapes
from omnid.engine.whisper.model import ModelDims

ROOT = Path(__file__).resolve().parents[1]
# The repository's own speech (tests/corpus/SOURCES.md): the suite never reads a corpus outside the checkout, and
# OMNID_CORPUS (for omnid eval and the benches) does not change what it reads.
CORPUS = ROOT / "tests" / "corpus"

# --- the corpus -------------------------------------------------------------------------------------------------


def manifest() -> dict[str, dict]:
    return {d["id"]: d for d in map(json.loads, (CORPUS / "manifest.jsonl").read_text().splitlines())}


def reference(system: str = "faster-whisper-tiny.en") -> dict[str, str]:
    lines = (CORPUS / "reference" / f"{system}.jsonl").read_text().splitlines()
    return {d["id"]: d["text"] for d in map(json.loads, lines)}


def clip_path(clip_id: str) -> Path:
    return CORPUS / manifest()[clip_id]["path"]


def clip_audio(clip_id: str) -> np.ndarray:
    return decode_audio(clip_path(clip_id))


# --- audio as the realtime socket carries it --------------------------------------------------------------------


def quantize(audio: np.ndarray) -> np.ndarray:
    """What the server receives: PCM16 samples."""
    return np.frombuffer(pcm16(audio), dtype="<i2")


def b64(audio: np.ndarray) -> str:
    return base64.b64encode(pcm16(audio)).decode()


def as_received(audio: np.ndarray) -> np.ndarray:
    return quantize(audio).astype(np.float32) / 32768.0


def append(audio: np.ndarray) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": b64(audio)})


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), np.float32)


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]", " ", text.lower()).split()


def word_errors(a: str, b: str) -> int:
    x, y = words(a), words(b)
    d = list(range(len(y) + 1))
    for i, wx in enumerate(x, 1):
        prev, d[0] = d[0], i
        for j, wy in enumerate(y, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (wx != wy))
    return d[-1]


async def collect(ws: aiohttp.ClientWebSocketResponse, until, timeout: float = 60.0,
                  into: list[dict] | None = None) -> list[dict]:
    """Events (as dicts) until ``until(event)`` is true, or the socket closes; ``into``: the list to fill, which a
    caller can read while the events still arrive."""
    events: list[dict] = [] if into is None else into
    deadline = time.monotonic() + timeout
    while True:
        msg = await asyncio.wait_for(ws.receive(), max(0.1, deadline - time.monotonic()))
        if msg.type != aiohttp.WSMsgType.TEXT:
            return events
        event = json.loads(msg.data)
        events.append(event)
        if until(event):
            return events


# --- the daemon as a subprocess ---------------------------------------------------------------------------------


def spawn(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "omnid", *args], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )


def ready_line(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return json.loads(line)


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def health_once_loaded(url: str, limit_s: float = 60.0) -> tuple[int, dict]:
    """``GET /health`` of a daemon at ``url`` once it no longer says "loading" (its models loaded or failed), or
    the last answer after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    status, health = get(url + "/health")
    while health.get("status") == "loading" and time.monotonic() < deadline:
        time.sleep(0.1)
        status, health = get(url + "/health")
    return status, health


# --- small random checkpoints -----------------------------------------------------------------------------------


def random_weights(dims: ModelDims, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in expected_shapes(dims).items()}


def write_mlx(folder: Path, dims: ModelDims, weights: dict[str, np.ndarray], npz: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**dims.__dict__, "model_type": "whisper"}))
    arrays = {k: mx.array(v).astype(mx.float16) for k, v in weights.items()}
    if npz:
        mx.savez(str(folder / "weights.npz"), **arrays)
    else:
        mx.save_safetensors(str(folder / "weights.safetensors"), arrays)
    return folder


def nemo_with(source: Path, tmp_path: Path, yaml_edit=None, state_edit=None, member_edit=None) -> Path:
    """A copy of the .nemo ``source`` with its YAML, its state dict (rewritten as torch would) or any member
    (``member_edit(name, data)``) changed."""
    out = tmp_path / "edited.nemo"
    with tarfile.open(source) as src, tarfile.open(out, "w") as dst:
        for member in src.getmembers():
            file = src.extractfile(member) if member.isfile() else None
            data = file.read() if file is not None else None
            if data is not None and member.name.endswith("model_config.yaml") and yaml_edit:
                data = yaml_edit(data.decode()).encode()
            if data is not None and member.name.endswith("model_weights.ckpt") and state_edit:
                data = state_edit(data)
            if data is not None and member_edit:
                data = member_edit(member.name, data)
            if data is not None:
                member.size = len(data)
                dst.addfile(member, io.BytesIO(data))
            else:
                dst.addfile(member)
    return out


DELETED = object()  # nemo_with_value's value that removes the key


def nemo_with_value(source: Path, tmp_path: Path, *path: str, value: object) -> Path:
    """A copy of the .nemo ``source`` with one config value changed (``path``: its keys, outermost first), or
    removed (``value=DELETED``)."""
    import yaml

    def edit(text: str) -> str:
        cfg = yaml.safe_load(text)
        node = cfg
        for key in path[:-1]:
            node = node[key]
        if value is DELETED:
            del node[path[-1]]
        else:
            node[path[-1]] = value
        return yaml.safe_dump(cfg)

    return nemo_with(source, tmp_path, yaml_edit=edit)


async def openai_manual_turn(ws_url: str, model: str, audio: np.ndarray, language: str | None = None
                             ) -> tuple[list[str], dict]:
    """One manual turn in the OpenAI dialect at twice real time (in ``language`` where given): its deltas, and its
    completed event."""
    import websockets

    async with websockets.connect(ws_url + "/v1/realtime?protocol=openai") as ws:
        assert json.loads(await ws.recv())["type"] == "session.created"
        await ws.send(json.dumps({"type": "session.update", "session": {
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                "transcription": {"model": model, **({"language": language} if language else {})},
                                "turn_detection": None}}}}))
        assert json.loads(await ws.recv())["type"] == "session.updated"
        for i in range(0, len(audio), 1600):
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": b64(audio[i : i + 1600])}))
            await asyncio.sleep(0.05)
        await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        deltas = []
        while True:
            event = json.loads(await asyncio.wait_for(ws.recv(), 60))
            assert event["type"] != "error", event
            if event["type"] == "conversation.item.input_audio_transcription.delta":
                deltas.append(event["delta"])
            if event["type"] == "conversation.item.input_audio_transcription.completed":
                return deltas, event


async def voxt_manual_turn(ws_url: str, model: str, audio: np.ndarray, language: str, pace_s: float = 0.1,
                           **session: object) -> list[dict]:
    """One manual turn in Voxt's dialect (100 ms a message, every ``pace_s``: real time by default; ``session``:
    more fields of its session.update): every event up to the completed one."""
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url + "/v1/realtime") as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {
            "model": model, "turn_detection": None, "language": language, **session}}))
        reader = asyncio.ensure_future(collect(ws, lambda e: e["type"] == "transcription.completed", 120))
        for i in range(0, len(audio), 1600):
            await ws.send_str(append(audio[i : i + 1600]))
            await asyncio.sleep(pace_s)
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        return await reader


def voxt_segments(events: list[dict]) -> tuple[list[dict], list[dict]]:
    """A Voxt turn's transcription.segment events as (previews, finals), after checking that none was an error."""
    assert not [e for e in events if e["type"] == "error"], events
    segments = [e for e in events if e["type"] == "transcription.segment"]
    return [e for e in segments if not e["is_final"]], [e for e in segments if e["is_final"]]


async def post_transcription(url: str, wav: bytes, **fields: str) -> tuple[int, dict]:
    """POST /v1/audio/transcriptions with these form fields and the WAV as its file: the status and the JSON body."""
    form = aiohttp.FormData()
    for key, value in fields.items():
        form.add_field(key, value)
    form.add_field("file", wav, filename="a.wav")
    async with aiohttp.ClientSession() as http, http.post(url + "/v1/audio/transcriptions", data=form) as resp:
        return resp.status, await resp.json()



def nemo_goldens(folder: Path) -> tuple[Callable[[], dict], Callable[[], dict[str, np.ndarray]], Callable[[str], np.ndarray]]:
    """A NeMo kind's goldens (scripts/parakeet_goldens.py, nemotron_goldens.py), each read once: goldens.json,
    goldens.npz's arrays, and a clip's audio (the English corpus files the json names for it, joined)."""

    @cache
    def meta() -> dict:
        return json.loads((folder / "goldens.json").read_text())

    @cache
    def arrays() -> dict[str, np.ndarray]:
        with np.load(folder / "goldens.npz") as npz:
            return {k: npz[k] for k in npz.files}

    @cache
    def audio(clip: str) -> np.ndarray:
        return np.concatenate([clip_audio(Path(f).stem) for f in meta()["clips"][clip]])

    return meta, arrays, audio


def ends_within(out: np.ndarray, first: np.ndarray, last: np.ndarray, bound: float) -> bool:
    """``out``'s first and last rows within ``bound`` of a golden's stored ends (the goldens keep only those)."""
    return bool(np.abs(out[: len(first)] - first).max() <= bound and np.abs(out[-len(last) :] - last).max() <= bound)


SENSEVOICE = ROOT / "tests" / "goldens" / "sensevoice_tiny"


def sensevoice_goldens() -> dict:
    """scripts/sensevoice_goldens.py's goldens.json, with ``dir`` (the folder it is in)."""
    return {**json.loads((SENSEVOICE / "goldens.json").read_text()), "dir": str(SENSEVOICE)}


def unpack_sensevoice(dest: Path) -> Path:
    """The tiny SenseVoice checkpoint (kept packed: its zero rows and filler pieces pack from 2 MB to 64 kB),
    unpacked under ``dest``: the folder funasr read, byte for byte."""
    return unpacked(SENSEVOICE / "SenseVoiceSmall.tar.xz", dest)


def unpacked(archive: Path, dest: Path) -> Path:
    """A golden checkpoint folder kept as one .tar.xz, unpacked under ``dest``: the folder it holds."""
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
        (top,) = {Path(name).parts[0] for name in tar.getnames()}
    return dest / top
