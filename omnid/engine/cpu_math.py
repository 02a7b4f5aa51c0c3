"""Activations, attention and convolutions for the encoders, fast on MLX's CPU backend as well as on Metal.

MLX's CPU kernels for exp and erf are scalar loops (``mx.exp`` about 27x slower than ``np.exp`` here), while adds,
multiplies and OpenBLAS matrix products are fast, so an encoder's attention softmax and GELU were most of its time
on a CPU. ``gelu`` replaces erf by a rational function (adds, multiplies, one divide), pure MLX, on every device.
``attention`` (Qwen3-ASR's audio encoder) keeps both products in MLX (its OpenBLAS) and only the exp in numpy, on
the CPU device; Metal keeps MLX's fused kernel.

Sortformer's attentions (``head_attention``, ``relative_attention``), its element-wise chains, and Whisper's encoder
and decoder layers (whisper/cpu_encoder.py, cpu_decoder.py; ``gelu_rows``) go further on the CPU: numpy does all of
a head's work, products included, with the heads (or the rows of an activation) shared among
CPU_THREADS threads, because MLX's element-wise kernels use one core and torch's, which NeMo runs on, use all.
numpy's own BLAS, a second library beside MLX's, is held to one thread per caller meanwhile (``_on_pool``): an
earlier version let it start its own pool, and two spinning pools on two cores made a realtime preview's encoder
fall behind the VAD in a session test.

On the CPU all of them work in slices that stay in cache: MLX runs each element-wise op over the whole array
before the next, so a GELU's ~25 ops over a 9 MB activation, or a softmax over 54 MB of scores, stream through
memory again and again. Slices of a few hundred KB (GELU) or a few hundred query rows (attention) give the same
numbers, to the rounding of a BLAS whose kernels differ by row block, in about two thirds of the time
(bench/profile_whisper.py prints both).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import mlx.core as mx
import numpy as np
from threadpoolctl import ThreadpoolController

from omnid import blas

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


def gelu_rows(x: np.ndarray, temps: tuple[np.ndarray, ...] | None = None) -> np.ndarray:
    """``gelu`` in numpy, in place: for arrays nobody else holds (a layer's fresh output). ``temps``: four buffers of
    x's shape for the intermediates. Without them, a large array goes a few rows at a time through four small
    buffers of this thread's, reused block after block: its ~25 passes then stay in the core's cache (5.3 against
    12.2 ns a value for a 780 x 1792 feed-forward activation here). Smaller ones go whole: more, smaller blocks
    cost more in numpy's per-call overhead than they gain (a convolution's 400 x 480 output: 80 -> 130 ms)."""
    if temps is not None or x.ndim != 2 or x.size <= 4 * GELU_BLOCK:
        return _gelu_np(x, temps if temps is not None else tuple(np.empty_like(x) for _ in range(4)))
    step = max(1, GELU_BLOCK // x.shape[1])
    buffers = tuple(_buffer((step, x.shape[1]), f"gelu{i}") for i in range(4))
    for first in range(0, len(x), step):
        block = x[first : first + step]
        _gelu_np(block, tuple(b[: len(block)] for b in buffers))
    return x


# Values per block of gelu_rows: its five buffers (the block and four temporaries, 256 KB each) stay in L2.
GELU_BLOCK = 65536


def _gelu_np(x: np.ndarray, temps: tuple[np.ndarray, ...]) -> np.ndarray:
    z, z2, p, q = temps
    np.multiply(x, np.float32(0.7071067811865476), out=z)
    np.clip(z, -4.0, 4.0, out=z)
    np.multiply(z, z, out=z2)
    for out, coefficients in ((p, _ERF_P), (q, _ERF_Q)):
        np.multiply(z2, np.float32(coefficients[-1]), out=out)
        out += np.float32(coefficients[-2])
        for c in reversed(coefficients[:-2]):
            out *= z2
            out += np.float32(c)
    z *= p
    z /= q
    z += 1.0
    x *= 0.5
    x *= z
    return x


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


def head_attention(q: mx.array, k: mx.array, v: mx.array, scale: float) -> mx.array:
    """softmax(q k^T * scale) v over (B, T, heads, head_dim) arrays (as a projection's output is laid out), without
    a mask, -> (B, T, heads, head_dim). On the CPU each head in numpy, the heads shared among CPU_THREADS threads
    (see _by_heads), read and written in place in that layout."""
    if mx.default_device() != mx.cpu:
        q, k, v = (a.transpose(0, 2, 1, 3) for a in (q, k, v))
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale).transpose(0, 2, 1, 3)
    mx.eval(q, k, v)
    return mx.array(head_attention_np(np.asarray(q), np.asarray(k), np.asarray(v), scale))


def head_attention_np(qs: np.ndarray, ks: np.ndarray, vs: np.ndarray, scale: float) -> np.ndarray:
    """head_attention's CPU path on numpy arrays."""
    t = qs.shape[1]
    if t <= HEAD_ROWS:
        return _short_attention_np(qs, ks, vs, scale)

    def head(b: int, h: int, out: np.ndarray) -> None:
        k_t = ks[b, :, h].T
        for start in range(0, t, HEAD_ROWS):
            rows = slice(start, start + HEAD_ROWS)
            _softmax_times_rows((qs[b, rows, h] * np.float32(scale)) @ k_t, vs[b, :, h], out[b, rows, h])

    return _by_heads(head, qs.shape)


def relative_attention(q: mx.array, bias_u: mx.array, bias_v: mx.array, k: mx.array, p: mx.array, v: mx.array,
                       scale: float, mask: mx.array | None = None) -> mx.array:
    """Transformer-XL attention over (B, T, heads, head_dim) arrays, ``p`` (2T-1, heads, head_dim) and the biases
    (heads, head_dim), -> (B, T, heads, head_dim): softmax(((q + u) k^T + shift((q + v) p^T)) * scale) v, where ``p``
    holds the relative positions T-1 ... -(T-1) and shift takes, for query i and key j, the score of relative
    position i - j (Transformer-XL's pad-and-reshape shift, as a strided view: row i of the (T, 2T-1) scores read
    from column T-1-i on). On the CPU each head in numpy, the heads shared among CPU_THREADS threads (see
    _by_heads), read and written in place in that layout. ``mask`` (T, T), where given, is added to the scaled
    scores: 0 where query i may attend key j, -inf where not (every query attends at least itself)."""
    if mx.default_device() != mx.cpu:
        q_u, q_v = ((q + bias).transpose(0, 2, 1, 3) for bias in (bias_u, bias_v))
        k_t, p_t, v = k.transpose(0, 2, 3, 1), p.transpose(1, 2, 0), v.transpose(0, 2, 1, 3)
        scores = (q_u @ k_t + _shifted(q_v @ p_t)) * scale
        out = mx.softmax(scores if mask is None else scores + mask, axis=-1) @ v
        return out.transpose(0, 2, 1, 3)
    mx.eval(q, bias_u, bias_v, k, p, v)
    qs, us, vs_bias, ks, ps, vs = (np.asarray(a) for a in (q, bias_u, bias_v, k, p, v))
    masks = None if mask is None else np.asarray(mask)
    return mx.array(relative_attention_np(qs, us, vs_bias, ks, ps, vs, scale, masks))


def relative_attention_np(qs: np.ndarray, us: np.ndarray, vs_bias: np.ndarray, ks: np.ndarray, ps: np.ndarray,
                          vs: np.ndarray, scale: float, mask: np.ndarray | None = None) -> np.ndarray:
    """relative_attention's CPU path on numpy arrays."""
    t = qs.shape[1]
    scale32 = np.float32(scale)

    def head(b: int, h: int, out: np.ndarray) -> None:
        k_t = ks[b, :, h].T
        for start in range(0, t, HEAD_ROWS):
            end = min(start + HEAD_ROWS, t)
            q_h = qs[b, start:end, h]
            # Queries start ... end-1 only meet relative positions end-1-(T-1) ... start: rows T-end ... 2T-2-start
            # of p; row i of their scores by position starts end-1-i columns in.
            by_position = ((q_h + vs_bias[h]) * scale32) @ ps[t - end : 2 * t - 1 - start, h].T
            r = end - start
            shifted = np.lib.stride_tricks.as_strided(
                by_position[:, r - 1 :], (r, t), (by_position.strides[0] - by_position.strides[1], by_position.strides[1]))
            scores = ((q_h + us[h]) * scale32) @ k_t
            scores += shifted
            if mask is not None:
                scores += mask[start:end]
            _softmax_times_rows(scores, vs[b, :, h], out[b, start:end, h])

    return _by_heads(head, qs.shape)


# Query rows per step of a head's attention on the CPU: a step's scores (256 x T floats) stay in this core's cache
# from the product through the exp to the product with v.
HEAD_ROWS = 256
# Threads sharing a CPU attention's heads: numpy releases the GIL in its loops and products, so both cores work
# on the exp (MLX's element-wise kernels use one).
CPU_THREADS = max(1, min(os.cpu_count() or 1, 8))


# Set on the pool's threads for good, on a caller only while it runs its own share (see _on_pool).
_sharing = threading.local()


def _sharing_for_good() -> None:
    _sharing.active = True


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(CPU_THREADS, thread_name_prefix="cpu-math", initializer=_sharing_for_good)


@lru_cache(maxsize=1)
def _numpy_blas() -> ThreadpoolController:
    """numpy's own BLAS when it brings one (a wheel's, in numpy.libs; not MLX's, another library): each attention
    thread runs its products single-threaded on its own core, where a BLAS thread pool per caller would put four
    spinning threads on two cores. A numpy built on the system's BLAS, MLX's, is left alone (nothing selected:
    ``select`` takes a library matching any one of its criteria, so the path is the only one)."""
    controller = ThreadpoolController()
    numpy_dir = os.path.dirname(np.__file__)  # its wheel's libraries are in numpy.libs beside it
    return controller.select(filepath=[
        info["filepath"] for info in controller.info() if info["filepath"].startswith(numpy_dir)])


# OpenBLAS's x86-64 AVX-512 cores (DYNAMIC_ARCH's SkylakeX and the cores built on its kernels) run a float32 product
# of at most SMALL_PRODUCT multiply-adds in a small-matrix kernel that packs nothing (kernel/x86_64/
# sgemm_small_kernel_permit_skylakex.c). For a few rows that is about twice the speed of its packed kernels: on this
# project's 2-core AVX-512 VM, 7 rows by a 1024 x 4096 weight went from about 4 to 7-10 GB/s of weight a thread.
SMALL_PRODUCT = 100 * 100 * 100
_SMALL_KERNEL_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})


