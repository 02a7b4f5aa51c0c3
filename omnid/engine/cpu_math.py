"""Activations and attention for the encoders, fast on MLX's CPU backend as well as on Metal.

MLX's CPU kernels for exp and erf are scalar loops (``mx.exp`` about 27x slower than ``np.exp`` here), while adds,
multiplies and OpenBLAS matrix products are fast, so an encoder's attention softmax and GELU were most of its time
on a CPU. ``gelu`` replaces erf by a rational function (adds, multiplies, one divide), pure MLX, on every device.
``attention`` keeps both products in MLX (its OpenBLAS) and only the exp in numpy, on the CPU device; Metal keeps
MLX's fused kernel.

(A first version also did the products in numpy, which brings numpy's own OpenBLAS thread pool into the process
beside the one MLX uses; with it a realtime preview's encoder fell behind the VAD in a session test, most likely
two spinning pools on two cores. This one keeps numpy to single-threaded element-wise work.)

On the CPU both also work in slices that stay in cache: MLX runs each element-wise op over the whole array before
the next, so a GELU's ~25 ops over a 9 MB activation, or a softmax over 54 MB of scores, stream through memory
again and again. Slices of a few hundred KB (GELU) or a few hundred query rows (attention) give the same numbers,
bit for bit, in about two thirds of the time (bench/profile_whisper.py prints both).
"""

from __future__ import annotations

import threading

import mlx.core as mx
import numpy as np

# erf as a rational function of x on [-4, 4] (odd numerator, even denominator; saturated outside, where float32
# erf is +-1): the minimax approximation XLA and Eigen use for float32, within 1.5e-6 of erf. MLX's CPU erf is a
# scalar loop that took much of the encoder's time; these multiplies and adds are vectorised.
# (Fused by mx.compile they were faster still, but a kernel compiled on the engine's worker thread made the process
# abort at exit now and then: "terminate called without an active exception", 5 runs in 44 of `omnid transcribe`.)
_ERF_P = (-1.60960333262415e-02, -2.95459980854025e-03, -7.34990630326855e-04, -5.69250639462346e-05,
          -2.10102402082508e-06, 2.77068142495902e-08, -2.72614225801306e-10)
_ERF_Q = (-1.42647390514189e-02, -7.37332916720468e-03, -1.68282697438203e-03, -2.13374055278905e-04,
          -1.45660718464996e-05)

# Slice sizes for the CPU path, measured on a 2-core x86-64 box (bench/profile_whisper.py): 2^17 floats (512 KB)
# per GELU slice, 300 query rows (6 heads x 300 x 1500 scores, 11 MB) per attention slice.
GELU_SLICE = 1 << 17
ATTENTION_ROWS = 300


def gelu(x: mx.array) -> mx.array:
    """GELU with erf (not the tanh approximation): 0.5 x (1 + erf(x / sqrt 2))."""
    if x.size <= GELU_SLICE or mx.default_device() != mx.cpu:
        return _gelu(x)
    flat = x.reshape(-1)
    mx.eval(flat)
    parts = []
    for start in range(0, flat.size, GELU_SLICE):
        part = _gelu(flat[start : start + GELU_SLICE])
        mx.eval(part)
        parts.append(part)
    return mx.concatenate(parts).reshape(x.shape)


def _gelu(x: mx.array) -> mx.array:
    z = mx.clip(x * 0.7071067811865476, -4.0, 4.0)
    z2 = z * z
    p = mx.array(_ERF_P[-1], mx.float32)
    for c in reversed(_ERF_P[:-1]):
        p = p * z2 + c
    q = mx.array(_ERF_Q[-1], mx.float32)
    for c in reversed(_ERF_Q[:-1]):
        q = q * z2 + c
    return 0.5 * x * (1.0 + z * p / q)


