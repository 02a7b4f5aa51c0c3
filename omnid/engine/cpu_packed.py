"""A quantized module's weight multiplied on the CPU as it is packed: 4 or 8 bits a weight instead of float32's 32.

MLX's own quantized kernels on its CPU device were measured several times slower than float32 (bench/quantized.py),
so the numpy paths used to widen every packed module to float32 at load: a quantized checkpoint then took float32's
memory. Here the packed weight stays packed and is multiplied by two kernels compiled by numba:

- **few rows** (a decode step, a streaming chunk's handful of frames): a product reads each packed weight once and
  unpacks it in registers. Such products are bound by memory bandwidth (every weight read once for a row or two), so
  reading a quarter or an eighth of float32's bytes is what makes them fast;
- **many rows** (an encoder window, a prompt): the weight is unpacked, a chunk of output columns at a time, into a
  float32 scratch buffer and numpy's BLAS multiplies it; the unpacking is one pass over the weight, a small share of
  a product over many rows.

Layout. MLX packs affine weights row by row (``w = scale * q + bias`` per group of ``group_size`` inputs; 4-bit
values two to a byte, the even input in the low nibble). The kernels want the inner loop to run across output rows,
which vectorizes whatever the group size, so at load each module is laid out once as blocks of BLOCK_ROWS output
rows: ``packed[block, group, byte, row]``, ``scales``/``biases[block, group, row]``. Only MLX's affine mode at 4 or 8
bits is taken (what mlx-audio's and mlx-examples' converters write by default); other bits and the floating-point
modes are widened at load as before (:func:`packable`).

The kernels release the GIL and run on cpu_math's threads, a share of the output blocks each; numba's own threading
is not used (its default layer may not be entered from two threads at once, and omnid runs engines side by side).
"""

from __future__ import annotations

import threading
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from numba import njit

from omnid.engine.cpu_math import CPU_THREADS, by_share
from omnid.engine.quantization import CPU_PACKED_BITS

# Output rows a kernel step works on: 64 float32 accumulators are four AVX-512 registers (eight AVX2, sixteen NEON).
BLOCK_ROWS = 64
# At most this many input rows go through the unpacking kernel; more are unpacked into float32 for the BLAS. At 8
# rows the kernel's arithmetic (one multiply-add per weight per row) is about the BLAS's on float32 weights.
FEW_ROWS = 8
# Output columns unpacked at a time for the BLAS: (in_features, 256) float32 scratch, 1 MB at width 1024, small
# enough to stay in the core's cache between the unpacking and the product that reads it.
CHUNK_COLUMNS = 256

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
def _add_group(acc, group_sum, scales, biases, sums, g):
    """acc += scale * (sum of x q over the group) + bias * (sum of x over the group), per row of x and output."""
    for b in range(acc.shape[0]):
        s = sums[b, g]
        for r in range(BLOCK_ROWS):
            acc[b, r] += scales[r] * group_sum[b, r] + biases[r] * s


@njit(inline="always")
def _store(acc, out, block):
    """A block's accumulators into its output columns, those past the output width dropped."""
    top = min(BLOCK_ROWS, out.shape[1] - block * BLOCK_ROWS)
    for b in range(acc.shape[0]):
        for r in range(top):
            out[b, block * BLOCK_ROWS + r] = acc[b, r]


@njit("void(uint8[:, :, :, ::1], float32[:, :, ::1], float32[:, :, ::1], int64, float32[:, ::1], float32[:, ::1], "
      "float32[:, ::1], float32[:, ::1], int64, int64)", nogil=True, fastmath=_MATH, cache=True)