@lru_cache(maxsize=1)
def _numpy_blas_has_small_kernel() -> bool:
    return any(info.get("internal_api") == "openblas" and str(info.get("architecture", "")).lower()
               in _SMALL_KERNEL_CORES for info in _numpy_blas().info())


def small_product_columns(rows: int, depth: int) -> int | None:
    """How many output columns (a multiple of 8) a (rows, depth) by (depth, columns) product may have to run in
    numpy's BLAS's small-matrix kernel; None where it has none or even 8 columns are too many."""
    if not _numpy_blas_has_small_kernel():
        return None
    columns = SMALL_PRODUCT // max(1, rows * depth) // 8 * 8
    return columns or None


@lru_cache(maxsize=1)
def _mlx_blas() -> ThreadpoolController:
    """The OpenBLAS omnid.blas preloaded for MLX's CPU backend (nothing selected without one)."""
    path = blas.status().path
    controller = ThreadpoolController()
    real = os.path.realpath(path) if path else None
    return controller.select(filepath=[info["filepath"] for info in controller.info()
                                       if os.path.realpath(info["filepath"]) == real])


class _SingleThreaded:
    """A context in which one BLAS library runs one thread per caller. Its thread count is one setting for the whole
    process, so overlapping holders (two engines' threads) are counted and the last one out restores it."""

    def __init__(self, library: Callable[[], ThreadpoolController]):
        self.library = library
        self.lock = threading.Lock()
        self.holders = 0
        self.limiter: Any = None

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self.lock:
            if self.holders == 0:
                self.limiter = self.library().limit(limits=1)
            self.holders += 1
        try:
            yield
        finally:
            with self.lock:
                self.holders -= 1
                if self.holders == 0:
                    self.limiter.restore_original_limits()
                    self.limiter = None


