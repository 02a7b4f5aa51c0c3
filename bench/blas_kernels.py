"""MLX's float32 products on the CPU with the OpenBLAS kernels omnid chooses against OpenBLAS's own choice (not part of
the unit suite).

omnid.blas sets OPENBLAS_CORETYPE from the CPU's instructions while it preloads OpenBLAS for MLX, because an OpenBLAS
older than the CPU falls back to generic SSE3 kernels. Each variant runs in a fresh process (the variable is read
once, when the library loads): "omnid" as the daemon starts, "OpenBLAS's own choice" with the same library preloaded
the way omnid did before (no variable), interleaved, RUNS each. Printed: the kernels each loaded, and the median GFLOP/s of
a 512 x 1024 by 1024 x 4096 product and of Nemotron's 7-row by 1024 x 4096 one, with their ratio.

    .venv/bin/python bench/blas_kernels.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RUNS = 5
SHAPES = ((512, 1024, 4096), (7, 1024, 4096))

PRELOAD = {
    "omnid": "from omnid import blas\npath = blas.status().path or ''\n",
    # omnid.blas before it chose the kernels: the same library, loaded globally before mlx.core, nothing set.
    "openblas": "import ctypes\nfrom omnid.blas import CANDIDATES\n"
                "path = next(p for p in CANDIDATES if os.path.exists(p))\nctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)\n",
}
WORKER = """
import json, os, time
%s
import mlx.core as mx
from threadpoolctl import threadpool_info
real = os.path.realpath(path)
arch = [i["architecture"] for i in threadpool_info() if os.path.realpath(i["filepath"]) == real]
out = {"kernels": arch[0] if arch else "?"}
for m, k, n in %r:
    a, w = mx.random.normal((m, k)), mx.random.normal((k, n))
    mx.eval(a, w)
    best = 1e9
    for _ in range(20):
        t = time.perf_counter(); mx.eval(a @ w); best = min(best, time.perf_counter() - t)
    out[f"{m}x{k}x{n}"] = 2 * m * k * n / best / 1e9
print(json.dumps(out))
"""


def run(variant: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("OPENBLAS_CORETYPE", None)
    if variant == "openblas":
        env["OMNID_BLAS"] = "off"  # importing omnid.blas must not preload: the worker loads the library itself
    code = WORKER % (PRELOAD[variant], SHAPES)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    results: dict[str, list[dict]] = {"omnid": [], "openblas": []}
    for _ in range(RUNS):
        for variant in results:
            results[variant].append(run(variant))
    print(f"MLX float32 products, median GFLOP/s of {RUNS} fresh processes each (interleaved)\n")
    print(f"| shape | omnid's kernels ({results['omnid'][0]['kernels']}) | OpenBLAS's own choice "
          f"({results['openblas'][0]['kernels']}) | ratio |\n|---|---|---|---|")
    for m, k, n in SHAPES:
        key = f"{m}x{k}x{n}"
        ours = float(np.median([r[key] for r in results["omnid"]]))
        theirs = float(np.median([r[key] for r in results["openblas"]]))
        print(f"| {m} x {k} by {k} x {n} | {ours:.0f} | {theirs:.0f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