def _product(packed, scales, biases, bits, even, odd, sums, out, first, last):
    """out[:, block rows] = x W^T for blocks [first, last) of a 4- or 8-bit weight. 4 bits: ``even``/``odd`` are x's
    even and odd inputs (the low and high nibbles' partners); 8 bits: ``even`` is x (``odd`` unused). ``sums``: x's
    sum over each group (for the biases). Each weight is unpacked once, in registers, for every row of x."""
    n, groups, size = even.shape[0], packed.shape[1], packed.shape[2]
    group_sum = np.empty((n, BLOCK_ROWS), np.float32)
    acc = np.empty((n, BLOCK_ROWS), np.float32)
    low = np.empty(BLOCK_ROWS, np.float32)
    high = np.empty(BLOCK_ROWS, np.float32)
    for block in range(first, last):
        acc[:] = 0
        for g in range(groups):
            group_sum[:] = 0
            for k in range(size):
                j = g * size + k
                src = packed[block, g, k]
                if bits == 4:
                    for r in range(BLOCK_ROWS):
                        low[r] = _low(src[r])
                    for r in range(BLOCK_ROWS):
                        high[r] = _high(src[r])
                    for b in range(n):
                        e, o = even[b, j], odd[b, j]
                        for r in range(BLOCK_ROWS):
                            group_sum[b, r] += low[r] * e + high[r] * o
                else:
                    for r in range(BLOCK_ROWS):
                        low[r] = np.float32(np.int32(src[r]))
                    for b in range(n):
                        e = even[b, j]
                        for r in range(BLOCK_ROWS):
                            group_sum[b, r] += low[r] * e
            _add_group(acc, group_sum, scales[block, g], biases[block, g], sums, g)
        _store(acc, out, block)


@njit("void(uint8[:, :, :, ::1], float32[:, :, ::1], float32[:, :, ::1], int64, int64, int64, float32[:, ::1])",
      nogil=True, fastmath=_MATH, cache=True)
def _unpack(packed, scales, biases, bits, first, last, out):
    """W^T for blocks [first, last) of a 4- or 8-bit weight into ``out`` (in_features, (last - first) *
    BLOCK_ROWS). The bits' branch is outside the loops over rows, which the compiler vectorizes."""
    groups, size = packed.shape[1], packed.shape[2]
    for block in range(first, last):
        c = (block - first) * BLOCK_ROWS
        for g in range(groups):
            s, m = scales[block, g], biases[block, g]
            for k in range(size):
                src = packed[block, g, k]
                if bits == 4:
                    j = 2 * (g * size + k)
                    # One output row per loop: two stores in one loop kept the compiler from vectorizing it.
                    low, high = out[j, c : c + BLOCK_ROWS], out[j + 1, c : c + BLOCK_ROWS]
                    for r in range(BLOCK_ROWS):
                        low[r] = s[r] * _low(src[r]) + m[r]
                    for r in range(BLOCK_ROWS):
                        high[r] = s[r] * _high(src[r]) + m[r]
                else:
                    row = out[g * size + k, c : c + BLOCK_ROWS]
                    for r in range(BLOCK_ROWS):
                        row[r] = s[r] * np.float32(np.int32(src[r])) + m[r]


@njit("void(uint8[:, :, :, ::1], float32[:, :, ::1], float32[:, :, ::1], int64[::1], int64, float32[:, ::1])",
      nogil=True, fastmath=_MATH, cache=True)
def _rows(packed, scales, biases, ids, bits, out):
    """Rows ``ids`` of W (an embedding's lookup) into ``out`` (len(ids), in_features)."""
    groups, size = packed.shape[1], packed.shape[2]
    for i in range(ids.shape[0]):
        block, r = ids[i] // BLOCK_ROWS, ids[i] % BLOCK_ROWS
        for g in range(groups):
            s, m = scales[block, g, r], biases[block, g, r]
            for k in range(size):
                byte = packed[block, g, k, r]
                if bits == 4:
                    j = 2 * (g * size + k)
                    out[i, j] = s * _low(byte) + m
                    out[i, j + 1] = s * _high(byte) + m
                else:
                    out[i, g * size + k] = s * np.float32(np.int32(byte)) + m