# numpy's BLAS, for callers whose products are small or that share work among their own threads.
numpy_blas_single_threaded = _SingleThreaded(_numpy_blas)
# MLX's, for work whose large products moved to numpy: the few left (a window's convolutions, cross-attention keys
# and values, a decode's prompt) would otherwise leave its second thread spinning, after each, on a core that other
# work needs (about 0.1 s: OpenBLAS's idle timeout); woken less often, it sleeps and costs a wake-up per product.
mlx_blas_single_threaded = _SingleThreaded(_mlx_blas)


def in_a_share() -> bool:
    """Whether this thread is running a share of ``_on_pool``'s work (a pool thread, or the caller running its own
    share): work asked for there runs on this thread alone, the pool's threads being taken."""
    return getattr(_sharing, "active", False)


def _on_pool(work: Callable[..., None], shares: list[tuple[int, ...]]) -> None:
    """Runs ``work(*share)`` for each share and waits for all, numpy's BLAS single-threaded meanwhile (each share's
    products run on its own core): the first share on the calling thread while the pool's threads take the others
    (waking a sleeping thread costs about what a core does in 0.1 ms, bench/cpu_packed_products.py: the caller does
    not wait idle through it). Never called from a pool thread."""
    with numpy_blas_single_threaded():
        others = [_pool().submit(work, *share) for share in shares[1:]]
        _sharing.active = True
        try:
            if shares:
                work(*shares[0])
        finally:
            _sharing.active = False
            for done in others:  # every share ends before the caller reads what they wrote, or raises
                done.result()


