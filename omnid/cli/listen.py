"""``omnid listen``: stream the microphone (or a file, at real-time speed) to a running daemon's /v1/realtime and
show the words as they come: the live partial rewritten in place, each final on its own line.

Turns end by themselves (server VAD). Ctrl-C or the end of the file commits what is left and waits for its final
before exiting, so nothing said is lost. ``--model`` names the session's model (the daemon's default otherwise); the
session must be accepted before any audio is sent, and a refusal (an unknown model, one still loading) is the
server's own message and exit 1.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator, TextIO

import aiohttp
import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.audio import pcm16 as audio_pcm16

BLOCK = SAMPLE_RATE // 10  # 100 ms


class ListenError(Exception):
    """A clear message for the terminal (no traceback)."""


def portaudio_status() -> str | None:
    """None when PortAudio can be used, else why not (for ``omnid doctor`` and ``omnid listen``)."""
    try:
        import sounddevice as sd

        sd.query_devices()
    except (OSError, ImportError) as exc:  # sounddevice raises OSError when libportaudio is missing
        return str(exc)
    except Exception as exc:  # noqa: BLE001  (PortAudio's own errors: no device, no host API)
        return f"{type(exc).__name__}: {exc}"
    return None


async def file_blocks(path: Path, speed: float) -> AsyncIterator[np.ndarray]:
    from omnid.audio import AudioDecodeError, decode_audio

    try:
        audio = await asyncio.get_running_loop().run_in_executor(None, decode_audio, str(path))
    except (AudioDecodeError, OSError) as exc:
        raise ListenError(f"{path}: {exc}") from None
    for i in range(0, len(audio), BLOCK):
        yield audio[i : i + BLOCK]
        await asyncio.sleep(BLOCK / SAMPLE_RATE / speed)


async def mic_blocks() -> AsyncIterator[np.ndarray]:
    import sounddevice as sd

    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[np.ndarray] = asyncio.Queue(maxsize=100)  # 10 s; older blocks are dropped if it fills

    def callback(indata, frames, time_info, status) -> None:
        block = indata[:, 0].copy()
        loop.call_soon_threadsafe(_offer, queue, block)

    try:
        stream = sd.InputStream(samplerate=SAMPLE_RATE, channels=1, dtype="float32", blocksize=BLOCK, callback=callback)
    except Exception as exc:  # noqa: BLE001  (PortAudio errors: no input device, busy device)
        raise ListenError(f"cannot open the microphone: {exc}") from None
    with stream:
        while True:
            yield await queue.get()


def pcm16(block: np.ndarray) -> str:
    """A block as the realtime socket carries it: base64 of little-endian PCM16."""
    return base64.b64encode(audio_pcm16(block)).decode()


@dataclass
class Display:
    """Partials rewritten in place on a terminal (not shown when the output is a file or a pipe)."""

    out: TextIO
    live: bool
    partial: str = ""
    finals: list[str] = field(default_factory=list)

    def show_partial(self, text: str) -> None:
        self.partial = text
        if self.live:
            self.out.write("\r\x1b[2K" + text[-200:])
            self.out.flush()

    def show_final(self, text: str) -> None:
        self.partial = ""
        if self.live:
            self.out.write("\r\x1b[2K")
        if text:
            self.finals.append(text)
            self.out.write(text + "\n")
        self.out.flush()


# The server's answer to a session update, in each dialect (OpenAI's beta shape is answered in its own name).
UPDATED = {"voxt": ("transcription_session.updated",),
           "openai": ("session.updated", "transcription_session.updated")}
# How long the server may take to accept the session before listen gives up.
SESSION_WAIT_S = 60.0


class Listener:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse, protocol: str, display: Display,
                 model: str | None = None, language: str | None = None):
        self.ws, self.protocol, self.display, self.model = ws, protocol, display, model
        self.language = language
        self.committed: set[str] = set()
        self.completed: set[str] = set()
        self.items: dict[str, str] = {}
        self.done = asyncio.Event()
        self.finishing = False

    async def start(self) -> None:
        """Sends the session's settings and waits until the server has taken them: a refused setting (an unknown
        model) ends listen with the server's message, before any audio."""
        await self.ws.send_json({"type": "session.update", "session": self.session()})
        with contextlib.suppress(asyncio.TimeoutError):
            async with asyncio.timeout(SESSION_WAIT_S):
                async for msg in self.ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    event = json.loads(msg.data)
                    if event.get("type") == "error":
                        error = event.get("error") or {}
                        raise ListenError(f"the server refused the session ({error.get('code')}): "
                                          f"{error.get('message')}")
                    if event.get("type") in UPDATED[self.protocol]:
                        return
                raise ListenError("the server closed the session before it started")
        raise ListenError(f"the server did not answer the session update in {SESSION_WAIT_S:g} s")

    def session(self) -> dict[str, object]:
        """The session update: server VAD turns, and the model and the language when they are named."""
        turns = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500}
        named = {key: value for key, value in (("model", self.model), ("language", self.language)) if value}
        if self.protocol == "voxt":
            return {"turn_detection": turns, **named}
        audio_in: dict[str, object] = {"format": {"type": "audio/pcm", "rate": SAMPLE_RATE}, "turn_detection": turns}
        if named:
            audio_in["transcription"] = named
        return {"type": "transcription", "audio": {"input": audio_in}}

    async def read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            self.on_event(json.loads(msg.data))
        self.done.set()

    def on_event(self, e: dict) -> None:
        kind = e.get("type", "")
        if kind == "error":
            code = e["error"].get("code")
            if code != "input_audio_buffer_commit_empty":
                print(f"omnid listen: server error {code}: {e['error'].get('message')}", file=sys.stderr)
            self._maybe_done()
        elif kind == "transcription.segment":
            (self.display.show_final if e["is_final"] else self.display.show_partial)(e["text"])
        elif kind == "transcription.completed":
            self.done.set()
        elif kind == "input_audio_buffer.committed":
            self.committed.add(e["item_id"])
        elif kind.endswith("input_audio_transcription.delta"):
            self.items[e["item_id"]] = self.items.get(e["item_id"], "") + e["delta"]
            self.display.show_partial(self.items[e["item_id"]])
        elif kind.endswith(("input_audio_transcription.completed", "transcription.failed")):
            self.completed.add(e["item_id"])
            self.items.pop(e["item_id"], None)
            self.display.show_final(e.get("transcript", ""))
            self._maybe_done()

    def _maybe_done(self) -> None:
        """OpenAI dialect, after the last commit: done once every committed item has its transcript."""
        if self.finishing and self.committed <= self.completed:
            self.done.set()

    async def finish(self) -> None:
        """Commit what is left and wait for every final."""
        self.finishing = True
        if self.protocol == "voxt":
            await self.ws.send_json({"type": "transcription.done"})
        else:
            await self.ws.send_json({"type": "input_audio_buffer.commit"})


