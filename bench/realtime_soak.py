"""Soak test of /v1/realtime (not part of the unit suite): is a realtime session's memory flat over hours?

Starts `omnid serve --supervised` as a child process, then
  1. one session fed --hours of audio (English corpus clips with silence between them, sent faster than real
     time: each clip and the silence after it as fast as the socket takes them, the next clip once the previous
     one's transcript is back), and
  2. --sessions sessions fed --minutes each, all at once,
in the OpenAI dialect with server VAD (turns end by themselves). Prints the daemon's RSS at the start, after every
10 minutes of audio and at the end, and p50/p95 of final latency: from the moment the clip's last sample was sent
to the last `completed` event of the turns it made (the client sends the following silence at once, so this is
VAD's 500 ms of silence detection plus transcription, without waiting those 500 ms in real time).

    .venv/bin/python bench/realtime_soak.py                  # 2 h + 16 x 10 min
    .venv/bin/python bench/realtime_soak.py --hours 0.2 --sessions 4 --minutes 2   # a quick look
    .venv/bin/python bench/realtime_soak.py --stream /tmp/latency/nemotron-0.6b --minutes 30   # a cache-aware model

``--stream PATH`` soaks a cache-aware model instead (a Nemotron checkpoint: bench/nemotron_checkpoint.py makes one
with the real shapes): one Voxt session, manual turns, ``--minutes`` of corpus speech with silences between the
clips at real-time pace in 100 ms appends, one stream from the first sample to the commit at the end. Every minute:
the daemon's RSS, and the compute per chunk over that minute (the model's compute seconds over the chunks its audio
held, from /metrics' omnid_compute_seconds and omnid_audio_seconds). Printed: RSS growth between minute 5 and the
end, per-chunk time of the first and last five minutes, previews seen, and the final's latency after the commit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
import soxr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.cli.listen import pcm16  # noqa: E402  (the same PCM16 encoding as omnid's own client)
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one
RATE = 24000
CHUNK = RATE // 10  # 100 ms appends
REPORT_EVERY_S = 600.0


def rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    out = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True, check=False).stdout
    return int(out.strip() or 0) / 1024


def load_clips(limit: int) -> list[np.ndarray]:
    from omnid.audio import decode_audio

    manifest = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    english = [m for m in manifest if m["language"] == "en" and 1.0 <= m["duration_s"] <= 20.0]
    random.Random(0).shuffle(english)
    return [soxr.resample(decode_audio(CORPUS / m["path"]), 16000, RATE).astype(np.float32) for m in english[:limit]]


class Daemon:
    """`omnid serve --supervised` from ``tree`` (this checkout, or another revision's worktree)."""

    def __init__(self, extra: list[str], tree: Path = ROOT):
        cmd = [sys.executable, "-m", "omnid", "serve", "--supervised", "--port", "0", *extra]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)})
        ready = json.loads(self.proc.stdout.readline())
        if ready.get("event") != "ready":
            raise SystemExit(f"daemon failed: {ready}")
        self.port, self.pid = ready["port"], ready["server_pid"]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"command": "shutdown"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