def packable(module: nn.Module) -> bool:
    """Whether a module is one this file multiplies packed (MLX's affine mode at 4 or 8 bits)."""
    return (isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)) and module.mode == "affine"
            and module.bits in CPU_PACKED_BITS)


class _Buffers(threading.local):
    """One unpacking buffer per thread, reused: a fresh one per product would be fresh pages to fault in."""

    def __init__(self) -> None:
        self.buffer = np.empty(0, np.float32)


_buffers = _Buffers()


def _scratch(size: int) -> np.ndarray:
    if len(_buffers.buffer) < size:
        _buffers.buffer = np.empty(size, np.float32)
    return _buffers.buffer[:size]


def _on_pool_thread() -> bool:
    # cpu_math's pool may not be entered from its own threads: a product asked for there runs on that thread alone.
    return threading.current_thread().name.startswith("cpu-math")


class PackedLinear:
    """y = x W^T (+ b) with W packed: numpy_layers.Linear's interface for a quantized module."""

    def __init__(self, packed: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, group_size: int,
                 out_features: int, in_features: int, bias: np.ndarray | None):
        self.packed, self.scales, self.biases = packed, scales, biases
        self.bits, self.group_size = bits, group_size
        self.out_features, self.in_features, self.bias = out_features, in_features, bias
        self.blocks = packed.shape[0]

    @classmethod
    def of(cls, module: nn.Module) -> PackedLinear:
        """A packable QuantizedLinear or QuantizedEmbedding (see :func:`packable`), laid out in blocks."""
        if not packable(module):
            raise ValueError(f"not a module multiplied packed: {type(module).__name__}")
        bits, group = module.bits, module.group_size
        words = np.asarray(module.weight)
        out_features = words.shape[0]
        in_features = words.shape[1] * 32 // bits
        groups = in_features // group
        per_group = group * bits // 8  # bytes of one group of one row
        blocks = -(-out_features // BLOCK_ROWS)
        pad = blocks * BLOCK_ROWS - out_features

        def blocked(a: np.ndarray, inner: int) -> np.ndarray:
            a = a.reshape(out_features, groups, inner)
            if pad:
                a = np.concatenate([a, np.zeros((pad, groups, inner), a.dtype)])
            return np.ascontiguousarray(a.reshape(blocks, BLOCK_ROWS, groups, inner).transpose(0, 2, 3, 1))

        packed = blocked(words.view(np.uint8), per_group)
        scales = blocked(np.asarray(module.scales.astype(mx.float32)), 1)[:, :, 0]
        biases = blocked(np.asarray(module["biases"].astype(mx.float32)), 1)[:, :, 0]
        bias = np.asarray(module.bias, dtype=np.float32) if "bias" in module else None
        return cls(packed, np.ascontiguousarray(scales), np.ascontiguousarray(biases), bits, group, out_features,
                   in_features, bias)

    @classmethod
    def stacked(cls, maps: list[PackedLinear]) -> PackedLinear | None:
        """Maps of one input as one (their output columns one after another): a single product, one pass over the
        threads, where a decode step would pay for one per map. None where they cannot be stacked (another input
        width, bits or group size, a bias, an output width off the blocks but for the last)."""
        first = maps[0]
        same = all(m.in_features == first.in_features and m.bits == first.bits and m.group_size == first.group_size
                   and m.bias is None for m in maps)
        if not same or any(m.out_features % BLOCK_ROWS for m in maps[:-1]):
            return None
        packed, scales, biases = (np.concatenate([getattr(m, part) for m in maps])
                                  for part in ("packed", "scales", "biases"))
        return cls(packed, scales, biases, first.bits, first.group_size, sum(m.out_features for m in maps),
                   first.in_features, None)

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
        out = np.empty((self.in_features, self.blocks * BLOCK_ROWS), np.float32)
        self._unpack(0, self.blocks, out)
        return out[:, : self.out_features]

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """(n, in_features) -> (n, out_features), into ``out`` when given."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if out is None:
            out = np.empty((len(x), self.out_features), np.float32)
        self.columns(x, 0, self.out_features, out)
        return out

    def columns(self, x: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
        """Output columns [start, stop) of x W^T (+ b) into ``out`` (n, stop - start); ``start`` a multiple of
        BLOCK_ROWS, and ``stop`` one too unless it is the last column."""
        if start % BLOCK_ROWS or (stop % BLOCK_ROWS and stop != self.out_features):
            raise ValueError(f"columns [{start}, {stop}) are not on {BLOCK_ROWS}-row blocks")
        first, last = start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)
        work = self._few if len(x) <= FEW_ROWS else self._many
        per = max(1, CHUNK_COLUMNS // BLOCK_ROWS) if work == self._many else 1
        if _on_pool_thread() or last - first < 2:
            work(x, first, last, out, start)
        else:
            share = max(per, -(-(last - first) // CPU_THREADS))
            by_share(lambda a, b: work(x, first + a, first + b, out, start), last - first, share)
        if self.bias is not None:
            out += self.bias[start:stop]

    def rows(self, ids: np.ndarray | list[int]) -> np.ndarray:
        """Rows of W (an embedding's lookup), float32 (len(ids), in_features)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.out_features):
            raise IndexError("row id out of range")
        out = np.empty((len(ids), self.in_features), np.float32)
        _rows(self.packed, self.scales, self.biases, ids, self.bits, out)
        return out

    def __getitem__(self, ids: Any) -> np.ndarray:
        return self.rows(ids)

    def _few(self, x: np.ndarray, first: int, last: int, out: np.ndarray, offset: int) -> None:
        """Blocks [first, last) by the unpacking kernel, into ``out`` whose column 0 is column ``offset``."""
        target = np.empty((len(x), (last - first) * BLOCK_ROWS), np.float32)
        sums = x.reshape(len(x), -1, self.group_size).sum(axis=-1, dtype=np.float32)
        block_view = (self.packed[first:last], self.scales[first:last], self.biases[first:last])
        if self.bits == 4:
            even, odd = np.ascontiguousarray(x[:, 0::2]), np.ascontiguousarray(x[:, 1::2])
        else:
            even, odd = x, x[:, :0]
        _product(*block_view, self.bits, even, odd, np.ascontiguousarray(sums), target, 0, last - first)
        self._place(target, first, last, out, offset)

    def _many(self, x: np.ndarray, first: int, last: int, out: np.ndarray, offset: int) -> None:
        """Blocks [first, last), a chunk at a time unpacked into float32 and multiplied by numpy's BLAS."""
        per = max(1, CHUNK_COLUMNS // BLOCK_ROWS)
        buffer = _scratch(self.in_features * per * BLOCK_ROWS)
        for chunk in range(first, last, per):
            end = min(chunk + per, last)
            w = buffer[: self.in_features * (end - chunk) * BLOCK_ROWS].reshape(self.in_features, -1)
            self._unpack(chunk, end, w)
            lo, hi = chunk * BLOCK_ROWS, min(end * BLOCK_ROWS, self.out_features)
            if hi - lo == w.shape[1]:
                np.matmul(x, w, out=out[:, lo - offset : hi - offset])
            else:
                self._place(x @ w, chunk, end, out, offset)

    def _unpack(self, first: int, last: int, out: np.ndarray) -> None:
        _unpack(self.packed, self.scales, self.biases, self.bits, first, last, out)

    def _place(self, part: np.ndarray, first: int, last: int, out: np.ndarray, offset: int) -> None:
        """Blocks [first, last)'s columns of ``part`` into ``out``, the columns past out_features dropped."""
        lo = first * BLOCK_ROWS
        hi = min(last * BLOCK_ROWS, self.out_features)
        out[:, lo - offset : hi - offset] = part[:, : hi - lo]
