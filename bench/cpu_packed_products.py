"""Which of cpu_packed's two ways multiplies a few rows faster, against float32's product, as the numpy layers call
them (numpy_layers.by_columns: the output columns shared among the threads), at a 0.6B model's layer shapes (width
1024, feed-forward 4096; three layers' products cycled, more than the caches hold, as a real step reads its
weights): the few-row kernel (four packed rows at a time widened into a cache-resident buffer and multiplied by x
three rows at a time) or a chunk of rows widened for the BLAS, for 1 to 128 input rows (a decode step of 1 or a few
sequences, a streaming chunk of 14 frames, a short prompt or window). Random weights, affine
4 and 8 bits at group 64; medians of 11 rounds, the three ways alternating within each. What it printed decides
cpu_packed.FEW_ROWS.

Then single maps as a decode step calls them (one row, each map on its own: engine/cpu_cross_decoder.py): each shape
twelve times over (more than the caches hold; the last, a 16384-piece vocabulary's head), float32 (the BLAS's
threads) against the packed map on the calling thread and shared among the pool's threads (numpy's BLAS held to
one thread around the step, as the step holds it). What it printed decides cpu_packed.INLINE_BYTES.

    .venv/bin/python bench/cpu_packed_products.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401,I001  (OpenBLAS before mlx: MLX's CPU products otherwise take its reference BLAS)
import mlx.nn as nn  # noqa: E402,I001
import numpy as np  # noqa: E402

from omnid.engine import cpu_packed  # noqa: E402
from omnid.engine.cpu_math import numpy_blas_single_threaded  # noqa: E402
from omnid.engine.numpy_layers import LinearMap, by_columns, linear_map  # noqa: E402

WIDTH, FEED_FORWARD, HEAD = 1024, 4096, 16384
# One FastConformer/transformer layer's products: q, k, v, o, the position projection, two feed-forwards.
SHAPES = [(WIDTH, WIDTH)] * 5 + [(WIDTH, FEED_FORWARD), (FEED_FORWARD, WIDTH)] * 2
ROUNDS = 11


def step(maps: list[LinearMap], x: dict[int, np.ndarray]) -> float:
    start = time.perf_counter()
    for m in maps:
        out = np.empty((len(x[WIDTH]), m.shape[1]), np.float32)
        by_columns(x[m.shape[0]], [(m, out)])
    return time.perf_counter() - start


def main() -> None:
    rng = np.random.default_rng(0)
    layers = [nn.Linear(i, o) for i, o in SHAPES] * 3
    floats = [linear_map(m) for m in layers]
    chosen = cpu_packed.FEW_ROWS
    print(f"cpu_packed.FEW_ROWS = {chosen}: the kernel up to that many rows, the widened chunks past it")
    for bits in (8, 4):
        packed = [linear_map(nn.QuantizedLinear.from_linear(m, group_size=64, bits=bits)) for m in layers]
        for rows in (1, 2, 4, 7, 14, 20, 24, 32, 48, 64, 128):
            x = {n: rng.standard_normal((rows, n)).astype(np.float32) for n in (WIDTH, FEED_FORWARD)}
            times: dict[str, list[float]] = {"float32": [], "kernel": [], "widened chunks": []}
            for _ in range(ROUNDS):
                times["float32"].append(step(floats, x))
                cpu_packed.FEW_ROWS = rows
                times["kernel"].append(step(packed, x))
                cpu_packed.FEW_ROWS = 0
                times["widened chunks"].append(step(packed, x))
                cpu_packed.FEW_ROWS = chosen
            print(f"{bits}-bit, {rows} row(s): {against_float32(times)}")
    single_maps(rng)


def single_maps(rng: np.random.Generator) -> None:
    chosen = cpu_packed.INLINE_BYTES
    print(f"\ncpu_packed.INLINE_BYTES = {chosen >> 20} MiB: a few-row product whose rows times packed bytes come under "
          "it runs on the calling thread")
    for shape in ((WIDTH, WIDTH), (WIDTH, FEED_FORWARD), (FEED_FORWARD, WIDTH), (WIDTH, HEAD)):
        layers = [nn.Linear(*shape) for _ in range(12)]
        floats = [linear_map(m) for m in layers]
        x = rng.standard_normal((1, shape[0])).astype(np.float32)
        for bits in (8, 4):
            packed = [linear_map(nn.QuantizedLinear.from_linear(m, group_size=64, bits=bits)) for m in layers]
            times: dict[str, list[float]] = {"float32": [], "packed, caller's thread": [], "packed, shared": []}
            for _ in range(ROUNDS):
                times["float32"].append(each(floats, x))
                with numpy_blas_single_threaded():
                    cpu_packed.INLINE_BYTES = 1 << 40
                    times["packed, caller's thread"].append(each(packed, x))
                    cpu_packed.INLINE_BYTES = 0
                    times["packed, shared"].append(each(packed, x))
                cpu_packed.INLINE_BYTES = chosen
            size = shape[0] * shape[1] * bits / 8 / (1 << 20)
            print(f"{shape[0]}x{shape[1]} {bits}-bit ({size:.1f} MiB packed), a map: "
                  f"{against_float32(times, len(layers))}")


def against_float32(times: dict[str, list[float]], per: int = 1) -> str:
    """Each way's median (divided by ``per``: the maps a round went through) and its ratio to float32's."""
    base = statistics.median(times["float32"])
    return ", ".join(f"{k} {statistics.median(v) * 1e3 / per:5.2f} ms ({statistics.median(v) / base:.2f}x)"
                     for k, v in times.items())


def each(maps: list[LinearMap], x: np.ndarray) -> float:
    start = time.perf_counter()
    for m in maps:
        m(x)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