async def listen(url: str, protocol: str, source: AsyncIterator[np.ndarray], api_key: str | None,
                 out: TextIO = sys.stdout, model: str | None = None, language: str | None = None) -> int:
    ws_url = url.rstrip("/").replace("http://", "ws://").replace("https://", "wss://")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    display = Display(out, live=out.isatty())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, stop.set)  # Ctrl-C ends capture; what was said is still flushed
    try:
        async with aiohttp.ClientSession() as http, http.ws_connect(
            f"{ws_url}/v1/realtime?protocol={protocol}", headers=headers, max_msg_size=0
        ) as ws:
            listener = Listener(ws, protocol, display, model, language)
            await listener.start()
            reader = asyncio.ensure_future(listener.read())
            feeding = asyncio.ensure_future(_feed(ws, source))
            await asyncio.wait([feeding, asyncio.ensure_future(stop.wait()), reader], return_when=asyncio.FIRST_COMPLETED)
            feeding.cancel()
            if feeding.done() and not feeding.cancelled() and (failure := feeding.exception()) is not None:
                raise failure
            if not ws.closed:
                await listener.finish()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(listener.done.wait(), 120)
            reader.cancel()
    except aiohttp.WSServerHandshakeError as exc:
        raise ListenError(f"{url} refused the realtime connection ({exc.status} {exc.message})") from None
    except aiohttp.ClientConnectionError as exc:
        raise ListenError(f"cannot reach omnid at {url} ({exc}); is `omnid serve` running?") from None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
    return 0


async def _feed(ws: aiohttp.ClientWebSocketResponse, source: AsyncIterator[np.ndarray]) -> None:
    async for block in source:
        await ws.send_json({"type": "input_audio_buffer.append", "audio": pcm16(block)})


def run(url: str, protocol: str, file: Path | None, speed: float, api_key: str | None,
        model: str | None = None, language: str | None = None) -> int:
    if file is None and (problem := portaudio_status()) is not None:
        print(f"omnid listen: the microphone needs PortAudio, which is not usable here ({problem}). Install it "
              "(macOS: brew install portaudio; Debian/Ubuntu: apt install libportaudio2) or stream a file with "
              "--file.", file=sys.stderr)
        return 1
    source = file_blocks(file, speed) if file is not None else mic_blocks()
    try:
        return asyncio.run(listen(url, protocol, source, api_key, model=model, language=language))
    except ListenError as exc:
        print(f"omnid listen: {exc}", file=sys.stderr)
        return 1


def _offer(queue: asyncio.Queue[np.ndarray], block: np.ndarray) -> None:
    """A microphone block for the sender; dropped when 10 s are already waiting."""
    if not queue.full():
        queue.put_nowait(block)
