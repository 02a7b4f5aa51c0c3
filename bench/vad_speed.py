"""Silero VAD throughput: omnid's MLX port against onnxruntime running the same model, in one run.

For N streams (1, 8, 64) both systems step N windows of 512 samples at a time (one call per step: a batch of N
for omnid, a batch of N for onnxruntime), over real speech from the corpus. Reports windows per second, the
realtime factor (seconds of audio processed per second, all streams together) and the ratio, as medians of
--repeats runs. "1 (unbatched)" steps one stream through omnid's per-stream path (feed_many with one stream).

    python bench/vad_speed.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one

import omnid  # noqa: E402,F401  (OpenBLAS before mlx)
from omnid.audio import decode_audio  # noqa: E402
from omnid.vad.silero import CONTEXT, HIDDEN, WINDOW, SileroVAD  # noqa: E402
from omnid.vad.stream import VadStream, feed_many  # noqa: E402


def speech(seconds: float) -> np.ndarray:
    rows = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    parts, total = [], 0
    for r in rows:
        if r["language"] == "en":
            a = decode_audio(CORPUS / r["path"])
            parts.append(a)
            total += len(a)
            if total > seconds * 16000:
                break
    return np.concatenate(parts)[: int(seconds * 16000)]


def windows_of(audio: np.ndarray, n_streams: int, steps: int) -> np.ndarray:
    """(steps, n_streams, 576): stream s reads the audio from its own offset."""
    out = np.zeros((steps, n_streams, CONTEXT + WINDOW), np.float32)
    span = len(audio) - (steps + 2) * WINDOW
    for s in range(n_streams):
        offset = CONTEXT + (s * 7919 * WINDOW) % span
        for k in range(steps):
            start = offset + k * WINDOW
            out[k, s] = audio[start - CONTEXT : start + WINDOW]
    return out


def run_mlx(model: SileroVAD, windows: np.ndarray) -> float:
    n = windows.shape[1]
    h = np.zeros((n, HIDDEN), np.float32)
    c = np.zeros((n, HIDDEN), np.float32)
    t0 = time.perf_counter()
    for k in range(windows.shape[0]):
        _, h, c = model.step(windows[k], h, c)
    return time.perf_counter() - t0


def run_mlx_stream(model: SileroVAD, audio: np.ndarray, steps: int) -> float:
    stream = VadStream()
    t0 = time.perf_counter()
    for k in range(steps):
        feed_many(model, [(stream, audio[k * WINDOW : (k + 1) * WINDOW])])
    return time.perf_counter() - t0


def run_onnx(session, windows: np.ndarray) -> float:
    n = windows.shape[1]
    state = np.zeros((2, n, HIDDEN), np.float32)
    sr = np.array(16000, dtype=np.int64)
    t0 = time.perf_counter()
    for k in range(windows.shape[0]):
        _, state = session.run(None, {"input": windows[k], "state": state, "sr": sr})
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="windows per stream per run")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--streams", type=int, nargs="*", default=[1, 8, 64])
    p.add_argument("--onnx-threads", type=int, default=1, help="onnxruntime intra-op threads (Silero's default is 1)")
    args = p.parse_args()

    import onnxruntime

    from omnid.vad.silero import default_weights, package_file

    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = args.onnx_threads
    opts.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(package_file("silero_vad.onnx")), sess_options=opts,
                                           providers=["CPUExecutionProvider"])
    model = SileroVAD.load(default_weights())
    audio = speech(120.0)
    print(f"{args.steps} windows (512 samples, 32 ms) per stream per run, median of {args.repeats} runs, "
          f"onnxruntime {onnxruntime.__version__} with {args.onnx_threads} thread(s), {os.cpu_count()} cores\n")
    header = f"{'streams':<16} {'omnid win/s':>12} {'omnid RTF':>10} {'onnx win/s':>11} {'onnx RTF':>9} {'omnid/onnx':>11}"
    print(header)
    print("-" * len(header))

    def row(label: str, n: int, mlx_s: list[float], onnx_s: list[float] | None) -> None:
        total = n * args.steps
        mw = total / statistics.median(mlx_s)
        line = f"{label:<16} {mw:>12.0f} {mw * 0.032:>9.0f}x"
        if onnx_s:
            ow = total / statistics.median(onnx_s)
            line += f" {ow:>11.0f} {ow * 0.032:>8.0f}x {mw / ow:>10.2f}x"
        print(line)

    run_mlx_stream(model, audio, 20)
    row("1 (unbatched)", 1, [run_mlx_stream(model, audio, args.steps) for _ in range(args.repeats)], None)
    for n in args.streams:
        windows = windows_of(audio, n, args.steps)
        run_mlx(model, windows[:5])
        run_onnx(session, windows[:5])
        mlx_s = [run_mlx(model, windows) for _ in range(args.repeats)]
        onnx_s = [run_onnx(session, windows) for _ in range(args.repeats)]
        row(f"{n} batched", n, mlx_s, onnx_s)


if __name__ == "__main__":
    main()
