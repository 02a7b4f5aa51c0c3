"""The cache-aware streaming step's layers on MLX's CPU device, in numpy (cache_aware.py's MLX layers serve Metal).

A chunk is a few rows per stream (7 at 560 ms), so a step reads the whole encoder's weights for little arithmetic,
and a BLAS runs products of so few rows far below its speed on many (numpy_layers.by_columns: the small-matrix
kernel where there is one). Here every product has its output columns shared among cpu_math's threads, each
reading its share of the weight once for all the rows of every stream in the batch; only the chunk's rows are
projected to keys and values (the cache keeps them projected); the rest (norms, SiLU, the attention over [cache |
chunk], the causal depthwise convolution) is numpy on those few rows. Weights are numpy views of the model's MLX
arrays, not copies.
"""

from __future__ import annotations

import math

import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import silu_rows
from omnid.engine.nemo.cpu_fastconformer import attention_weights, relative_keys, relative_sinusoids, relative_table
from omnid.engine.numpy_layers import LinearMap, Norm, as_numpy, by_columns, linear_map

# A layer keeps the relative keys of this many keys (more if a chunk has more): a chunk of n keys takes the middle
# 2n - 1 rows, the same numbers as a table of its own. One table per layer, whatever the chunk sizes: a table per
# length cost the first chunk of each new length (a stream's last, at a commit) a tenth of a second, and a few
# hundred KB a layer for each length seen.
TABLE_KEYS = 128


def _project(x: np.ndarray, *linears: LinearMap) -> list[np.ndarray]:
    """Each linear(x) for a few rows, the output columns shared among the threads."""
    outs = [np.empty((len(x), lin.shape[1]), np.float32) for lin in linears]
    by_columns(x, list(zip(linears, outs)))
    return outs


class CpuStreamingLayer:
    """One cache-aware Conformer layer over the chunks of B streams (t frames each) with their caches. (``layer``
    is a fastconformer.ConformerLayer, typed by its base, nn.Module: fastconformer.py imports this module and is not imported back.)"""

    def __init__(self, layer: nn.Module):
        self.norm_ff1, self.norm_att, self.norm_conv, self.norm_ff2, self.norm_out = (Norm.of(n) for n in (
            layer.norm_feed_forward1, layer.norm_self_att, layer.norm_conv, layer.norm_feed_forward2, layer.norm_out))
        self.ff1 = (linear_map(layer.feed_forward1.linear1), linear_map(layer.feed_forward1.linear2))
        self.ff2 = (linear_map(layer.feed_forward2.linear1), linear_map(layer.feed_forward2.linear2))
        self.heads, self.q, self.k, self.v, self.o, self.relative_k, self.bias_u, self.bias_v = attention_weights(
            layer.self_attn)
        conv = layer.conv
        self.pointwise1, self.pointwise2 = linear_map(conv.pointwise_conv1), linear_map(conv.pointwise_conv2)
        self.depthwise = as_numpy(conv.depthwise_conv.weight)[..., 0].T.copy()  # (K, C): tap i's weights in a row
        self.depthwise_bias = as_numpy(conv.depthwise_conv.bias) if "bias" in conv.depthwise_conv else None
        assert isinstance(conv.norm, nn.LayerNorm), "a cache-aware encoder's convolution norm is a layer norm"
        self.conv_norm = Norm.of(conv.norm)
        # The relative keys of positions N-1 ... -(N-1) (2N - 1 rows), made at the first chunk.
        self._positions = np.zeros((0, self.relative_k.shape[1]), np.float32)

    def __call__(self, x: np.ndarray, keys: np.ndarray, values: np.ndarray, time: np.ndarray, mask: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """x (B, t, m), updated in place; keys and values (B, left, m) and time (B, K-1, m): the caches; mask
        (B, t, left + t) additive. -> the new caches."""
        b, t, m = x.shape
        rows = x.reshape(b * t, m)
        self._feed_forward(rows, self.norm_ff1, self.ff1)
        q, k, v = _project(self.norm_att(rows.copy()), self.q, self.k, self.v)  # the chunk's rows only
        keys = np.concatenate([keys, k.reshape(b, t, m)], axis=1)
        values = np.concatenate([values, v.reshape(b, t, m)], axis=1)
        rows += self._attention_out(q, keys, values, mask)
        y, = _project(self.norm_conv(rows.copy()), self.pointwise1)
        glu = y[:, :m] * _sigmoid(y[:, m:])
        window = np.concatenate([time, glu.reshape(b, t, m)], axis=1)  # [cache | chunk]: the causal taps
        conv = window[:, :t] * self.depthwise[0]
        for i in range(1, len(self.depthwise)):
            conv += window[:, i : i + t] * self.depthwise[i]
        if self.depthwise_bias is not None:
            conv += self.depthwise_bias
        conv = self.conv_norm(conv.reshape(b * t, m))
        silu_rows(conv, np.empty_like(conv))
        rows += _project(conv, self.pointwise2)[0]
        self._feed_forward(rows, self.norm_ff2, self.ff2)
        self.norm_out(rows)
        return keys[:, t:], values[:, t:], window[:, -time.shape[1] :]  # the newest left frames

    @staticmethod
    def _feed_forward(rows: np.ndarray, norm: Norm, linears: tuple[LinearMap, LinearMap]) -> None:
        hidden, = _project(norm(rows.copy()), linears[0])
        silu_rows(hidden, np.empty_like(hidden))
        out, = _project(hidden, linears[1])
        out *= 0.5
        rows += out

    def _attention_out(self, q: np.ndarray, keys: np.ndarray, values: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Relative-position attention of each stream's chunk (its queries q, (B t, m)) over its [cache | chunk]
        keys and values, then o_proj."""
        b, n, m = keys.shape
        t, h = mask.shape[1], self.heads
        dk = m // h
        p = self._relative_keys(n)  # (2n - 1, m): positions n-1 ... -(n-1)
        q4 = q.reshape(b, t, h, dk).transpose(0, 2, 1, 3)
        k4 = keys.reshape(b, n, h, dk).transpose(0, 2, 3, 1)
        v4 = values.reshape(b, n, h, dk).transpose(0, 2, 1, 3)
        p3 = p.reshape(2 * n - 1, h, dk).transpose(1, 2, 0)
        scale = np.float32(1 / math.sqrt(dk))
        scores = ((q4 + self.bias_u[:, None]) * scale) @ k4  # (b, h, t, n)
        by_position = ((q4 + self.bias_v[:, None]) * scale) @ p3  # (b, h, t, 2n - 1)
        column = (t - 1) + np.arange(n)[None, :] - np.arange(t)[:, None]  # query i, key j: position (n-t+i) - j
        scores += np.take_along_axis(by_position, np.broadcast_to(column, (b, h, t, n)), axis=-1)
        scores += mask[:, None]
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        att = (scores @ v4).transpose(0, 2, 1, 3).reshape(b * t, m)
        return _project(np.ascontiguousarray(att), self.o)[0]

    def _relative_keys(self, n: int) -> np.ndarray:
        """The relative keys of positions n-1 ... -(n-1): rows of the layer's table."""
        size = (len(self._positions) + 1) // 2
        if size < n:
            size = max(n, TABLE_KEYS)
            table = relative_table(size, self.relative_k.shape[0])
            self._positions = relative_keys(self.relative_k, *relative_sinusoids(table))
        return self._positions[size - n : size + n - 1]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    out = np.negative(x)
    np.exp(out, out=out)
    out += 1.0
    return np.reciprocal(out, out=out)
