"""A quantized module's weight multiplied on the CPU as it is packed: 4 or 8 bits a weight instead of float32's 32.

MLX's own quantized kernels on its CPU device were measured several times slower than float32 (bench/quantized.py),
so the numpy paths used to widen every packed module to float32 at load: a quantized checkpoint then took float32's
memory. Here the packed weight stays packed, in the MLX module's own arrays (numpy views of them: no second copy),
and is multiplied by kernels compiled by numba:

- **a few rows** (a decode step, a streaming chunk's frames): float32's product over a few rows is bound by
  reading its weights (four bytes each, once for all the rows); these read one or half a byte and unpack it once
  per call. One row (``_row_product``): each packed group is multiplied as it is read and its scale and bias applied
  to the group's sum. Two rows or more (``_product``): four packed rows at a time are widened into a buffer that
  stays in the first-level cache and multiplied by x's rows three at a time;
- **more rows** (an encoder window, a prompt): a chunk of the weight's rows is unpacked into a float32 scratch
  buffer small enough to stay in the core's cache, and numpy's BLAS multiplies x by its transpose; the unpacking
  is one pass over the weight, a small share of a product over many rows (FEW_ROWS says where the two meet, as
  measured).

Layout. MLX packs affine weights row by row (``w = scale * q + bias`` per group of ``group_size`` inputs; 4-bit
values two to a byte, the even input in the low nibble; ``scales``/``biases`` (out, groups)). Only MLX's affine mode
at 4 or 8 bits is taken (what mlx-audio's and mlx-examples' converters write by default); other bits and the
floating-point modes are widened at load as before (:func:`packable`).

The kernels release the GIL and run on cpu_math's threads, a share of the output rows each; numba's own threading
is not used (its default layer may not be entered from two threads at once, and omnid runs engines side by side).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from numba import njit

from omnid.engine.cpu_math import CPU_THREADS, by_share, in_a_share
from omnid.engine.quantization import Quantization

# At most this many input rows go through the few-row kernel; more are unpacked into float32 for the BLAS.
# bench/cpu_packed_products.py (a 0.6B layer's products, as by_columns calls them) on this project's 2-core AMD EPYC
# VM, 8 and 4 bits: the kernel took 0.47-0.98x float32's time at 1-7 rows and 0.84-0.93x at 14, where the widened
# chunks took 1.02-1.05x; at 20 rows the two ways tied (0.99-1.06x, 1.00-1.04x), and past that the kernel lost
# (1.11-1.20x at 24, 1.19-1.78x at 32-128) while the widened chunks held 1.00-1.06x. (On the earlier Intel VM,
# AVX-512, the kernel led up to 48 rows.)
FEW_ROWS = 16
# Weight rows unpacked at a time for the BLAS: (256, in_features) float32 scratch, 1 MB at width 1024, small enough
# to stay in the core's cache between the unpacking and the product that reads it.
CHUNK_ROWS = 256
# Output columns a thread's share of a few-row product is rounded to: whole cache lines of the output.
SHARE_ROWS = 16
# A few-row product whose rows times packed bytes come under this runs on the calling thread: one row of a map of
# up to 4 MiB took 0.73-0.89x float32's time there at 8 bits against 0.87-1.25x shared with the pool's threads (whose
# wake-up costs as much as the half they take), a 16 MiB head about the same either way (bench/cpu_packed_products.py,
# single maps).
INLINE_BYTES = 8 << 20

# Reassociation lets the compiler vectorize the sums; no assumption about NaN or infinity is made.
_MATH = {"reassoc", "contract"}


@njit(inline="always")
def _low(byte):
    # int32 arithmetic: numba's uint8 operations widen to int64, whose conversion to float32 does not vectorize.
    return np.float32(np.int32(byte) & 15)


@njit(inline="always")
def _high(byte):
    return np.float32(np.int32(byte) >> 4)


@njit(inline="always")
def _widen(row, scales, biases, bits, o, w):
    """Packed row ``row`` (output row ``o``) widened to float32 into ``w`` (in_features,)."""
    groups = scales.shape[1]
    size = row.shape[0] // groups  # bytes of one group of one row
    for g in range(groups):
        s, m, base = scales[o, g], biases[o, g], g * size
        if bits == 4:
            for k in range(size):
                w[2 * (base + k)] = s * _low(row[base + k]) + m
                w[2 * (base + k) + 1] = s * _high(row[base + k]) + m
        else:
            for k in range(size):
                w[base + k] = s * np.float32(np.int32(row[base + k])) + m


@njit("void(uint8[:, ::1], float32[:, ::1], float32[:, ::1], int64, float32[::1], float32[::1], float32[::1], "
      "float32[::1], int64, int64)", nogil=True, fastmath=_MATH, cache=True)
def _row_product(packed, scales, biases, bits, even, odd, sums, out, first, last):
    """The few-row kernel's product for one row x (a decode step): out[o - first] = x . W[o] for output rows o in
    [first, last), each packed row's groups multiplied as they are read, the scale and bias applied to each group's
    sum (``sums``: x's sum over each group). 4 bits: ``even`` / ``odd`` are x's even and odd inputs (the low and
    high nibbles' partners); 8 bits: ``even`` is x (``odd`` unused). One row does not need the tiles below, which
    pay a store and a load per weight to share each widened weight among x's rows."""
    groups = scales.shape[1]
    size = packed.shape[1] // groups  # bytes of one group of one row
    for o in range(first, last):
        row = packed[o]
        acc = np.float32(0.0)
        for g in range(groups):
            base = g * size
            s = np.float32(0.0)
            if bits == 4:
                for k in range(size):
                    s += _low(row[base + k]) * even[base + k] + _high(row[base + k]) * odd[base + k]
            else:
                for k in range(size):
                    s += np.float32(np.int32(row[base + k])) * even[base + k]
            acc += scales[o, g] * s + biases[o, g] * sums[g]
        out[o - first] = acc


@njit(inline="always")
def _store(out, row, column, tile, a0, a1, a2, a3):
    """The first ``tile`` of four sums into out[row, column:]."""
    out[row, column] = a0
    if tile > 1:
        out[row, column + 1] = a1
    if tile > 2:
        out[row, column + 2] = a2
    if tile > 3:
        out[row, column + 3] = a3


@njit("void(uint8[:, ::1], float32[:, ::1], float32[:, ::1], int64, float32[:, ::1], float32[:, ::1], int64, int64)",
      nogil=True, fastmath=_MATH, cache=True)
def _product(packed, scales, biases, bits, x, out, first, last):
    """out[:, o - first] = x . W[o] for output rows o in [first, last) of a 4- or 8-bit weight.

    Four packed rows at a time are widened into a small float32 buffer (it stays in the first-level cache), then
    multiplied by x's rows three at a time: each step loads four weights and three inputs for twelve sums, where
    one row at a time would load five for four (the loads, not the multiplications, bound this loop). Each weight is
    unpacked once per call, however many rows x has."""
    n, width = x.shape
    w = np.empty((4, width), np.float32)
    w0, w1, w2, w3 = w[0], w[1], w[2], w[3]
    for o in range(first, last, 4):
        tile = min(4, last - o)
        for j in range(4):  # a short last tile repeats its last row: the sums of rows past it are not stored
            r = o + min(j, tile - 1)
            _widen(packed[r], scales, biases, bits, r, w[j])
        c = o - first
        b = 0
        while b + 3 <= n:
            xa, xb, xc = x[b], x[b + 1], x[b + 2]
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = c0 = c1 = c2 = c3 = np.float32(0.0)
            for k in range(width):
                p0, p1, p2, p3 = w0[k], w1[k], w2[k], w3[k]
                u, v, z = xa[k], xb[k], xc[k]
                a0 += p0 * u
                a1 += p1 * u
                a2 += p2 * u
                a3 += p3 * u
                b0 += p0 * v
                b1 += p1 * v
                b2 += p2 * v
                b3 += p3 * v
                c0 += p0 * z
                c1 += p1 * z
                c2 += p2 * z
                c3 += p3 * z
            _store(out, b, c, tile, a0, a1, a2, a3)
            _store(out, b + 1, c, tile, b0, b1, b2, b3)
            _store(out, b + 2, c, tile, c0, c1, c2, c3)
            b += 3
        for r in range(b, n):  # the last one or two rows of x
            xa = x[r]
            a0 = a1 = a2 = a3 = np.float32(0.0)
            for k in range(width):
                u = xa[k]
                a0 += w0[k] * u
                a1 += w1[k] * u
                a2 += w2[k] * u
                a3 += w3[k] * u
            _store(out, r, c, tile, a0, a1, a2, a3)


@njit("void(uint8[:, ::1], float32[:, ::1], float32[:, ::1], int64, int64[::1], float32[:, ::1])",
      nogil=True, fastmath=_MATH, cache=True)
def _unpack(packed, scales, biases, bits, rows, out):
    """W[rows] widened to float32 into ``out`` (len(rows), in_features): a chunk for the BLAS, or an embedding's
    lookup."""
    for i in range(rows.shape[0]):
        _widen(packed[rows[i]], scales, biases, bits, rows[i], out[i])


def packable(module: nn.Module) -> bool:
    """Whether a module is one this file multiplies packed (MLX's affine mode at 4 or 8 bits)."""
    return (isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding))
            and Quantization.of(module).multiplied_packed_on_cpu)