def attention(q: mx.array, k: mx.array, v: mx.array, scale: float) -> mx.array:
    """softmax(q k^T * scale) v over (batch, heads, positions, head_dim) arrays, without a mask (an encoder's
    bidirectional attention)."""
    if mx.default_device() != mx.cpu:
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
    if q.shape[0] > 1:
        # One window at a time: a batch's scores at once (8 x 6 x 1500 x 1500 floats, 432 MB) run slower than
        # the windows one by one (54 MB each), and each window's attention is then exactly its solo one.
        return mx.concatenate([attention(q[i : i + 1], k[i : i + 1], v[i : i + 1], scale) for i in range(q.shape[0])])
    q, k_t, v = q * scale, mx.contiguous(k.swapaxes(-1, -2)), mx.contiguous(v)
    parts = []
    for start in range(0, q.shape[2], ATTENTION_ROWS):
        parts.append(_softmax_times(q[:, :, start : start + ATTENTION_ROWS] @ k_t, v))
    return mx.concatenate(parts, axis=2)


def relative_attention(q_u: mx.array, q_v: mx.array, k: mx.array, p: mx.array, v: mx.array,
                       scale: float) -> mx.array:
    """Transformer-XL attention over (B, heads, T, head_dim) arrays, ``p`` (1, heads, 2T-1, head_dim):
    softmax((q_u k^T + shift(q_v p^T)) * scale) v, where ``p`` holds the relative positions T-1 ... -(T-1) and shift
    takes, for query i and key j, the score of relative position i - j (Transformer-XL's pad-and-reshape shift, as
    a strided view: row i of the (T, 2T-1) scores read from column T-1-i on)."""
    t = q_u.shape[2]
    q_u, q_v = q_u * scale, q_v * scale
    k_t, p = mx.contiguous(k.swapaxes(-1, -2)), mx.contiguous(p)
    if mx.default_device() != mx.cpu:
        return mx.softmax(q_u @ k_t + _shifted(q_v @ p.swapaxes(-1, -2)), axis=-1) @ v
    v = mx.contiguous(v)
    parts = []
    for start in range(0, t, ATTENTION_ROWS):
        end = min(start + ATTENTION_ROWS, t)
        # Queries start ... end-1 only meet relative positions end-1-(T-1) ... start: rows T-end ... 2T-2-start of p.
        near = p[:, :, t - end : 2 * t - 1 - start]
        parts.append(_softmax_times(q_u[:, :, start:end] @ k_t + _shifted(q_v[:, :, start:end] @ near.swapaxes(-1, -2)), v))
    return mx.concatenate(parts, axis=2)


def _shifted(by_position: mx.array) -> mx.array:
    """(B, H, R, T+R-1) scores of R consecutive queries by relative position, from the last query's farthest key
    on -> (B, H, R, T) by key, without a copy: row i starts R-1-i columns in."""
    b, h, r, width = by_position.shape
    return mx.as_strided(by_position, (b, h, r, width - r + 1), (h * r * width, r * width, width - 1, 1), r - 1)


def _softmax_times(scores: mx.array, v: mx.array) -> mx.array:
    """softmax(scores) v, on the CPU."""
    mx.eval(scores)
    # A zero-copy view of the evaluated scores, turned into exp(score - max) in place: nothing else holds this
    # fresh buffer, and the product reads it as it now is. Normalising after that product divides rows x head_dim
    # numbers instead of rows x positions.
    e = np.asarray(scores)
    e -= e.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    part = (scores @ v) / mx.array(e.sum(axis=-1, keepdims=True))
    mx.eval(part)
    return part


