"""A long diarization stream through the daemon (not part of the unit suite): is memory flat, are the cache and
FIFO bounded, is a feed as fast at minute 30 as at minute 1?

Writes a random checkpoint with the real v2.1 shapes (bench/sortformer_speed.py's), starts
``omnid serve --supervised`` with it configured as a ``sortformer`` model (a temporary config beside the default
one), and streams --minutes of two synthetic voices (tests/sortformer_clips.py, regenerated per 5-minute block with
a new seed) over ``/v1/diarization/stream`` in Voxt's feeds (79,360 samples, 4.96 s), each sent when the previous
reply is in. After every feed it checks ``fifo_length <= fifo_max`` and ``spkcache_length <= max(spkcache_max,
188)`` from the reply; it prints the daemon's RSS at minute 5 and at the end (growth between them: target <= 20
MB), and p95 per-feed time of feeds 10-60 against the last 50 (target: last <= 1.2x).

    .venv/bin/python bench/sortformer_soak.py                 # 30 minutes of audio (~15-25 min here)
    .venv/bin/python bench/sortformer_soak.py --minutes 6     # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.realtime_soak import Daemon, rss_mb  # noqa: E402
from bench.sortformer_speed import daemon_config, make_checkpoint  # noqa: E402
from tests.sortformer_clips import two_voices  # noqa: E402

FEED = 79_360


async def stream(url: str, minutes: float, pid: int, spkcache_max: int, fifo_max: int) -> dict:
    total_feeds = int(minutes * 60 * 16000 // FEED)
    times: list[float] = []
    rss: dict[str, float] = {"start": rss_mb(pid)}
    bound = max(spkcache_max, 188)
    query = f"spkcache_max={spkcache_max}&fifo_max={fifo_max}"
    block: np.ndarray = np.zeros(0, np.float32)
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(f"{url.replace('http', 'ws')}/v1/diarization/stream?{query}",
                                      max_msg_size=0) as ws:
            for i in range(total_feeds):
                if len(block) < FEED:
                    block = np.concatenate([block, two_voices(300.0, seed=100 + i)])
                feed, block = block[:FEED], block[FEED:]
                started = time.perf_counter()
                await ws.send_bytes(feed.tobytes())
                reply = json.loads((await ws.receive()).data)
                times.append(time.perf_counter() - started)
                state = reply["state"]
                if state["fifo_length"] > fifo_max or state["spkcache_length"] > bound:
                    raise SystemExit(f"feed {i}: state out of bounds: {state}")
                minute = (i + 1) * FEED / 16000 / 60
                if "minute 5" not in rss and minute >= 5:
                    rss["minute 5"] = rss_mb(pid)
                if (i + 1) % 60 == 0:
                    print(f"  {minute:5.1f} min of audio, feed p50 {np.median(times[-60:]):.2f} s, "
                          f"RSS {rss_mb(pid):.0f} MB, state {state}", file=sys.stderr, flush=True)
    rss["end"] = rss_mb(pid)
    return {"times": times, "rss": rss, "feeds": total_feeds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--spkcache-max", type=int, default=188)
    ap.add_argument("--fifo-max", type=int, default=188)
    ap.add_argument("--keep", type=Path, help="write (or reuse) the random checkpoint here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "sortformer-v2.1-random"
        if not (folder / "model.safetensors").exists():
            make_checkpoint(folder)
        config = Path(tmp) / "omnid.toml"
        config.write_text(daemon_config(folder))
        daemon = Daemon(["--config", str(config)])
        try:
            out = asyncio.run(stream(daemon.url, args.minutes, daemon.pid, args.spkcache_max, args.fifo_max))
        finally:
            daemon.stop()
    t = np.array(out["times"])
    early = np.percentile(t[9:60], 95) if len(t) > 60 else float("nan")
    late = np.percentile(t[-50:], 95)
    rss = out["rss"]
    print(f"\n{args.minutes:.0f} min of audio in {out['feeds']} feeds of 4.96 s; spkcache_max {args.spkcache_max}, "
          f"fifo_max {args.fifo_max}; cache and FIFO within bounds after every feed")
    print("| measure | value |\n|---|---|")
    print(f"| daemon RSS at start / minute 5 / end, MB | {rss['start']:.0f} / {rss.get('minute 5', float('nan')):.0f} / "
          f"{rss['end']:.0f} |")
    print(f"| RSS growth minute 5 -> end, MB (target <= 20) | {rss['end'] - rss.get('minute 5', rss['end']):.1f} |")
    print(f"| per-feed p95, feeds 10-60 / last 50, s | {early:.2f} / {late:.2f} (ratio {late / early:.2f}; target <= 1.2) |")
    print(f"| per-feed median, s (RTF) | {np.median(t):.2f} ({np.median(t) / 4.96:.2f}) |")


if __name__ == "__main__":
    main()
