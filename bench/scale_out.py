"""Several omnid daemons behind HAProxy (docs/deployment.md), on loopback ports: the load spreads, WebSocket sessions
stay on their daemon, and a daemon sent SIGTERM mid-load leaves the pool without losing a final or a request.

It starts two daemons (``server.drain_notice_s`` 2 s, an API key) and HAProxy in front of them with the
configuration from docs/deployment.md, then sends through HAProxy, for ``--seconds``: ``--sessions`` realtime
sessions in the Voxt dialect (each a corpus clip streamed at real-time pace in 100 ms appends, then commit and
``transcription.done``, again and again) and ``--files`` clients posting corpus clips to /v1/audio/transcriptions
one after another. A third of the way in, daemon A gets SIGTERM. Printed: which daemon served what (HAProxy's
``X-Served-By`` header), by when the session or request started, before or after the SIGTERM; every session's
turns and finals (a turn whose final did not arrive is lost; a session the leaving daemon closed after its open
segment's final carries on through HAProxy on the other daemon with the rest of its clip); every file request's
status and wall time; the realtime text against each clip's offline text. Needs Debian's haproxy (``apt-get install haproxy``).

    .venv/bin/python bench/scale_out.py                  # ~1 min
    .venv/bin/python bench/scale_out.py --sessions 6 --files 4 --seconds 90
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.audio import decode_audio, pcm16, wav_bytes  # noqa: E402
from omnid.evaluation.corpus import corpus_folder  # noqa: E402
from omnid.evaluation.scoring import edit_distance, tokens  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one
KEY = "scale-out-bench-key"
STEP = 1600  # 100 ms at 16 kHz
DRAIN_NOTICE_S = 2.0
HEADERS = {"Authorization": f"Bearer {KEY}"}

# The configuration docs/deployment.md describes, on loopback ports (written out with them by haproxy_config).
HAPROXY = """global
    maxconn 4096

defaults
    mode http
    option http-server-close
    timeout connect 5s
    timeout client 120s
    timeout server 660s
    timeout tunnel 2h
    option redispatch
    retries 2

frontend omnid
    bind 127.0.0.1:{port}
    default_backend daemons

backend daemons
    balance leastconn
    option httpchk GET /health
    http-check expect status 200
    http-response set-header X-Served-By %s
    default-server inter 500ms fall 2 rise 2
{servers}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    def __init__(self, name: str, folder: Path):
        self.name, self.port = name, free_port()
        config = folder / f"{name}.toml"
        config.write_text(f'[server]\nport = {self.port}\ndrain_notice_s = {DRAIN_NOTICE_S}\nshutdown_grace_s = 30.0\n'
                          f'[security]\napi_key = "{KEY}"\n')
        self.proc = subprocess.Popen([sys.executable, "-m", "omnid", "serve", "--supervised", "--config", str(config)],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        assert self.proc.stdout is not None
        ready = json.loads(self.proc.stdout.readline())
        if ready.get("event") != "ready":
            raise SystemExit(f"daemon {name} failed: {ready}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def haproxy_config(port: int, daemons: list[Daemon]) -> str:
    servers = "\n".join(f"    server {d.name} 127.0.0.1:{d.port} check" for d in daemons)
    return HAPROXY.format(port=port, servers=servers)


@dataclass
class Clip:
    audio: np.ndarray
    offline: str = ""


@dataclass
class Tally:
    served: Counter = field(default_factory=Counter)  # (phase, kind, daemon) -> count
    statuses: Counter = field(default_factory=Counter)
    turns: int = 0
    finals: int = 0
    reconnects: int = 0
    errors: Counter = field(default_factory=Counter)
    word_errors: int = 0
    words: int = 0
    sigterm_at: float | None = None
    file_seconds: list[float] = field(default_factory=list)

    def phase(self) -> str:
        return "before" if self.sigterm_at is None else "after"


async def session(http: aiohttp.ClientSession, url: str, clips: list[Clip], until: float, seed: int, t: Tally) -> None:
    """Clips streamed at real-time pace, one turn each. When the leaving daemon closes the socket (its open
    segment's final first), the session connects again through HAProxy and sends the rest of the clip there. Every
    connection that carried audio is a turn that owes one final."""
    rng = random.Random(seed)
    while time.monotonic() < until:
        clip = clips[rng.randrange(len(clips))]
        sent, texts = 0, []
        while True:
            async with http.ws_connect(url + "/v1/realtime?protocol=voxt", headers=HEADERS, max_msg_size=0) as ws:
                t.served[(t.phase(), "session", ws._response.headers.get("X-Served-By", "?"))] += 1
                await ws.send_str(json.dumps({"type": "session.update", "session": {"turn_detection": None}}))
                finals: list[str] = []
                reader = asyncio.ensure_future(_read(ws, finals, t))
                first = sent
                try:
                    while sent < len(clip.audio) and not reader.done():
                        chunk = clip.audio[sent : sent + STEP]
                        await ws.send_str(json.dumps({"type": "input_audio_buffer.append",
                                                      "audio": base64.b64encode(pcm16(chunk)).decode()}))
                        sent += len(chunk)
                        await asyncio.sleep(len(chunk) / 16000)
                    if not reader.done():
                        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
                        await ws.send_str(json.dumps({"type": "transcription.done"}))
                    closed_by_server = await reader
                except (aiohttp.ClientError, ConnectionError):
                    closed_by_server = True
            if sent > first:
                t.turns += 1
                t.finals += min(1, len(finals))
            texts += [f for f in finals if f]
            if not closed_by_server or sent >= len(clip.audio):
                break
            t.reconnects += 1
        said = " ".join(texts)
        t.word_errors += edit_distance(tokens(clip.offline, "en"), tokens(said, "en"))
        t.words += len(tokens(clip.offline, "en"))


async def _read(ws: aiohttp.ClientWebSocketResponse, finals: list[str], t: Tally) -> bool:
    """Final texts until completed (False) or the server's closing error (True)."""
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            break
        event = json.loads(msg.data)
        if event["type"] == "transcription.segment" and event["is_final"]:
            finals.append(event["text"].strip())
        elif event["type"] == "transcription.completed":
            return False
        elif event["type"] == "error":
            t.errors[event["error"]["code"]] += 1
            if event["error"]["code"] == "server_shutting_down":
                return True
    return True


async def files(http: aiohttp.ClientSession, url: str, clips: list[Clip], until: float, seed: int, t: Tally) -> None:
    rng = random.Random(seed)
    while time.monotonic() < until:
        clip = clips[rng.randrange(len(clips))]
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(clip.audio), filename="a.wav")
        phase, started = t.phase(), time.monotonic()
        async with http.post(url + "/v1/audio/transcriptions", data=form, headers=HEADERS) as resp:
            t.statuses[resp.status] += 1
            t.served[(phase, "file", resp.headers.get("X-Served-By", "?"))] += 1
            await resp.read()
        t.file_seconds.append(time.monotonic() - started)


async def offline_texts(http: aiohttp.ClientSession, url: str, clips: list[Clip]) -> None:
    for clip in clips:
        form = aiohttp.FormData()
        form.add_field("file", wav_bytes(clip.audio), filename="a.wav")
        form.add_field("language", "en")
        async with http.post(url + "/v1/audio/transcriptions", data=form, headers=HEADERS) as resp:
            clip.offline = (await resp.json())["text"]


def load_clips(n: int) -> list[Clip]:
    manifest = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    english = [m for m in manifest if m["language"] == "en" and 3.0 <= m["duration_s"] <= 8.0]
    random.Random(0).shuffle(english)
    return [Clip(decode_audio(CORPUS / m["path"])) for m in english[:n]]


async def run(args: argparse.Namespace, proxy_url: str, daemons: list[Daemon]) -> Tally:
    t = Tally()
    clips = load_clips(args.clips)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900)) as http:
        await offline_texts(http, proxy_url, clips)
        until = time.monotonic() + args.seconds
        work = [asyncio.ensure_future(session(http, proxy_url, clips, until, i, t)) for i in range(args.sessions)]
        work += [asyncio.ensure_future(files(http, proxy_url, clips, until, 100 + i, t)) for i in range(args.files)]
        await asyncio.sleep(args.seconds / 3)
        t.sigterm_at = time.monotonic()
        daemons[0].proc.send_signal(signal.SIGTERM)
        print(f"SIGTERM sent to daemon {daemons[0].name} at {args.seconds / 3:.0f} s", flush=True)
        await asyncio.gather(*work)
    return t


