"""The floor under Qwen3-ASR's CPU encoder and prefill: their matrix products alone, numpy's BLAS (what omnid
calls) against torch's (what the official code calls), the same shapes on the same cores in one run.

bench/qwen3_asr_speed.py compares whole stages. This asks what part of a gap is the BLAS: each product of the
0.6B encoder (conv stem as im2col products, 18 layers, projector) and of the prefill (28 decoder layers over the
prompt) for --seconds of audio, timed in each library with both cores busy the way each system uses them:

* numpy, omnid's way: the output columns split between two threads, each calling numpy's BLAS single-threaded
  (the encoder's layers for few rows, the conv stem by row blocks: the same work per thread);
* numpy, BLAS-threaded: one call, numpy's BLAS running its own two threads (omnid's prefill);
* torch: one call, torch's intra-op threads (2), as the official code runs under qwen-asr.

Each product runs --repeats times after a warm-up; its median times the number of times the stage runs it. The
sum per stage is what that stage would cost if nothing but its products took time.

The decode row is one token's step: one row through every decoder weight (28 layers and the 151,936-row tied head,
2.4 GB in float32), all of them held at once, so that each step reads them from memory as a real decode does (one
product repeated on a weight that fits the cache would time the cache). Its median over --repeats steps is the
floor of a float32 decode step on this machine, set by its memory bandwidth. torch's worker runs in the
golden scripts' throwaway virtualenv (--torch-python, default /tmp/qref/bin/python).

    .venv/bin/python bench/qwen3_asr_products.py                 # 10 s and 60 s, and one decode step
    .venv/bin/python bench/qwen3_asr_products.py --seconds 10 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_PYTHON = Path(os.environ.get("OMNID_QWEN_REF_PYTHON", "/tmp/qref/bin/python"))
THREADS = 2
D, FFN, LAYERS, CONV, TEXT, TEXT_FFN, TEXT_LAYERS, Q_OUT, KV_OUT = 896, 3584, 18, 480, 1024, 3072, 28, 2048, 1024
VOCAB = 151936


def audio_tokens(seconds: float) -> tuple[int, int]:
    """(100-frame chunks, audio tokens) for ``seconds`` of audio (13 tokens per full chunk, the tail's halvings)."""
    frames = int(seconds * 100)
    chunks, tail = divmod(frames, 100)
    for _ in range(3):
        tail = (tail - 1) // 2 + 1 if tail else 0
    return chunks + (1 if frames % 100 else 0), 13 * chunks + tail


def products(seconds: float, prompt_extra: int) -> dict[str, list[tuple[int, int, int, int]]]:
    """Per stage: (rows, inner, columns, times run) of each product, as x (rows, inner) @ W^T, W (columns, inner)."""
    chunks, tokens = audio_tokens(seconds)
    encoder = [(chunks * 64 * 50, 9, CONV, 1), (chunks * 32 * 25, 9 * CONV, CONV, 1),
               (chunks * 16 * 13, 9 * CONV, CONV, 1), (tokens, CONV * 16, D, 1),
               (tokens, D, D, 4 * LAYERS), (tokens, D, FFN, LAYERS), (tokens, FFN, D, LAYERS),
               (tokens, D, D, 1), (tokens, D, TEXT, 1)]
    rows = tokens + prompt_extra
    prefill = [(rows, TEXT, Q_OUT, TEXT_LAYERS), (rows, TEXT, KV_OUT, 2 * TEXT_LAYERS),
               (rows, Q_OUT, TEXT, TEXT_LAYERS), (rows, TEXT, TEXT_FFN, 2 * TEXT_LAYERS),
               (rows, TEXT_FFN, TEXT, TEXT_LAYERS)]
    return {"encoder": encoder, "prefill": prefill}


def decode_weights() -> list[tuple[int, int]]:
    """(columns, inner) of every weight one decode step reads, in order: 28 layers, then the head."""
    layer = [(Q_OUT, TEXT), (KV_OUT, TEXT), (KV_OUT, TEXT), (TEXT, Q_OUT), (TEXT_FFN, TEXT), (TEXT_FFN, TEXT),
             (TEXT, TEXT_FFN)]
    return layer * TEXT_LAYERS + [(VOCAB, TEXT)]


def _median_time(run, repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def worker_numpy(shapes: list[tuple[int, int, int, int]], repeats: int) -> dict:
    import numpy as np
    from threadpoolctl import threadpool_limits

    pool = ThreadPoolExecutor(THREADS)
    rng = np.random.default_rng(0)
    split, threaded = 0.0, 0.0
    for m, k, n, count in shapes:
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((n, k), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        share = -(-n // THREADS)

        def columns(start: int) -> None:
            np.matmul(x, w[start : start + share].T, out=out[:, start : start + share])

        def by_columns() -> None:
            for done in [pool.submit(columns, s) for s in range(0, n, share)]:
                done.result()

        with threadpool_limits(1):
            split += count * _median_time(by_columns, repeats)
        with threadpool_limits(THREADS):
            threaded += count * _median_time(lambda: np.matmul(x, w.T, out=out), repeats)
    return {"numpy, columns on 2 threads": split, "numpy, BLAS 2 threads": threaded}


def worker_numpy_decode(repeats: int) -> dict:
    import numpy as np
    from threadpoolctl import threadpool_limits

    pool = ThreadPoolExecutor(THREADS)
    weights = [np.full((n, k), 1e-3, np.float32) for n, k in decode_weights()]
    row = np.ones((1, TEXT_FFN), np.float32)

    def step_split() -> None:
        def columns(w: np.ndarray, start: int, share: int) -> None:
            np.matmul(row[:, : w.shape[1]], w[start : start + share].T)

        for w in weights:
            share = -(-w.shape[0] // THREADS)
            for done in [pool.submit(columns, w, s, share) for s in range(0, w.shape[0], share)]:
                done.result()

    def step_threaded() -> None:
        for w in weights:
            np.matmul(row[:, : w.shape[1]], w.T)

    with threadpool_limits(1):
        split = _median_time(step_split, repeats)
    with threadpool_limits(THREADS):
        threaded = _median_time(step_threaded, repeats)
    return {"numpy, columns on 2 threads": split, "numpy, BLAS 2 threads": threaded}


def worker_torch_decode(repeats: int) -> dict:
    import torch

    torch.set_num_threads(THREADS)
    weights = [torch.full((n, k), 1e-3) for n, k in decode_weights()]
    row = torch.ones(1, TEXT_FFN)

    def step() -> None:
        for w in weights:
            torch.nn.functional.linear(row[:, : w.shape[1]], w)

    with torch.inference_mode():
        return {"torch, 2 threads": _median_time(step, repeats)}


def worker_torch(shapes: list[tuple[int, int, int, int]], repeats: int) -> dict:
    import torch

    torch.set_num_threads(THREADS)
    gen = torch.Generator().manual_seed(0)
    total = 0.0
    with torch.inference_mode():
        for m, k, n, count in shapes:
            x, w = torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen)
            total += count * _median_time(lambda: torch.nn.functional.linear(x, w), repeats)
    return {"torch, 2 threads": total}


def spawn(python: str, system: str, shapes: list | str, repeats: int) -> dict:
    out = subprocess.run([python, __file__, "--worker", system, "--shapes",
                          shapes if isinstance(shapes, str) else json.dumps(shapes),
                          "--repeats", str(repeats)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def versions(python: str) -> str:
    code = ("import numpy, threadpoolctl; info = threadpoolctl.threadpool_info(); "
            "print(numpy.__version__, [(i['internal_api'], i['version'], i.get('architecture')) for i in info])")
    mine = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    theirs = subprocess.run([python, "-c", "import torch; print(torch.__version__, torch.backends.mkl.is_available())"],
                            capture_output=True, text=True).stdout.strip()
    return f"numpy {mine}; torch {theirs} (MKL)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, nargs="+", default=[10, 60])
    p.add_argument("--prompt-extra", type=int, default=40, help="prompt positions besides the audio tokens")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--torch-python", default=str(TORCH_PYTHON))
    p.add_argument("--worker", choices=["numpy", "torch"])
    p.add_argument("--shapes")
    args = p.parse_args()
    if args.worker:
        if args.shapes == "decode":
            result = (worker_numpy_decode if args.worker == "numpy" else worker_torch_decode)(args.repeats)
        else:
            shapes = [tuple(s) for s in json.loads(args.shapes)]
            result = (worker_numpy if args.worker == "numpy" else worker_torch)(shapes, args.repeats)
        print(json.dumps(result))
        return
    if not Path(args.torch_python).exists():
        sys.exit(f"no torch virtualenv at {args.torch_python} (see scripts/qwen3_asr_goldens.py)")
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs; {versions(args.torch_python)}")
    print("| audio | stage | numpy, columns on 2 threads s | numpy, BLAS 2 threads s | torch, 2 threads s | "
          "torch's speed-up over numpy's better |")
    print("|---|---|---|---|---|---|")
    for seconds in args.seconds:
        for stage, shapes in products(seconds, args.prompt_extra).items():
            times = spawn(sys.executable, "numpy", shapes, args.repeats) | spawn(args.torch_python, "torch", shapes,
                                                                                 args.repeats)
            best = min(times["numpy, columns on 2 threads"], times["numpy, BLAS 2 threads"])
            print(f"| {seconds:g} s | {stage} | {times['numpy, columns on 2 threads']:.3f} | "
                  f"{times['numpy, BLAS 2 threads']:.3f} | {times['torch, 2 threads']:.3f} | "
                  f"{best / times['torch, 2 threads']:.2f}x |", flush=True)
    times = spawn(sys.executable, "numpy", "decode", args.repeats) | spawn(args.torch_python, "torch", "decode",
                                                                           args.repeats)
    best = min(times["numpy, columns on 2 threads"], times["numpy, BLAS 2 threads"])
    gigabytes = sum(n * k for n, k in decode_weights()) * 4 / 1e9
    print(f"| any | decode step ({gigabytes:.2f} GB of weights) | {times['numpy, columns on 2 threads']:.3f} | "
          f"{times['numpy, BLAS 2 threads']:.3f} | {times['torch, 2 threads']:.3f} | "
          f"{best / times['torch, 2 threads']:.2f}x |")
    print(f"decode floor: numpy {best * 1000:.1f} ms/token ({gigabytes / best:.1f} GB/s), torch "
          f"{times['torch, 2 threads'] * 1000:.1f} ms/token ({gigabytes / times['torch, 2 threads']:.1f} GB/s)")


if __name__ == "__main__":
    main()
