"""An MLX model's linear maps and layer norms as numpy, for the CPU paths that run a layer in numpy (Sortformer's
cpu_layers, Whisper's cpu_encoder and cpu_decoder): the weights are numpy views of the MLX arrays, never copies. And
the way those layers go over a sequence's rows: blocks of ROWS rows shared among cpu_math's threads, each block's
temporaries in per-thread scratch buffers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import CPU_THREADS, by_rows, by_share, layer_norm_rows, small_product_columns
from omnid.engine.quantization import widen_module


def as_numpy(a: mx.array) -> np.ndarray:
    """A float32 MLX array's numpy view (a copy only for another dtype)."""
    return np.asarray(a, dtype=np.float32)


class LinearMap(Protocol):
    """y = x W^T (+ b): a float :class:`Linear`, or a quantized module multiplied packed (cpu_packed.PackedLinear)."""

    @property
    def shape(self) -> tuple[int, int]:
        """(in_features, out_features)."""
        ...

    @property
    def weight_t(self) -> np.ndarray:
        """W^T, float32 (in_features, out_features)."""
        ...

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray: ...

    def columns(self, x: np.ndarray, start: int, stop: int, out: np.ndarray) -> None: ...


def linear_map(module: nn.Module) -> LinearMap:
    """A Linear's, an Embedding's or a 1x1 convolution's product in numpy: packed where cpu_packed multiplies the
    module's quantization as it is packed (4 or 8 affine bits), else over float32 weights (a quantized module in
    another mode widened here, once, by MLX's dequantize: a float copy)."""
    if isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
        from omnid.engine import cpu_packed  # numba compiles (or loads from its cache) only where a model is packed

        if cpu_packed.packable(module):
            return cpu_packed.PackedLinear.of(module)
        wide = widen_module(module)
        mx.eval(wide)
        return Linear(as_numpy(wide).T, as_numpy(module.bias) if "bias" in module else None)
    return Linear.of(module)


def any_packed(maps: Iterable[LinearMap]) -> bool:
    """Whether some of the maps are cpu_packed's (those layers take their products over all rows at once)."""
    return not all(isinstance(m, Linear) for m in maps)