def report(t: Tally, daemons: list[Daemon]) -> None:
    print("\nwho served what (HAProxy's X-Served-By):")
    print(f"{'phase':<8}{'kind':<9}" + "".join(f"{d.name:>8}" for d in daemons))
    for phase in ("before", "after"):
        for kind in ("session", "file"):
            print(f"{phase:<8}{kind:<9}" + "".join(f"{t.served[(phase, kind, d.name)]:>8}" for d in daemons))
    lost_finals = t.turns - t.finals
    failed = sum(n for status, n in t.statuses.items() if status != 200)
    print(f"\nrealtime: {t.turns} turns with audio, {t.finals} with their final, lost {lost_finals}; {t.reconnects} "
          f"sessions closed mid-clip by the drain carried on through HAProxy; error events {dict(t.errors) or 'none'}")
    seconds = sorted(t.file_seconds) or [0.0]
    print(f"files: {sum(t.statuses.values())} requests, statuses {dict(t.statuses)}, failed {failed}; wall "
          f"median {seconds[len(seconds) // 2]:.2f} s, max {seconds[-1]:.2f} s (file jobs queue behind realtime work)")
    if t.words:
        print(f"realtime text against offline: WER {100 * t.word_errors / t.words:.1f}% over {t.words} words")
    codes = [d.proc.wait(60) for d in daemons[:1]]
    print(f"daemon {daemons[0].name} exit code after SIGTERM: {codes[0]}")
    print("\nRESULT: " + ("no final and no request lost" if lost_finals == 0 and failed == 0 else "LOSSES, see above"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--files", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--clips", type=int, default=6)
    args = parser.parse_args()
    if shutil.which("haproxy") is None:
        raise SystemExit("haproxy is not installed (Debian: apt-get install haproxy)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        daemons = [Daemon("a", folder), Daemon("b", folder)]
        proxy_port = free_port()
        (folder / "haproxy.cfg").write_text(haproxy_config(proxy_port, daemons))
        proxy = subprocess.Popen(["haproxy", "-db", "-f", str(folder / "haproxy.cfg")], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.5)  # two health checks pass (rise 2, every 500 ms)
            print(f"daemons a :{daemons[0].port} and b :{daemons[1].port} behind HAProxy :{proxy_port}", flush=True)
            tally = asyncio.run(run(args, f"http://127.0.0.1:{proxy_port}", daemons))
            report(tally, daemons)
        finally:
            proxy.terminate()
            for d in daemons:
                d.stop()


if __name__ == "__main__":
    main()
