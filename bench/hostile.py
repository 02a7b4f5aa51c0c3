"""What hostile input costs the daemon (issue 10), measured on this tree and, with --baseline REV, on another
revision in the same run (a git worktree started the same way), side by side.

Each daemon is `omnid serve --supervised` as a child process. Measured:
  bomb      an hour of 48 kHz silence in ~0.5 MB of FLAC, default config: status, seconds, peak RSS above the
            level after warm-up (the client gives up after --bomb-timeout s; a daemon still busy counts as such)
  parts     /health latency (median and max of polls every 20 ms) while a body of 480 000 empty parts is posted
  prompt    seconds until a request with a 20 MiB prompt is answered, and its status
  silence   the text returned for 2 minutes of 4 kHz silence
  memory    RSS after 200 bad requests and 50 realtime sessions (25 of them never reading), minus after warm-up

    .venv/bin/python bench/hostile.py --baseline 742d0f9
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests import test_memory as abuse  # noqa: E402  (the memory test's request mix and clients)
from tests.hostile_input import flac_silence, health_latencies, post_head, raw_request, wav  # noqa: E402

TRANSCRIBE = "/v1/audio/transcriptions"


def start(tree: Path, log: Path, env_extra: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, int]:
    env = {**os.environ, "OMNID_SERVER_LOG_FILE": str(log), **(env_extra or {})}
    proc = subprocess.Popen([sys.executable, "-m", "omnid", "serve", "--supervised", "--port", "0"], cwd=tree,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    ready = json.loads(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{ready['port']}", ready["port"]


async def timed_post(http, url: str, fields: dict, file: tuple[str, bytes], timeout: float) -> tuple[str, float, bytes]:
    form = aiohttp.FormData(default_to_multipart=True)
    for key, value in fields.items():
        form.add_field(key, value)
    form.add_field("file", file[1], filename=file[0])
    started = time.perf_counter()
    try:
        async with http.post(url, data=form, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            body = await resp.read()
            return str(resp.status), time.perf_counter() - started, body
    except asyncio.TimeoutError:
        return "timeout", time.perf_counter() - started, b""


async def measure(tree: Path, args: argparse.Namespace) -> dict:
    out = await single_requests(tree, args)
    out["memory"] = await memory(tree)
    return out


async def single_requests(tree: Path, args: argparse.Namespace) -> dict:
    """The daemon with its default configuration."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, port = start(tree, Path(tmp) / "omnid.log")
        try:
            async with aiohttp.ClientSession() as http:
                await abuse.warm_up(http, url)
                base = abuse.rss_mb(proc.pid)
                out: dict = {"rss_after_warm_up_mb": round(base, 1)}

                status, seconds, _ = await timed_post(http, url + TRANSCRIBE, {}, ("bomb.flac", flac_silence(3600)),
                                                      args.bomb_timeout)
                out["bomb"] = f"{status} in {seconds:.1f} s, peak +{abuse.rss_mb(proc.pid, peak=True) - base:.0f} MB"
                await abuse.idle(http, url, timeout=args.bomb_timeout * 20)

                body = b'--b\r\nContent-Disposition: form-data; name="a"\r\n\r\n\r\n' * 480_000 + b"--b--\r\n"
                head = post_head(TRANSCRIBE, len(body), content_type="multipart/form-data; boundary=b")
                task = asyncio.ensure_future(raw_request(port, head, body, timeout=120))
                lat = await health_latencies(url, task)
                status, _, _ = await task
                out["parts"] = (f"{status}; /health median {np.median(lat) * 1000:.0f} ms, "
                                f"max {max(lat) * 1000:.0f} ms over {len(lat)} polls")

                clip = ("a.wav", wav(abuse.clip_audio("ljspeech_LJ001-0013")))
                status, seconds, _ = await timed_post(http, url + TRANSCRIBE, {"prompt": "x" * (20 << 20)}, clip, 300)
                out["prompt"] = f"{status} in {seconds:.1f} s"

                status, seconds, reply = await timed_post(http, url + TRANSCRIBE, {},
                                                          ("q.wav", wav(np.zeros(4000 * 120, np.float32), rate=4000)), 600)
                text = json.loads(reply).get("text", "") if status == "200" else ""
                out["silence"] = f"{status} in {seconds:.1f} s: {text[:60]!r}"
                return out
        finally:
            proc.kill()
            proc.wait(10)


async def memory(tree: Path) -> str:
    """The memory test's run (a 600 s audio cap, so that the bombs are refused by both trees)."""
    with tempfile.TemporaryDirectory() as tmp:
        proc, url, port = start(tree, Path(tmp) / "omnid.log", {"OMNID_TRANSCRIPTION_MAX_AUDIO_SECONDS": "600"})
        try:
            async with aiohttp.ClientSession() as http:
                await abuse.warm_up(http, url)
                base = abuse.rss_mb(proc.pid)
                statuses = await abuse.abuse(http, url, port, flac_silence(3600))
                speech, quiet = abuse.clip_audio("librispeech_3005-163389-0007"), abuse.noise(1.0, level=0.001)
                for i in range(25):
                    await abuse.voxt_session(http, url, speech if i % 5 == 0 else quiet)
                    await abuse.never_reading_session(http, url, 20)
                await abuse.idle(http, url)
                await asyncio.sleep(1.0)
                after = abuse.rss_mb(proc.pid)
                fives = sum(1 for s in statuses if s >= 500)
                return f"{base:.0f} -> {after:.0f} MB ({after - base:+.0f} MB), {fives} of 200 answered 5xx"
        finally:
            proc.kill()
            proc.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="a git revision to measure the same way, side by side")
    parser.add_argument("--bomb-timeout", type=float, default=90.0, help="seconds the bomb's client waits")
    args = parser.parse_args()
    trees = {"this tree": ROOT}
    worktree = None
    if args.baseline:
        worktree = Path(tempfile.mkdtemp(prefix="omnid-baseline-"))
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.baseline], cwd=ROOT, check=True,
                       capture_output=True)
        trees[args.baseline] = worktree
    try:
        results = {name: asyncio.run(measure(tree, args)) for name, tree in trees.items()}
    finally:
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
    keys = list(next(iter(results.values())))
    print(f"| measure | {' | '.join(results)} |")
    print(f"|---|{'---|' * len(results)}")
    for key in keys:
        print(f"| {key} | {' | '.join(str(r[key]) for r in results.values())} |")


if __name__ == "__main__":
    main()