class QuantizedRows:
    """A quantized embedding's rows for numpy, as float32, the values a widened copy would hold (MLX's dequantize in
    the scales' dtype): a decode step looks up a row or a few, and the float table is never made. Affine 2, 4 or 8
    bits with float16 or float32 scales (convert.py's and mlx-audio's defaults) are unpacked here, in numpy over
    views of the module's arrays, in the same arithmetic; anything else by MLX's own module (a few MLX operations a
    lookup: a tenth of a small model's decode step)."""

    def __init__(self, module: nn.QuantizedEmbedding):
        self.module = module
        self.numpy = (module.mode == "affine" and module.bits in (2, 4, 8)
                      and module.scales.dtype in (mx.float16, mx.float32))
        if self.numpy:
            self.words, self.scales, self.biases = (np.asarray(a) for a in (module.weight, module.scales,
                                                                           module["biases"]))
            self.shifts = np.arange(0, 32, module.bits, dtype=np.uint32)
            self.mask = np.uint32((1 << module.bits) - 1)

    def __getitem__(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not self.numpy:
            return np.array(self.module(mx.array(ids.astype(np.int32))).astype(mx.float32))
        values = (self.words[ids][..., None] >> self.shifts) & self.mask  # each word's values, lowest bits first
        q = values.reshape(len(ids), -1).astype(self.scales.dtype)
        group = self.module.group_size
        return (q * self.scales[ids].repeat(group, axis=1) + self.biases[ids].repeat(group, axis=1)).astype(np.float32)


class Joined:
    """Several maps of one input (a layer's query, key and value): packed ones (cpu_packed) in one pass over the
    threads, each thread a share of all their output rows, where a decode step would pay a pass per map; float ones
    (or a mix) each their own product."""

    def __init__(self, maps: Sequence[LinearMap]):
        self.maps = list(maps)
        self.packed = not any(isinstance(m, Linear) for m in self.maps)

    def __call__(self, x: np.ndarray) -> list[np.ndarray]:
        if self.packed:
            from omnid.engine.cpu_packed import joined_products

            return joined_products(self.maps, x)  # type: ignore[arg-type]
        return [m(x) for m in self.maps]


@dataclass(frozen=True)
class Linear:
    """y = x W^T + b with W^T a transposed view (the BLAS reads it as it is stored)."""

    weight_t: np.ndarray
    bias: np.ndarray | None

    @classmethod
    def of(cls, layer: nn.Module) -> Linear:
        """A Linear, or a 1x1 convolution (MLX stores its weight as (out, 1, in) or (out, 1, 1, in))."""
        weight = as_numpy(layer.weight)
        return cls(weight.reshape(len(weight), -1).T, as_numpy(layer.bias) if "bias" in layer else None)

    @property
    def shape(self) -> tuple[int, int]:
        """(in_features, out_features)."""
        return self.weight_t.shape

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Into ``out`` when given, else a new array."""
        out = np.matmul(x, self.weight_t, out=out)
        if self.bias is not None:
            out += self.bias
        return out

    def columns(self, x: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
        """Output columns [start, stop) into ``out`` (rows, stop - start)."""
        np.matmul(x, self.weight_t[:, start:stop], out=out)
        if self.bias is not None:
            out += self.bias[start:stop]


@dataclass(frozen=True)
class Norm:
    weight: np.ndarray
    bias: np.ndarray
    eps: float

    @classmethod
    def of(cls, norm: nn.LayerNorm) -> Norm:
        return cls(as_numpy(norm.weight), as_numpy(norm.bias), norm.eps)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """In place."""
        return layer_norm_rows(x, self.weight, self.bias, self.eps)


# Rows per block: each block reads the layer's weights again, so fewer, larger blocks read less. A 128 x 512 by
# 512 x 2048 product already runs near the BLAS's full single-thread speed (64-row blocks were 15% slower, 32-row
# ones 50%), but at Parakeet's width (1024, FF 4096: 100 MB of weights a layer) a minute of audio (750 rows) is
# then one block per thread instead of three (bench/parakeet_speed.py measures the whole).
ROWS = 512


class _Scratch(threading.local):
    """Per thread, one buffer of ROWS rows per name and width (a few MB per thread in all): fresh temporaries of a
    MB each can be fresh mappings to page-fault."""

    def __init__(self) -> None:
        self.buffers: dict[tuple[str, int], np.ndarray] = {}

    def get(self, name: str, rows: int, width: int) -> np.ndarray:
        buf = self.buffers.get((name, width))
        if buf is None or len(buf) < rows:
            buf = self.buffers[(name, width)] = np.empty((max(rows, ROWS), width), np.float32)
        return buf[:rows]


scratch = _Scratch()


def blocks(work: Callable[[int, int], object], n: int) -> None:
    """Runs ``work(start, stop)`` over blocks of at most ROWS rows, the blocks shared among the threads."""

    def share(start: int, stop: int) -> None:
        for first in range(start, stop, ROWS):
            work(first, min(first + ROWS, stop))

    by_rows(share, n)


def all_rows(linear: LinearMap, x: np.ndarray) -> np.ndarray:
    """linear(x) over all of x's rows on the threads: a packed map shares its output columns among them (its own
    call), a float one goes in blocks of rows (numpy's BLAS is held to one thread per caller)."""
    if not isinstance(linear, Linear):
        return linear(x)
    out = np.empty((len(x), linear.shape[1]), np.float32)
    blocks(lambda start, stop: linear(x[start:stop], out[start:stop]), len(x))
    return out


def by_columns(x: np.ndarray, products: Sequence[tuple[LinearMap, np.ndarray]]) -> None:
    """Each ``out = linear(x)`` with the output columns shared among the threads, every thread's products over all
    the rows: for a few rows, where a share of the rows would be too few for the BLAS to run at speed. Each share
    goes in column blocks small enough for OpenBLAS's small-matrix kernel where numpy's BLAS has one
    (``small_product_columns``). Packed maps take their whole share in one call: the few-row kernel widens each
    weight once per call, and their widened chunks went at about half the speed in such small blocks
    (bench/cpu_packed_products.py, 14-96 rows)."""
    width = products[0][1].shape[1]
    share = -(-width // CPU_THREADS)
    packed = any_packed(linear for linear, _ in products)
    block = share if packed else min(share, small_product_columns(len(x), x.shape[1]) or share)

    def columns(start: int, stop: int) -> None:
        for first in range(start, stop, block):
            last = min(first + block, stop)
            for linear, out in products:
                linear.columns(x, first, last, out[:, first:last])

    by_share(columns, width, share)


def through_layers(x: mx.array, layers: Sequence[Callable[..., None]], *args: np.ndarray,
                   after_each: Callable[[], None] | None = None) -> mx.array:
    """x through numpy layers that update a copy of it in place (each called with ``args`` after the stream);
    ``after_each`` runs between layers (a cancelled job can stop there)."""
    mx.eval(x)
    stream = np.array(x)
    for layer in layers:
        layer(stream, *args)
        if after_each is not None:
            after_each()
    return mx.array(stream)