class _Buffers(threading.local):
    """One unpacking buffer per thread, reused: a fresh one per product would be fresh pages to fault in."""

    def __init__(self) -> None:
        self.buffer = np.empty(0, np.float32)


_buffers = _Buffers()


def _scratch(size: int) -> np.ndarray:
    if len(_buffers.buffer) < size:
        _buffers.buffer = np.empty(size, np.float32)
    return _buffers.buffer[:size]


def _granule(inputs: int) -> int:
    """What a thread's share of the output rows is rounded to for an x of ``inputs`` rows: whole cache lines of the
    output for the few-row kernels, whole chunks for the widened ones."""
    return SHARE_ROWS if inputs <= FEW_ROWS else CHUNK_ROWS


def _thread_share(rows: int, granule: int) -> int:
    """Each thread's share of ``rows`` output rows: an equal part, rounded up to whole ``granule``s."""
    part = -(-rows // CPU_THREADS)
    return -(-part // granule) * granule


def _float32(a: mx.array) -> np.ndarray:
    """A numpy view of a float32 MLX array; another dtype (a bfloat16 folder's scales) widened, a copy."""
    return np.asarray(a if a.dtype == mx.float32 else a.astype(mx.float32))


class PackedLinear:
    """y = x W^T (+ b) with W packed: numpy_layers.Linear's interface for a quantized module."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, group_size: int,
                 bias: np.ndarray | None):
        self.packed, self.scales, self.biases = packed, scales, biases
        self.bits, self.group_size, self.bias = bits, group_size, bias
        self.out_features, self.in_features = packed.shape[0], packed.shape[1] * 8 // bits

    @classmethod
    def of(cls, module: nn.Module) -> PackedLinear:
        """A packable QuantizedLinear or QuantizedEmbedding (see :func:`packable`), over views of its arrays."""
        if not packable(module):
            raise ValueError(f"not a module multiplied packed: {type(module).__name__}")
        mx.eval(module.parameters())
        packed = np.asarray(module.weight).view(np.uint8)  # (out, in * bits / 8), little-endian words
        bias = np.asarray(module.bias, dtype=np.float32) if "bias" in module else None
        return cls(packed, _float32(module.scales), _float32(module["biases"]), module.bits, module.group_size, bias)

    @property
    def shape(self) -> tuple[int, int]:
        """(in_features, out_features), as a float Linear's ``weight_t``."""
        return self.in_features, self.out_features

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes + self.scales.nbytes + self.biases.nbytes

    @property
    def weight_t(self) -> np.ndarray:
        """W^T widened to float32: a new array each time (for the rare caller that needs the matrix itself)."""
        return self.rows(np.arange(self.out_features)).T

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """(n, in_features) -> (n, out_features), into ``out`` when given."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if out is None:
            out = np.empty((len(x), self.out_features), np.float32)
        self.columns(x, 0, self.out_features, out)
        return out

    def columns(self, x: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
        """Output columns [start, stop) of x W^T (+ b) into ``out`` (n, stop - start), W's rows for them shared
        among the threads (on a pool thread: that thread alone)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        few = len(x) <= FEW_ROWS
        work = self._few if few else self._many
        granule = _granule(len(x))
        if in_a_share() or stop - start <= granule or (
                few and len(x) * (stop - start) * self.packed.shape[1] < INLINE_BYTES):
            work(x, start, stop, out[:, : stop - start])
        else:
            share = _thread_share(stop - start, granule)
            by_share(lambda a, b: work(x, start + a, start + b, out[:, a:b]), stop - start, share)
        if self.bias is not None:
            out[:, : stop - start] += self.bias[start:stop]

    def rows(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """Rows of W (an embedding's lookup), float32 (len(ids), in_features)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.out_features):
            raise IndexError("row id out of range")
        out = np.empty((len(ids), self.in_features), np.float32)
        _unpack(self.packed, self.scales, self.biases, self.bits, ids, out)
        return out

    def __getitem__(self, ids: Any) -> np.ndarray:
        return self.rows(ids)

    def _few(self, x: np.ndarray, first: int, last: int, out: np.ndarray) -> None:
        """Output rows [first, last) by the few-row kernels into ``out`` (n, last - first)."""
        target = out if out.flags.c_contiguous else np.empty((len(x), last - first), np.float32)
        if len(x) == 1:
            row = x[0]
            sums = np.ascontiguousarray(row.reshape(-1, self.group_size).sum(axis=-1, dtype=np.float32))
            even, odd = (np.ascontiguousarray(row[0::2]), np.ascontiguousarray(row[1::2])) if self.bits == 4 else (
                row, row[:0])
            _row_product(self.packed, self.scales, self.biases, self.bits, even, odd, sums, target[0],
                         first, last)
        else:
            _product(self.packed, self.scales, self.biases, self.bits, x, target, first, last)
        if target is not out:
            out[:] = target

    def _many(self, x: np.ndarray, first: int, last: int, out: np.ndarray) -> None:
        """Output rows [first, last), a chunk of the weight's rows at a time unpacked into float32 for the BLAS."""
        buffer = _scratch(CHUNK_ROWS * self.in_features)
        for chunk in range(first, last, CHUNK_ROWS):
            end = min(chunk + CHUNK_ROWS, last)
            w = buffer[: (end - chunk) * self.in_features].reshape(end - chunk, self.in_features)
            _unpack(self.packed, self.scales, self.biases, self.bits, np.arange(chunk, end), w)
            np.matmul(x, w.T, out=out[:, chunk - first : end - first])


def joined_products(maps: Sequence[PackedLinear], x: np.ndarray) -> list[np.ndarray]:
    """Each map's x W^T (maps of one input: a layer's query, key and value), in one pass over the threads, each
    thread a share of their output rows one after another, where a decode step would pay a pass per map."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    widths = [m.out_features for m in maps]
    offsets = np.cumsum([0, *widths])
    out = np.empty((len(x), int(offsets[-1])), np.float32)

    def work(a: int, b: int) -> None:
        for m, start in zip(maps, offsets[:-1], strict=True):
            lo, hi = max(a, int(start)), min(b, int(start) + m.out_features)
            if lo < hi:
                m.columns(x, lo - int(start), hi - int(start), out[:, lo:hi])

    granule = _granule(len(x))
    if in_a_share():
        work(0, out.shape[1])
    else:
        share = _thread_share(out.shape[1], granule)
        by_share(work, out.shape[1], share)
    return np.split(out, offsets[1:-1], axis=1)
