"""Speakers on live realtime sessions (issue 47): what they cost a final, and whether a long session's memory stays
flat. Not part of the unit suite.

Writes (or reuses, --work) a random Sortformer checkpoint with the real v2.1 shapes (bench/sortformer_speed.py's)
and starts ``omnid serve --supervised`` serving it beside Whisper tiny.en (the default transcription model). Then:

  1. the checkpoint's cost per live feed, measured in this process (the daemon idle): a feed of the default
     ``realtime.speakers_feed_s`` and of 0.96 s, medians of --feeds after a warm-up, on the two synthetic voices;
  2. final latency, speakers off against on: --dictations English corpus clips (4-14 s), each as a Voxt session
     (manual turns, 100 ms appends at real-time pace, a commit at its last sample), once without speakers and once
     with, in alternation; latency = commit sent -> the final's transcription.segment. Printed: p50 and p95 of
     each, the p50 difference (target: at most +0.2 s), and that every final with speakers on named one;
  3. a soak: one Voxt session with speakers on, --minutes of corpus clips with silences of 2-8 s between them at
     real-time pace, a commit after each clip; the daemon's RSS every 5 minutes of audio, its growth from minute 5
     (after warm-up) to the end, and the finals that named a speaker.

    .venv/bin/python bench/live_speakers.py                          # ~40 min (30 min of soak at real time)
    .venv/bin/python bench/live_speakers.py --minutes 3 --dictations 4   # a quick look

Measured 2026-12-07 on this project's 2-core AMD EPYC VM (defaults: 8 dictations, 30 min soak, 36 min):

    live feed of 2.4 s: 0.967 s (median of 9; 0.40 s per second of audio)
    live feed of 0.96 s: 1.001 s (median of 9; 1.04 s per second of audio)
    | final latency after the commit | p50 s | p95 s |
    | speakers off | 0.74 | 0.78 |
    | speakers on | 0.75 | 0.89 |
    p50 difference: +0.01 s (target <= +0.20 s: met); finals with speakers on that named one: 8/8
    RSS MB by minute of audio: 0: 927, 5: 967, 10: 972, 15: 970, 20: 995, 25: 974, 30: 984, 30: 973
    RSS growth from minute 5 to the end: +6.5 MB; finals 164, 164 with a speaker

With the session's last feed started beside its final's decode (the first design), the same bench measured +0.24 s
p50 twice (8 dictations each): on two cores the feed and the decode shared them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import omnid  # noqa: E402,F401  (OpenBLAS before MLX)
from bench.realtime_soak import Daemon, rss_mb  # noqa: E402
from bench.sortformer_speed import daemon_config, make_checkpoint  # noqa: E402
from omnid.cli.listen import pcm16  # noqa: E402
from omnid.config import RealtimeConfig  # noqa: E402
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")
WORK = Path("/tmp/omnid-bench-sortformer")
RATE = 16000
STEP = RATE // 10  # 100 ms appends


def english(lo: float, hi: float, limit: int, seed: int = 0) -> list[np.ndarray]:
    from omnid.audio import decode_audio

    manifest = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    picked = [m for m in manifest if m["language"] == "en" and lo <= m["duration_s"] <= hi]
    random.Random(seed).shuffle(picked)
    return [decode_audio(CORPUS / m["path"]) for m in picked[:limit]]


def append(audio: np.ndarray) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": pcm16(audio)})


def feed_cost(folder: Path, feeds: int) -> dict[float, float]:
    from omnid.engine.sortformer.engine import SortformerEngine
    from tests.sortformer_clips import two_voices

    engine = SortformerEngine("bench", folder)
    audio = two_voices(400.0)
    out = {}
    for seconds in (RealtimeConfig().speakers_feed_s, 0.96):
        frames = round(seconds / 0.08)
        stream, times, pos = engine.new_stream(), [], 0
        warm = -(-400 // frames)  # feeds that fill the speaker cache and FIFO (188 + 188 frames) first
        for i in range(feeds + warm):
            started = time.perf_counter()
            engine.feed(stream, audio[pos : pos + frames * 1280 - 1], 188, 188)
            if i >= warm:
                times.append(time.perf_counter() - started)
            pos += frames * 1280
        out[seconds] = statistics.median(times)
    return out


async def dictation(url: str, audio: np.ndarray, speakers: bool) -> tuple[float, dict]:
    """One Voxt session: the clip at real-time pace, a commit at its last sample; (commit -> final s, the final)."""
    async with aiohttp.ClientSession() as http, http.ws_connect(url + "/v1/realtime", max_msg_size=0) as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {
            "turn_detection": None, "language": "en", "speakers": speakers}}))
        assert (await ws.receive_json(timeout=30))["type"] == "transcription_session.updated"
        start = time.perf_counter()
        for i in range(0, len(audio), STEP):
            await ws.send_str(append(audio[i : i + STEP]))
            await asyncio.sleep(max(0.0, start + (i + STEP) / RATE - time.perf_counter()))
        sent = time.perf_counter()
        await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        while True:
            event = await ws.receive_json(timeout=120)
            if event["type"] == "error":
                raise RuntimeError(event)
            if event["type"] == "transcription.segment" and event["is_final"]:
                return time.perf_counter() - sent, event


async def latency(url: str, clips: list[np.ndarray]) -> dict[bool, list[float]]:
    out: dict[bool, list[float]] = {False: [], True: []}
    named = 0
    for i, clip in enumerate(clips):
        for speakers in ((False, True) if i % 2 == 0 else (True, False)):
            seconds, final = await dictation(url, clip, speakers)
            out[speakers].append(seconds)
            named += speakers and final.get("speaker") is not None
            print(f"  clip {i + 1}/{len(clips)} ({len(clip) / RATE:.1f} s), speakers {'on ' if speakers else 'off'}: "
                  f"final {seconds:.2f} s after the commit{', speaker ' + str(final.get('speaker')) if speakers else ''}",
                  file=sys.stderr, flush=True)
    out["named"] = named  # type: ignore[index]
    return out


async def soak(url: str, pid: int, minutes: float, clips: list[np.ndarray]) -> dict:
    rng = random.Random(1)
    rss: list[tuple[float, float]] = [(0.0, rss_mb(pid))]
    finals, named, sent = 0, 0, 0
    async with aiohttp.ClientSession() as http, http.ws_connect(url + "/v1/realtime", max_msg_size=0) as ws:
        await ws.send_str(json.dumps({"type": "session.update", "session": {
            "turn_detection": None, "language": "en", "speakers": True}}))

        async def read() -> None:
            nonlocal finals, named
            async for msg in ws:
                event = json.loads(msg.data)
                if event["type"] == "error":
                    raise RuntimeError(event)
                if event["type"] == "transcription.segment" and event["is_final"]:
                    finals += 1
                    named += event.get("speaker") is not None
                if event["type"] == "transcription.completed":
                    return

        reader = asyncio.ensure_future(read())
        start, next_report = time.perf_counter(), 300.0
        while sent < minutes * 60 * RATE:
            clip = clips[rng.randrange(len(clips))]
            gap = np.zeros(int(rng.uniform(2.0, 8.0) * RATE), np.float32)
            for piece, commit in ((clip, True), (gap, False)):
                for i in range(0, len(piece), STEP):
                    await ws.send_str(append(piece[i : i + STEP]))
                    sent += len(piece[i : i + STEP])
                    await asyncio.sleep(max(0.0, start + sent / RATE - time.perf_counter()))
                    if sent / RATE >= next_report:
                        rss.append((sent / RATE / 60, rss_mb(pid)))
                        print(f"  {sent / RATE / 60:5.1f} min: RSS {rss[-1][1]:.0f} MB, finals {finals} "
                              f"({named} with a speaker)", file=sys.stderr, flush=True)
                        next_report += 300.0
                if commit:
                    await ws.send_str(json.dumps({"type": "input_audio_buffer.commit"}))
        await ws.send_str(json.dumps({"type": "transcription.done"}))
        await asyncio.wait_for(reader, 300)
    rss.append((sent / RATE / 60, rss_mb(pid)))
    return {"rss": rss, "finals": finals, "named": named}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=WORK, help="the random checkpoint (written when missing)")
    ap.add_argument("--feeds", type=int, default=9)
    ap.add_argument("--dictations", type=int, default=8)
    ap.add_argument("--minutes", type=float, default=30.0)
    args = ap.parse_args()
    if not (args.work / "model.safetensors").exists():
        make_checkpoint(args.work)
    cost = feed_cost(args.work, args.feeds)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "omnid.toml"
        config.write_text(daemon_config(args.work))
        daemon = Daemon(["--config", str(config)])
        try:
            lat = asyncio.run(latency(daemon.url, english(4.0, 14.0, args.dictations)))
            long = asyncio.run(soak(daemon.url, daemon.pid, args.minutes, english(1.0, 20.0, 60, seed=2)))
        finally:
            daemon.stop()
    print(f"\nSortformer v2.1 shapes (random weights) beside Whisper tiny.en; {args.dictations} dictations, "
          f"{args.minutes:g} min soak")
    for seconds, t in cost.items():
        print(f"live feed of {seconds:g} s: {t:.3f} s (median of {args.feeds}; {t / seconds:.2f} s per second of audio)")
    off, on = (sorted(lat[k]) for k in (False, True))
    p95 = lambda xs: float(np.percentile(xs, 95))  # noqa: E731
    print("| final latency after the commit | p50 s | p95 s |\n|---|---|---|")
    print(f"| speakers off | {statistics.median(off):.2f} | {p95(off):.2f} |")
    print(f"| speakers on | {statistics.median(on):.2f} | {p95(on):.2f} |")
    diff = statistics.median(on) - statistics.median(off)
    print(f"p50 difference: {diff:+.2f} s (target <= +0.20 s: {'met' if diff <= 0.2 else 'NOT met'}); finals with "
          f"speakers on that named one: {lat['named']}/{len(on)}")  # type: ignore[index]
    rss = long["rss"]
    after = [r for m, r in rss if m >= 5.0]
    print("RSS MB by minute of audio: " + ", ".join(f"{m:.0f}: {r:.0f}" for m, r in rss))
    if after:
        print(f"RSS growth from minute 5 to the end: {after[-1] - after[0]:+.1f} MB; finals {long['finals']}, "
              f"{long['named']} with a speaker")


if __name__ == "__main__":
    main()