def depthwise_conv1d(x: mx.array, weight: mx.array, bias: mx.array) -> mx.array:
    """A 'same'-padded depthwise convolution over time: x (B, T, C), weight (C, K, 1) as MLX stores a grouped
    Conv1d's, K odd. On the CPU as K shifted multiply-adds over contiguous rows: MLX's CPU grouped convolution
    took twice as long (a Sortformer Conformer layer's k=9 over 609 x 512: 4.7 ms against 2.3)."""
    k = weight.shape[1]
    if mx.default_device() != mx.cpu:
        return mx.conv1d(x, weight, padding=(k - 1) // 2, groups=x.shape[-1]) + bias
    t = x.shape[1]
    padded = mx.pad(x, [(0, 0), ((k - 1) // 2, (k - 1) // 2), (0, 0)])
    out = bias
    for i in range(k):
        out = out + padded[:, i : i + t] * weight[:, i, 0]
    return out


def depthwise_conv2d_stride2(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """A 3x3 depthwise convolution with stride 2 and padding 1, in numpy: x (T, F, C), weight (C, 3, 3, 1) as MLX
    stores a grouped Conv2d's -> (ceil(T/2), ceil(F/2), C). Nine strided multiply-adds whose inner loops run over
    contiguous channels; MLX's CPU grouped convolution took 137 ms for a Sortformer chunk's first one
    (1524 x 64 x 256), this 92 ms."""
    t, f, c = x.shape
    t_out, f_out = (t + 1) // 2, (f + 1) // 2
    padded = np.zeros((t + 2, f + 2, c), np.float32)
    padded[1:-1, 1:-1] = x
    out = np.empty((t_out, f_out, c), np.float32)
    out[:] = bias
    tap = np.empty_like(out)
    for i in range(3):
        for j in range(3):
            np.multiply(padded[i : i + 2 * t_out : 2, j : j + 2 * f_out : 2], weight[:, i, j, 0], out=tap)
            out += tap
    return out


# Per thread, the last few scratch buffers of sigmoid, by shape. A fresh multi-MB numpy temporary per call
# can be a fresh mapping (malloc maps buffers above its mmap threshold), and page-faulting it cost a Sortformer
# feed much of its time; a reused one is warm. At most SCRATCH_SHAPES buffers per thread.
SCRATCH_SHAPES = 4
_scratch = threading.local()


def _buffer(shape: tuple[int, ...]) -> np.ndarray:
    cache: dict[tuple[int, ...], np.ndarray] = getattr(_scratch, "buffers", None) or {}
    _scratch.buffers = cache
    buf = cache.pop(shape, None)
    if buf is None:
        buf = np.empty(shape, np.float32)
        while len(cache) >= SCRATCH_SHAPES:
            cache.pop(next(iter(cache)))
    cache[shape] = buf  # most recently used last
    return buf


def sigmoid(x: mx.array) -> mx.array:
    """1 / (1 + exp(-x)); on the CPU in numpy (MLX's exp is a scalar loop there)."""
    if mx.default_device() != mx.cpu:
        return mx.sigmoid(x)
    mx.eval(x)
    e = _one_plus_exp_neg(np.asarray(x))
    np.reciprocal(e, out=e)
    return mx.array(e)


def silu(x: mx.array) -> mx.array:
    """x * sigmoid(x) (SiLU, Swish)."""
    return x * sigmoid(x)


def silu_of_fresh(x: mx.array) -> mx.array:
    """SiLU of an array just computed and held by nobody else (a layer's output passed straight in): on the CPU its
    buffer is overwritten in place, x / (1 + exp(-x)) in four numpy passes, with no second array to allocate and
    copy back (a Sortformer feed-forward module at 609 positions: 12.1 -> 10.8 ms)."""
    if mx.default_device() != mx.cpu:
        return x * mx.sigmoid(x)
    mx.eval(x)
    e = np.asarray(x)
    np.divide(e, _one_plus_exp_neg(e), out=e)
    return x


def _one_plus_exp_neg(x: np.ndarray) -> np.ndarray:
    """1 + exp(-x) in this thread's scratch buffer of x's shape (valid until the next call with that shape)."""
    e = _buffer(x.shape)
    np.negative(x, out=e, casting="same_kind")
    np.exp(e, out=e)
    e += 1.0
    return e