class Feeder:
    """One session: clip, silence, wait for the clip's transcript, repeat until ``seconds`` of audio are sent."""

    def __init__(self, url: str, clips: list[np.ndarray], seconds: float, seed: int, gaps: tuple[float, float],
                 on_progress=None):
        self.url, self.clips, self.seconds = url, clips, seconds
        self.rng = random.Random(seed)
        self.gaps = gaps
        self.sent_s = 0.0
        self.latencies: list[float] = []
        self.speech_s = 0.0
        self.errors: list[dict] = []
        self.on_progress = on_progress

    async def run(self, http: aiohttp.ClientSession) -> None:
        async with http.ws_connect(self.url, max_msg_size=0) as ws:
            self.committed, self.completed = 0, 0
            self.last_done = 0.0
            self.changed = asyncio.Event()
            reader = asyncio.ensure_future(self._read(ws))
            try:
                while self.sent_s < self.seconds:
                    clip = self.clips[self.rng.randrange(len(self.clips))]
                    gap = np.zeros(int(self.rng.uniform(*self.gaps) * RATE), np.float32)
                    await self._send(ws, clip)
                    last_sample_at = time.monotonic()
                    self.speech_s += len(clip) / RATE
                    await self._send(ws, gap)
                    # A barrier: the reply comes after every append before it was analysed, so every turn the
                    # clip made (a pause inside it makes two) has been committed by then.
                    self.updated = False
                    await ws.send_str(json.dumps({"type": "transcription_session.update", "session": {}}))
                    await asyncio.wait_for(self._settled(), 300)
                    if self.last_done > last_sample_at:
                        self.latencies.append(self.last_done - last_sample_at)
            finally:
                reader.cancel()

    async def _settled(self) -> None:
        while not (self.updated and self.completed >= self.committed):
            self.changed.clear()
            await self.changed.wait()

    async def _send(self, ws, audio: np.ndarray) -> None:
        for i in range(0, len(audio), CHUNK):
            await ws.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(audio[i : i + CHUNK])}))
            before = self.sent_s
            self.sent_s += min(CHUNK, len(audio) - i) / RATE
            if self.on_progress and int(before // REPORT_EVERY_S) != int(self.sent_s // REPORT_EVERY_S):
                self.on_progress(self.sent_s)

    async def _read(self, ws) -> None:
        async for msg in ws:
            event = json.loads(msg.data)
            kind = event["type"]
            if kind == "input_audio_buffer.committed":
                self.committed += 1
            elif kind.endswith(("input_audio_transcription.completed", "transcription.failed")):
                self.completed += 1
                self.last_done = time.monotonic()
            elif kind == "transcription_session.updated":
                self.updated = True
            if kind == "error" or kind.endswith("failed"):
                self.errors.append(event)
            self.changed.set()


def percentiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    q = np.percentile(values, [50, 95])
    return f"p50 {q[0]:.2f} s, p95 {q[1]:.2f} s over {len(values)} finals"


async def phase_one(daemon: Daemon, clips, hours: float, gaps) -> dict:
    url = f"ws://127.0.0.1:{daemon.port}/v1/realtime?protocol=openai"
    marks: list[tuple[float, float]] = []
    started = time.monotonic()

    def progress(sent: float) -> None:
        marks.append((sent, rss_mb(daemon.pid)))
        print(f"  {sent / 60:6.1f} min of audio  RSS {marks[-1][1]:7.1f} MB  wall {time.monotonic() - started:7.1f} s",
              flush=True)

    feeder = Feeder(url, clips, hours * 3600, 1, gaps, progress)
    async with aiohttp.ClientSession() as http:
        await feeder.run(http)
    return {"marks": marks, "feeder": feeder, "wall": time.monotonic() - started}


async def phase_two(daemon: Daemon, clips, sessions: int, minutes: float, gaps) -> dict:
    url = f"ws://127.0.0.1:{daemon.port}/v1/realtime?protocol=openai"
    feeders = [Feeder(url, clips, minutes * 60, 100 + i, gaps) for i in range(sessions)]
    marks: list[tuple[float, float]] = []
    started = time.monotonic()

    async def watch():
        next_mark = REPORT_EVERY_S
        while True:
            total = sum(f.sent_s for f in feeders)
            if total >= next_mark:
                marks.append((total, rss_mb(daemon.pid)))
                print(f"  {total / 60:6.1f} min of audio (all sessions)  RSS {marks[-1][1]:7.1f} MB  "
                      f"wall {time.monotonic() - started:7.1f} s", flush=True)
                next_mark += REPORT_EVERY_S
            await asyncio.sleep(0.5)

    watcher = asyncio.ensure_future(watch())
    async with aiohttp.ClientSession() as http:
        await asyncio.gather(*(f.run(http) for f in feeders))
    watcher.cancel()
    return {"marks": marks, "feeders": feeders, "wall": time.monotonic() - started}


async def scrape(http: aiohttp.ClientSession, url: str, model: str) -> tuple[float, float]:
    """(compute seconds, audio seconds) of ``model`` so far, from /metrics."""
    async with http.get(url + "/metrics") as resp:
        text = await resp.text()
    values = {}
    for name in ("omnid_compute_seconds_total", "omnid_audio_seconds_total"):
        for line in text.splitlines():
            if line.startswith(f'{name}{{model="{model}"}}'):
                values[name] = float(line.split()[-1])
    return values.get("omnid_compute_seconds_total", 0.0), values.get("omnid_audio_seconds_total", 0.0)


async def stream_soak(daemon: Daemon, clips: list[np.ndarray], minutes: float, gaps: tuple[float, float],
                      chunk_s: float) -> dict:
    """One Voxt session on the cache-aware model "stream": speech and silence at real-time pace, one minute at a
    time -> per minute (RSS MB, compute s per chunk), previews, the final's latency."""
    rng = random.Random(1)
    audio: list[np.ndarray] = []
    total = 0
    while total < minutes * 60 * 16000:
        clip = soxr.resample(clips[rng.randrange(len(clips))], RATE, 16000).astype(np.float32)
        gap = np.zeros(int(rng.uniform(*gaps) * 16000), np.float32)
        audio += [clip, gap]
        total += len(clip) + len(gap)
    signal = np.concatenate(audio)[: int(minutes * 60 * 16000)]
    rows: list[tuple[float, float]] = []
    seen = {"previews": 0, "final": None, "errors": []}
    async with aiohttp.ClientSession() as http, http.ws_connect(daemon.url.replace("http", "ws") + "/v1/realtime",
                                                                 max_msg_size=0) as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {"model": "stream", "turn_detection": None}}))
        committed: list[float] = []

        async def read() -> None:
            async for msg in ws:
                event = json.loads(msg.data)
                if event["type"] == "error":
                    seen["errors"].append(event)
                elif event["type"] == "transcription.segment" and not event["is_final"]:
                    seen["previews"] += 1
                elif event["type"] == "transcription.segment" and committed:
                    seen["final"] = time.monotonic() - committed[0]
                elif event["type"] == "transcription.completed":
                    return

        reader = asyncio.ensure_future(read())
        start, step, minute = time.monotonic(), 1600, 60 * 16000
        last = await scrape(http, daemon.url, "stream")
        for i in range(0, len(signal), step):
            await asyncio.sleep(max(0.0, start + i / 16000 - time.monotonic()))
            await ws.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(signal[i : i + step])}))
            if (i + step) % minute == 0:
                now = await scrape(http, daemon.url, "stream")
                audio_s = now[1] - last[1]
                rows.append((rss_mb(daemon.pid), (now[0] - last[0]) / max(audio_s / chunk_s, 1e-9)))
                last = now
                print(f"  minute {len(rows)}: RSS {rows[-1][0]:.1f} MB, {rows[-1][1]:.3f} s per chunk", flush=True)
        committed.append(time.monotonic())
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        await asyncio.wait_for(reader, 600)
    return {"rows": rows, **seen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=2.0, help="audio fed to the single long session")
    ap.add_argument("--sessions", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=10.0, help="audio fed to each concurrent session")
    ap.add_argument("--gap", type=float, nargs=2, default=(5.0, 40.0), metavar=("MIN", "MAX"),
                    help="seconds of silence after each clip (uniform)")
    ap.add_argument("--clips", type=int, default=120, help="corpus clips to draw from")
    ap.add_argument("--phases", default="1,2", help="which phases to run (default 1,2)")
    ap.add_argument("--stream", type=Path, metavar="PATH", help="soak this cache-aware (Nemotron) checkpoint")
    ap.add_argument("serve_args", nargs="*", help="extra arguments for omnid serve (after --)")
    args = ap.parse_args()

    clips = load_clips(args.clips)
    if args.stream:
        soak_stream(args, clips)
        return
    daemon = Daemon(args.serve_args)
    try:
        base = rss_mb(daemon.pid)
        print(f"daemon pid {daemon.pid}, RSS after load {base:.1f} MB; {len(clips)} clips, gaps {args.gap} s")
        phases = set(args.phases.split(","))
        if "1" in phases:
            print(f"phase 1: one session, {args.hours:g} h of audio")
            one = asyncio.run(phase_one(daemon, clips, args.hours, tuple(args.gap)))
            f = one["feeder"]
            print(f"phase 1 done: {f.sent_s / 3600:.2f} h of audio ({f.speech_s / 60:.1f} min speech) in "
                  f"{one['wall'] / 60:.1f} min wall; errors {len(f.errors)}; final latency {percentiles(f.latencies)}")
            report_growth("phase 1", base, one["marks"], rss_mb(daemon.pid))
        if "2" not in phases:
            return
        print(f"phase 2: {args.sessions} sessions x {args.minutes:g} min of audio")
        two = asyncio.run(phase_two(daemon, clips, args.sessions, args.minutes, tuple(args.gap)))
        lat = [x for fd in two["feeders"] for x in fd.latencies]
        errors = sum(len(fd.errors) for fd in two["feeders"])
        total = sum(fd.sent_s for fd in two["feeders"])
        speech = sum(fd.speech_s for fd in two["feeders"])
        print(f"phase 2 done: {total / 3600:.2f} h of audio ({speech / 60:.1f} min speech) in "
              f"{two['wall'] / 60:.1f} min wall; errors {errors}; "
              f"final latency {percentiles(lat)}")
        report_growth("phase 2", base, two["marks"], rss_mb(daemon.pid))
    finally:
        daemon.stop()