def _by_heads(head: Callable[[int, int, np.ndarray], None], shape: tuple[int, ...]) -> np.ndarray:
    """Runs ``head(b, h, out)`` for every batch row b and head h of a (B, T, heads, head_dim) result, the heads
    dealt round robin to CPU_THREADS threads."""
    out = np.empty(shape, np.float32)
    pairs = [(b, h) for b in range(shape[0]) for h in range(shape[2])]

    def share(first: int) -> None:
        for b, h in pairs[first :: CPU_THREADS]:
            head(b, h, out)

    _on_pool(share, [(i,) for i in range(min(CPU_THREADS, len(pairs)))])
    return out


def by_rows(work: Callable[[int, int], None], n: int) -> None:
    """Runs ``work(start, stop)`` over CPU_THREADS contiguous shares of n rows (numpy work, which releases the GIL:
    MLX's element-wise kernels use one core)."""
    if n < 2 * CPU_THREADS:
        work(0, n)
        return
    share = -(-n // CPU_THREADS)
    _on_pool(work, [(start, min(start + share, n)) for start in range(0, n, share)])


def by_share(work: Callable[[int, int], None], n: int, share: int) -> None:
    """Runs ``work(start, stop)`` over shares of ``share`` of n indices, on the pool's threads."""
    _on_pool(work, [(start, min(start + share, n)) for start in range(0, n, share)])


def _short_attention_np(qs: np.ndarray, ks: np.ndarray, vs: np.ndarray, scale: float) -> np.ndarray:
    """head_attention_np for short runs (Qwen3-ASR's 104-position windows): each thread takes a share of the heads
    of every batch row at once, a few numpy calls in all (one head at a time cost ~10 numpy calls per head, more
    than the arithmetic of a window's 104 x 104 scores)."""
    out = np.empty(qs.shape, np.float32)
    heads = qs.shape[2]

    def share(first: int, last: int) -> None:
        q, k, v = (a[:, :, first:last].transpose(0, 2, 1, 3) for a in (qs, ks, vs))  # (B, heads, T, head_dim)
        scores = np.matmul(q, k.transpose(0, 1, 3, 2))
        scores *= np.float32(scale)
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        part = np.matmul(scores, v)
        part /= scores.sum(axis=-1, keepdims=True)
        out[:, :, first:last] = part.transpose(0, 2, 1, 3)

    by_share(share, heads, -(-heads // CPU_THREADS))
    return out


def _softmax_times_rows(scores: np.ndarray, v: np.ndarray, out: np.ndarray) -> None:
    """out = softmax(scores) v for one head's rows, in numpy, overwriting scores."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    np.divide(scores @ v, scores.sum(axis=-1, keepdims=True), out=out)


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


def depthwise_conv1d(x: mx.array, weight: mx.array, bias: mx.array | None, causal: bool = False) -> mx.array:
    """A 'same'-padded depthwise convolution over time (or a causal one: K-1 zero frames before, none after): x (B,
    T, C), weight (C, K, 1) as MLX stores a grouped Conv1d's, K odd. On the CPU as K shifted multiply-adds over
    contiguous rows: MLX's CPU grouped convolution took twice as long (a Sortformer Conformer layer's k=9 over
    609 x 512: 4.7 ms against 2.3)."""
    k = weight.shape[1]
    before, after = (k - 1, 0) if causal else ((k - 1) // 2, (k - 1) // 2)
    padded = mx.pad(x, [(0, 0), (before, after), (0, 0)])
    if mx.default_device() != mx.cpu:
        out = mx.conv1d(padded, weight, groups=x.shape[-1])
        return out if bias is None else out + bias
    t = x.shape[1]
    out = mx.zeros((x.shape[-1],), x.dtype) if bias is None else bias
    for i in range(k):
        out = out + padded[:, i : i + t] * weight[:, i, 0]
    return out


def separable_conv2d_stride2_relu(x: np.ndarray, depthwise: tuple[np.ndarray, np.ndarray],
                                  pointwise: tuple[np.ndarray, np.ndarray], padded: bool = False) -> np.ndarray:
    """ReLU of a 3x3 depthwise convolution with stride 2 and padding 1 followed by a 1x1 one, in numpy: x (T, F, C),
    or (T + 2, F + 2, C) with its zero border when ``padded``; depthwise (weight (C, 3, 3, 1) as MLX stores a
    grouped Conv2d's, bias (C,)); pointwise (weight (C, C') read as it is, a transposed view of MLX's, bias (C,))
    -> (ceil(T/2), ceil(F/2), C'). Each thread takes a share of the output rows, SEPARABLE_ROWS at a time: their
    nine strided multiply-adds over contiguous channels, then the product, bias and ReLU while the rows are in
    cache (the depthwise output of all rows written, then read back for the product, took half again as long)."""
    if not padded:
        t, f, c = x.shape
        x, inner = np.zeros((t + 2, f + 2, c), np.float32), x
        x[1:-1, 1:-1] = inner
    t, f, c = x.shape[0] - 2, x.shape[1] - 2, x.shape[2]
    t_out, f_out = (t + 1) // 2, (f + 1) // 2
    weight, bias = depthwise
    pw_weight, pw_bias = pointwise
    taps = [np.ascontiguousarray(weight[:, i, j, 0]) for i in range(3) for j in range(3)]
    out = np.empty((t_out, f_out, pw_weight.shape[1]), np.float32)

    def part(start: int, stop: int) -> None:
        acc = np.empty((SEPARABLE_ROWS, f_out, c), np.float32)
        tap = np.empty_like(acc)
        for first in range(start, stop, SEPARABLE_ROWS):
            last = min(first + SEPARABLE_ROWS, stop)
            rows, term = acc[: last - first], tap[: last - first]
            rows[:] = bias
            for i in range(3):
                for j in range(3):
                    np.multiply(x[2 * first + i : 2 * last + i : 2, j : j + 2 * f_out : 2], taps[3 * i + j], out=term)
                    rows += term
            result = out[first:last].reshape(-1, pw_weight.shape[1])
            np.matmul(rows.reshape(-1, c), pw_weight, out=result)
            result += pw_bias
            relu_rows(result)

    by_rows(part, t_out)
    return out


# Output rows per step of separable_conv2d_stride2_relu: 8 x 32 x 256 floats (a Parakeet or Sortformer block's
# first one, 256 KB) per buffer stay in a core's cache (4 and 16 rows were slower).
SEPARABLE_ROWS = 8


def conv2d_stride2_relu(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """ReLU of a 3x3 convolution with stride 2 and padding 1 from one input channel to C, in numpy: x (T, F),
    weight (C, 3, 3, 1) as MLX stores a Conv2d's -> (ceil(T/2) + 2, ceil(F/2) + 2, C): the result with a zero
    border, ready for separable_conv2d_stride2_relu(padded=True). Each thread takes a share of the output rows, a
    few at a time: their nine taps as a (rows x F/2, 9) matrix times the (9, C) weights, then the bias and the ReLU
    while the result is still in cache (MLX's convolution and ReLU wrote and re-read 100 MB for a Sortformer chunk's
    3040 x 128 log-mel, and padding it for the next convolution copied it again)."""
    t, f = x.shape
    c = weight.shape[0]
    t_out, f_out = (t + 1) // 2, (f + 1) // 2
    padded = np.zeros((t + 2, f + 2), np.float32)
    padded[1:-1, 1:-1] = x
    taps = np.ascontiguousarray(weight[..., 0].reshape(c, 9).T)
    out = np.empty((t_out + 2, f_out + 2, c), np.float32)
    out[[0, -1]] = 0.0
    out[:, [0, -1]] = 0.0

    def part(start: int, stop: int) -> None:
        for first in range(start, stop, CONV_ROWS):
            last = min(first + CONV_ROWS, stop)
            patches = np.empty((last - first, f_out, 9), np.float32)
            for i in range(3):
                for j in range(3):
                    patches[..., 3 * i + j] = padded[2 * first + i : 2 * last + i : 2, j : j + 2 * f_out : 2]
            rows = out[1 + first : 1 + last, 1:-1]
            np.matmul(patches, taps, out=rows)
            rows += bias
            relu_rows(rows)

    by_rows(part, t_out)
    return out


# Output rows per step of conv2d_stride2_relu: 8 x 64 x 256 floats (512 KB) stay in cache from product to ReLU.
CONV_ROWS = 8


def conv2d_stride2_gelu(padded: np.ndarray, weight: np.ndarray, bias: np.ndarray, border: bool) -> np.ndarray:
    """GELU of a 3x3 convolution with stride 2 over a batch given with its zero border, in numpy: padded
    (B, H + 2, W + 2, Cin), weight (Cout, 3, 3, Cin) as MLX stores a Conv2d's -> (B, ceil(H/2), ceil(W/2), Cout),
    itself with a zero border when ``border`` (the next convolution's input). Each thread takes a share of the
    output rows of all the batch, a few at a time: their nine taps of every input channel as a
    (rows x W/2, 9 Cin) matrix times the (9 Cin, Cout) weights, then the bias and the GELU while the result is in
    cache (MLX's CPU convolution ran Qwen3-ASR's 480-channel stem at a fraction of its BLAS's speed)."""
    b, h, w, c_in = padded.shape[0], padded.shape[1] - 2, padded.shape[2] - 2, padded.shape[3]
    c_out = weight.shape[0]
    h_out, w_out = (h + 1) // 2, (w + 1) // 2
    taps = np.ascontiguousarray(weight.reshape(c_out, 9 * c_in).T)
    edge = 1 if border else 0
    out = np.empty((b, h_out + 2 * edge, w_out + 2 * edge, c_out), np.float32)
    if border:
        out[:, [0, -1]] = 0.0
        out[:, :, [0, -1]] = 0.0

    def part(start: int, stop: int) -> None:
        for first in range(start, stop, CONV_ROWS):
            item, row = divmod(first, h_out)
            last = min(first + CONV_ROWS, stop, (item + 1) * h_out) - item * h_out  # one batch item at a time
            patches = np.empty((last - row, w_out, 9 * c_in), np.float32)
            for i in range(3):
                for j in range(3):
                    tap = 3 * i + j
                    patches[..., tap * c_in : (tap + 1) * c_in] = padded[item, 2 * row + i : 2 * last + i : 2,
                                                                         j : j + 2 * w_out : 2]
            rows = patches.reshape(-1, 9 * c_in) @ taps
            rows += bias
            gelu_rows(rows)
            out[item, edge + row : edge + last, edge : edge + w_out] = rows.reshape(last - row, w_out, c_out)

    def share(start: int, stop: int) -> None:  # blocks never straddle two batch items
        first = start
        while first < stop:
            end = min(stop, (first // h_out + 1) * h_out)
            part(first, end)
            first = end

    by_rows(share, b * h_out)
    return out


def glu_depthwise_silu(y: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """A Conformer convolution module's middle on one sequence, in numpy: GLU of y (T, 2C) (first half times the
    sigmoid of the second), a 'same'-padded depthwise convolution over time with weight (C, K), K odd, and bias (C,)
    (a following batch norm folded in by the caller), then SiLU -> (T, C). Each thread takes a share of the rows and
    recomputes the GLU of the K-1 rows around it, so the whole chain runs in cache (in MLX it was five passes over
    the activation on one core); the convolution and SiLU go GLU_ROWS rows at a time (a share's K multiply-adds
    over all its rows at once ran out of a core's cache at Parakeet's width)."""
    t, c = y.shape[0], y.shape[1] // 2
    k = weight.shape[1]
    half = (k - 1) // 2
    taps = [np.ascontiguousarray(weight[:, i]) for i in range(k)]
    out = np.empty((t, c), np.float32)

    def part(start: int, stop: int) -> None:
        lo, hi = max(start - half, 0), min(stop + half, t)
        glu = np.zeros((stop - start + 2 * half, c), np.float32)  # rows start-half ... stop+half-1, zero outside
        gate = _one_plus_exp_neg(y[lo:hi, c:])
        np.divide(y[lo:hi, :c], gate, out=glu[lo - start + half : hi - start + half])
        tap, denominator = np.empty((GLU_ROWS, c), np.float32), np.empty((GLU_ROWS, c), np.float32)
        for first in range(start, stop, GLU_ROWS):
            n = min(first + GLU_ROWS, stop) - first
            rows, term, at = out[first : first + n], tap[:n], first - start
            rows[:] = bias
            for i in range(k):
                np.multiply(glu[at + i : at + i + n], taps[i], out=term)
                rows += term
            np.divide(rows, _one_plus_exp_neg(rows, denominator[:n]), out=rows)

    by_rows(part, t)
    return out


# Rows per step of glu_depthwise_silu's convolution: 64 x 1024 floats (256 KB) per buffer stay in a core's cache
# (16 and 32 rows were slower: more numpy calls).
GLU_ROWS = 64


# Per thread, the last few scratch buffers of sigmoid, by shape. A fresh multi-MB numpy temporary per call
# can be a fresh mapping (malloc maps buffers above its mmap threshold), and page-faulting it cost a Sortformer
# feed much of its time; a reused one is warm. At most SCRATCH_SHAPES buffers per thread (gelu_rows takes four).
SCRATCH_SHAPES = 8
_scratch = threading.local()


def _buffer(shape: tuple[int, ...], name: str = "") -> np.ndarray:
    cache: dict[tuple, np.ndarray] = getattr(_scratch, "buffers", None) or {}
    _scratch.buffers = cache
    key = (name, *shape)
    buf = cache.pop(key, None)
    if buf is None:
        buf = np.empty(shape, np.float32)
        while len(cache) >= SCRATCH_SHAPES:
            cache.pop(next(iter(cache)))
    cache[key] = buf  # most recently used last
    return buf


def sigmoid(x: mx.array) -> mx.array:
    """1 / (1 + exp(-x)); on the CPU in numpy (MLX's exp is a scalar loop there)."""
    if mx.default_device() != mx.cpu:
        return mx.sigmoid(x)
    mx.eval(x)
    rows = np.asarray(x).reshape(-1, x.shape[-1] if x.ndim else 1)
    out = np.empty(rows.shape, np.float32)

    def part(start: int, stop: int) -> None:
        e = _one_plus_exp_neg(rows[start:stop], out[start:stop])
        np.reciprocal(e, out=e)

    by_rows(part, len(rows))
    return mx.array(out.reshape(x.shape))


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
    rows = np.asarray(x).reshape(-1, x.shape[-1] if x.ndim else 1)

    def part(start: int, stop: int) -> None:
        e = rows[start:stop]
        np.divide(e, _one_plus_exp_neg(e), out=e)

    by_rows(part, len(rows))
    return x


def _one_plus_exp_neg(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """1 + exp(-x) in ``out``, or else in this thread's scratch buffer of x's shape (valid until the next call with
    that shape)."""
    e = _buffer(x.shape) if out is None else out
    np.negative(x, out=e, casting="same_kind")
    np.exp(e, out=e)
    e += 1.0
    return e


def layer_norm_rows(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """A layer norm over the last axis of a block of rows, in place (a block in cache: four passes over it)."""
    x -= x.mean(axis=-1, keepdims=True)
    variance = np.einsum("ij,ij->i", x, x)[:, None]
    variance /= x.shape[-1]
    variance += eps
    x *= 1.0 / np.sqrt(variance)
    x *= weight
    x += bias
    return x


def relu_rows(x: np.ndarray) -> np.ndarray:
    """ReLU in place."""
    return np.maximum(x, 0.0, out=x)


def silu_rows(x: np.ndarray, scratch: np.ndarray) -> np.ndarray:
    """x / (1 + exp(-x)) in place, ``scratch`` (x's shape) holding the denominator."""
    return np.divide(x, _one_plus_exp_neg(x, scratch), out=x)
