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
        scores = q[:, :, start : start + ATTENTION_ROWS] @ k_t
        mx.eval(scores)
        # A zero-copy view of the evaluated scores, turned into exp(score - max) in place: nothing else holds
        # this fresh buffer, and the second product reads it as it now is. Normalising after that product
        # divides rows x head_dim numbers instead of rows x positions.
        e = np.asarray(scores)
        e -= e.max(axis=-1, keepdims=True)
        np.exp(e, out=e)
        part = (scores @ v) / mx.array(e.sum(axis=-1, keepdims=True))
        mx.eval(part)
        parts.append(part)
    return mx.concatenate(parts, axis=2)


# Per thread, the last few scratch buffers of softmax/sigmoid, by shape. A fresh multi-MB numpy temporary per call
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


def softmax(x: mx.array) -> mx.array:
    """Softmax over the last axis; on the CPU its exp runs in numpy (MLX's is a scalar loop there)."""
    if mx.default_device() != mx.cpu:
        return mx.softmax(x, axis=-1)
    mx.eval(x)
    e = _buffer(tuple(x.shape))
    np.copyto(e, np.asarray(x), casting="same_kind")
    e -= e.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return mx.array(e)  # a copy: the scratch buffer is reused by the next call


def sigmoid(x: mx.array) -> mx.array:
    """1 / (1 + exp(-x)); on the CPU in numpy, for the same reason as :func:`softmax`."""
    if mx.default_device() != mx.cpu:
        return mx.sigmoid(x)
    mx.eval(x)
    e = _buffer(tuple(x.shape))
    np.negative(np.asarray(x), out=e, casting="same_kind")
    np.exp(e, out=e)
    e += 1.0
    np.reciprocal(e, out=e)
    return mx.array(e)


def silu(x: mx.array) -> mx.array:
    """x * sigmoid(x) (SiLU, Swish)."""
    return x * sigmoid(x)
