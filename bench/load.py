"""HTTP load on POST /v1/audio/transcriptions: N concurrent clients post corpus clips for a fixed time.

Starts a daemon (default config, OS-chosen port, in a child process), then for each N in --clients runs N
clients in a loop for --seconds, each posting the next English corpus clip and waiting for its answer. Prints
requests/s, audio seconds per wall second, p50/p95 latency and errors (any non-200, 503 counted apart).

    python bench/load.py                        # N = 1, 4, 16 for 60 s each
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one


def clips(limit: int) -> list[tuple[str, bytes, float]]:
    rows = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["language"] == "en" and r["duration_s"] <= 12][:limit]
    return [(Path(r["path"]).name, (CORPUS / r["path"]).read_bytes(), r["duration_s"]) for r in rows]


def start_daemon() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "omnid", "serve", "--supervised", "--port", "0"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready = json.loads(proc.stdout.readline())
    if ready.get("event") != "ready":
        raise SystemExit(f"daemon failed: {ready}")
    return proc, ready["port"]


async def run_level(url: str, n: int, seconds: float, items: list[tuple[str, bytes, float]]) -> dict:
    latencies: list[float] = []
    audio = 0.0
    errors = busy = 0
    deadline = time.monotonic() + seconds
    counter = iter(range(10**9))

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal audio, errors, busy
        while time.monotonic() < deadline:
            name, data, dur = items[next(counter) % len(items)]
            form = aiohttp.FormData()
            form.add_field("model", "whisper-1")
            form.add_field("file", data, filename=name)
            t0 = time.monotonic()
            async with session.post(url, data=form) as resp:
                await resp.read()
                if resp.status == 200:
                    latencies.append(time.monotonic() - t0)
                    audio += dur
                elif resp.status == 503:
                    busy += 1
                    await asyncio.sleep(float(resp.headers.get("Retry-After", "1")))
                else:
                    errors += 1

    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(client(session) for _ in range(n)))
    wall = time.monotonic() - started
    lat = sorted(latencies)
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] if lat else float("nan")
    p50 = statistics.median(lat) if lat else float("nan")
    return {"n": n, "ok": len(lat), "rps": len(lat) / wall, "audio_rate": audio / wall, "p50": p50,
            "p95": p95, "errors": errors, "busy": busy, "wall": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, nargs="*", default=[1, 4, 16])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--clips", type=int, default=40)
    args = p.parse_args()
    items = clips(args.clips)
    proc, port = start_daemon()
    url = f"http://127.0.0.1:{port}/v1/audio/transcriptions"
    try:
        print(f"{len(items)} English clips (<= 12 s each), {args.seconds:.0f} s per level, {os.cpu_count()} cores, "
              f"default config (window=full, queue cap 16)\n")
        header = f"{'clients':>7} {'ok':>5} {'req/s':>7} {'audio s/s':>10} {'p50 s':>7} {'p95 s':>7} {'errors':>7} {'503s':>6}"
        print(header)
        print("-" * len(header))
        for n in args.clients:
            r = asyncio.run(run_level(url, n, args.seconds, items))
            print(f"{r['n']:>7} {r['ok']:>5} {r['rps']:>7.2f} {r['audio_rate']:>10.2f} {r['p50']:>7.2f} {r['p95']:>7.2f} "
                  f"{r['errors']:>7} {r['busy']:>6}")
    finally:
        proc.stdin.write('{"command": "shutdown"}\n')
        proc.stdin.flush()
        proc.wait(30)


if __name__ == "__main__":
    main()
