"""The FastConformer's layers on MLX's CPU device, in numpy over blocks of rows (the encoder of Sortformer and of
any NeMo kind built on it).

On the CPU, MLX runs each element-wise operation (layer norms, bias and residual adds) over the whole activation on
one core, and the idle threads of its BLAS spin for a while after each product, on the core the numpy attention
threads need. Here a layer is a few passes over its rows, shared among cpu_math's threads: each block of ROWS
rows gets its layer norm, products (numpy's BLAS, one thread per caller), activation and residual add while it is
in cache, and MLX's BLAS is not used at all. Only attention (the heads) and the convolution module's middle (each
row needs its neighbours) wait for all rows. Weights are numpy views of the model's MLX arrays, not copies.
fastconformer.py keeps its MLX layers for Metal and for batches of more than one sequence.

A layer kept packed (a quantized folder, cpu_packed.py) runs each product over all its rows instead, the output
columns shared among the threads: a packed product over many rows unpacks its weight for the BLAS, and a thread
with a block of rows would unpack all of it, where a thread with a share of the columns unpacks only its share.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import glu_depthwise_silu, relative_attention_np, relu_rows, silu_rows
from omnid.engine.numpy_layers import (
    Linear,
    LinearMap,
    Norm,
    all_rows,
    any_packed,
    as_numpy,
    blocks,
    linear_map,
    scratch,
)


class FeedForward:
    """x += 0.5 * linear2(SiLU(linear1(norm(x)))) on a block of rows."""

    def __init__(self, norm: nn.LayerNorm, linear1: nn.Linear, linear2: nn.Linear):
        self.norm, self.linear1, self.linear2 = Norm.of(norm), linear_map(linear1), linear_map(linear2)

    def add_to_all(self, x: np.ndarray) -> None:
        """add_to over all of x's rows, each product's columns shared among the threads (packed maps)."""
        hidden = all_rows(self.linear1, self.norm(x.copy()))
        blocks(lambda start, stop: silu_rows(hidden[start:stop], np.empty_like(hidden[start:stop])), len(x))
        y = all_rows(self.linear2, hidden)
        y *= 0.5
        x += y

    def add_to(self, x: np.ndarray) -> None:
        rows, (m, ff) = len(x), self.linear1.shape
        normed = scratch.get("normed", rows, m)
        normed[:] = x
        hidden = self.linear1(self.norm(normed), scratch.get("hidden", rows, ff))
        silu_rows(hidden, scratch.get("denominator", rows, ff))
        y = self.linear2(hidden, scratch.get("out", rows, m))
        y *= 0.5
        x += y


class CpuConformerLayer:
    """fastconformer.ConformerLayer on numpy arrays: updates the (T, d_model) residual stream in place. (``layer``
    is one, typed by its base, nn.Module: fastconformer.py imports this module and is not imported back.)"""

    def __init__(self, layer: nn.Module):
        self.ff1 = FeedForward(layer.norm_feed_forward1, layer.feed_forward1.linear1, layer.feed_forward1.linear2)
        self.ff2 = FeedForward(layer.norm_feed_forward2, layer.feed_forward2.linear1, layer.feed_forward2.linear2)
        self.norm_att, self.norm_conv, self.norm_out = (
            Norm.of(n) for n in (layer.norm_self_att, layer.norm_conv, layer.norm_out))
        self.heads, self.q, self.k, self.v, self.o, self.relative_k, self.bias_u, self.bias_v = attention_weights(
            layer.self_attn)
        conv = layer.conv
        self.pointwise1, self.pointwise2 = linear_map(conv.pointwise_conv1), linear_map(conv.pointwise_conv2)
        # The batch norm folded into the depthwise convolution: (w x + b - mean) * s + beta.
        norm = conv.norm
        s = as_numpy(norm.weight * mx.rsqrt(norm.running_var + norm.eps))
        self.depthwise_weight = as_numpy(conv.depthwise_conv.weight)[..., 0] * s[:, None]
        bias = as_numpy(conv.depthwise_conv.bias) if "bias" in conv.depthwise_conv else 0.0
        self.depthwise_bias = (bias - as_numpy(norm.running_mean)) * s + as_numpy(norm.bias)
        self.packed = any_packed((self.q, self.k, self.v, self.o, self.ff1.linear1, self.ff1.linear2,
                                  self.ff2.linear1, self.ff2.linear2))

    def __call__(self, x: np.ndarray, sin: np.ndarray, cos: np.ndarray) -> None:
        """``sin``, ``cos``: relative_sinusoids of the sequence's length."""
        if self.packed:
            self._by_columns(x, sin, cos)
            return
        t, m = x.shape
        q, k, v = (np.empty((t, m), np.float32) for _ in range(3))

        def feed_forward1_and_projections(start: int, stop: int) -> None:
            rows = x[start:stop]
            self.ff1.add_to(rows)
            normed = scratch.get("normed", stop - start, m)
            normed[:] = rows
            self.norm_att(normed)
            for proj, out in ((self.q, q), (self.k, k), (self.v, v)):
                proj(normed, out[start:stop])

        blocks(feed_forward1_and_projections, t)
        att = self._attention(q, k, v, sin, cos)
        y = np.empty((t, 2 * m), np.float32)

        def attention_out_and_pointwise1(start: int, stop: int) -> None:
            rows = x[start:stop]
            rows += self.o(att[start:stop], scratch.get("out", stop - start, m))
            normed = scratch.get("normed", stop - start, m)
            normed[:] = rows
            self.pointwise1(self.norm_conv(normed), y[start:stop])

        blocks(attention_out_and_pointwise1, t)
        g = glu_depthwise_silu(y, self.depthwise_weight, self.depthwise_bias)

        def pointwise2_feed_forward2_and_norm(start: int, stop: int) -> None:
            rows = x[start:stop]
            rows += self.pointwise2(g[start:stop], scratch.get("out", stop - start, m))
            self.ff2.add_to(rows)
            self.norm_out(rows)

        blocks(pointwise2_feed_forward2_and_norm, t)

    def _by_columns(self, x: np.ndarray, sin: np.ndarray, cos: np.ndarray) -> None:
        """The same, each product over all the rows (see the module docstring: packed maps)."""
        self.ff1.add_to_all(x)
        normed = self.norm_att(x.copy())
        q, k, v = (all_rows(proj, normed) for proj in (self.q, self.k, self.v))
        x += all_rows(self.o, self._attention(q, k, v, sin, cos))
        y = all_rows(self.pointwise1, self.norm_conv(x.copy()))
        x += all_rows(self.pointwise2, glu_depthwise_silu(y, self.depthwise_weight, self.depthwise_bias))
        self.ff2.add_to_all(x)
        self.norm_out(x)

    def _attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, sin: np.ndarray, cos: np.ndarray
                   ) -> np.ndarray:
        """The heads' relative-position attention, (T, d_model) each in and out."""
        t, m = q.shape
        h = self.heads
        p = relative_keys(self.relative_k, sin, cos)
        att = relative_attention_np(q.reshape(1, t, h, -1), self.bias_u, self.bias_v, k.reshape(1, t, h, -1),
                                    p.reshape(-1, h, m // h), v.reshape(1, t, h, -1), 1 / math.sqrt(m // h))[0]
        return att.reshape(t, m)


def attention_weights(att: nn.Module
                      ) -> tuple[int, LinearMap, LinearMap, LinearMap, LinearMap, LinearMap, np.ndarray, np.ndarray]:
    """A relative-position attention's (fastconformer.RelPositionAttention) heads, q, k, v, o and position
    projections, and its two biases."""
    relative_k = linear_map(att.relative_k_proj)
    assert "bias" not in att.relative_k_proj  # NeMo's linear_pos has none; relative_keys relies on it
    q, k, v, o = (linear_map(p) for p in (att.q_proj, att.k_proj, att.v_proj, att.o_proj))
    return att.heads, q, k, v, o, relative_k, as_numpy(att.bias_u), as_numpy(att.bias_v)


def relative_keys(relative_k: LinearMap, sin: np.ndarray, cos: np.ndarray) -> np.ndarray:
    """relative_k (no bias) of the embeddings of relative positions T-1 ... -(T-1), from those of 0 ... T-1 alone:
    an embedding interleaves sin(r w_i) and cos(r w_i), so that of -r is that of r with its sines negated, and
    each half of the product (sines by the even input rows of the weight, cosines by the odd ones) serves +r
    and -r. Half the multiply-adds of the whole table's product, which was a fifth of a Parakeet layer's. A packed
    map (cpu_packed) cannot be split by input rows: it runs over the whole table."""
    t, m = len(sin), relative_k.shape[1]
    p = np.empty((2 * t - 1, m), np.float32)
    ahead, behind = p[t - 1 :: -1], p[t - 1 :]  # row r: position +r, and -r
    if not isinstance(relative_k, Linear):
        table = np.empty((2 * t - 1, 2 * sin.shape[1]), np.float32)
        table[t - 1 :: -1, 0::2], table[t - 1 :, 0::2] = sin, -sin
        table[t - 1 :: -1, 1::2], table[t - 1 :, 1::2] = cos, cos
        blocks(lambda start, stop: relative_k(table[start:stop], p[start:stop]), 2 * t - 1)
        return p
    by_sin, by_cos = (np.ascontiguousarray(relative_k.weight_t[i::2]) for i in (0, 1))

    def block(start: int, stop: int) -> None:
        s = np.matmul(sin[start:stop], by_sin, out=scratch.get("sin", stop - start, m))
        c = np.matmul(cos[start:stop], by_cos, out=scratch.get("cos", stop - start, m))
        np.add(c, s, out=ahead[start:stop])
        np.subtract(c, s, out=behind[start:stop])

    blocks(block, t)
    return p


def relative_table(length: int, d_model: int) -> np.ndarray:
    """Transformer-XL sinusoids for relative positions length-1 ... -(length-1), (2 length - 1, d_model), sin and cos
    interleaved, in float32 arithmetic as NeMo computes them."""
    pos = np.arange(length - 1, -length, -1, dtype=np.float32)[:, None]
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float32) * np.float32(-math.log(10000.0) / d_model))
    pe = np.zeros((2 * length - 1, d_model), np.float32)
    pe[:, 0::2] = np.sin(pos * div)
    pe[:, 1::2] = np.cos(pos * div)
    return pe


def relative_sinusoids(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sines and cosines of relative positions 0 ... T-1, (T, d_model / 2) each, from the (2T - 1, d_model)
    table of positions T-1 ... -(T-1) (sin and cos interleaved)."""
    t = (len(table) + 1) // 2
    return np.ascontiguousarray(table[t - 1 :: -1, 0::2]), np.ascontiguousarray(table[t - 1 :: -1, 1::2])


def linear(x: np.ndarray, layer: nn.Module, relu: bool = False) -> np.ndarray:
    """layer(x) over the last axis of x (a Linear, or a 1x1 convolution), ReLU after it if asked, in row blocks."""
    proj = linear_map(layer)
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty((len(rows), proj.shape[1]), np.float32)

    def block(start: int, stop: int) -> None:
        proj(rows[start:stop], out[start:stop])
        if relu:
            relu_rows(out[start:stop])

    blocks(block, len(rows))
    return out.reshape(*x.shape[:-1], -1)