def soak_stream(args, clips: list[np.ndarray]) -> None:
    import tempfile

    from omnid.engine.nemotron.checkpoint import load

    streaming = load(args.stream).streaming
    chunk_s = (streaming.contexts[0][1] + 1) * 0.08
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "omnid.toml"
        config.write_text(f'[transcription]\ndefault_model = "stream"\n\n'
                          f'[[models]]\nid = "stream"\nkind = "nemotron"\npath = "{args.stream}"\n')
        daemon = Daemon(["--config", str(config), *args.serve_args])
        try:
            base = rss_mb(daemon.pid)
            print(f"daemon pid {daemon.pid}, RSS after load {base:.1f} MB; one session, {args.minutes:g} min at real "
                  f"time, native chunk {chunk_s * 1000:.0f} ms, gaps {args.gap} s", flush=True)
            out = asyncio.run(stream_soak(daemon, clips, args.minutes, tuple(args.gap), chunk_s))
        finally:
            daemon.stop()
    rows = out["rows"]
    first, later = [r[1] for r in rows[:5]], [r[1] for r in rows[-5:]]
    at5 = rows[4][0] if len(rows) >= 5 else rows[0][0]
    print(f"RSS: after load {base:.1f} MB, minute 5 {at5:.1f} MB, end {rows[-1][0]:.1f} MB: growth minute 5 -> end "
          f"{rows[-1][0] - at5:+.1f} MB (peak {max(r[0] for r in rows):.1f} MB)")
    print(f"per-chunk compute: median of minutes 1-5 {np.median(first):.3f} s, of the last five {np.median(later):.3f} s "
          f"(ratio {np.median(later) / np.median(first):.2f}); previews {out['previews']}; final {out['final']} s after "
          f"the commit; errors {len(out['errors'])}")


def report_growth(label: str, base: float, marks: list[tuple[float, float]], end: float) -> None:
    warm = marks[0][1] if marks else base
    print(f"{label} RSS: after load {base:.1f} MB, after the first 10 min of audio (warm-up) {warm:.1f} MB, "
          f"end {end:.1f} MB, peak {max([end, *(m[1] for m in marks)]):.1f} MB; "
          f"growth after warm-up {end - warm:+.1f} MB")


if __name__ == "__main__":
    main()
