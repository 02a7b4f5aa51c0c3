"""Whisper's decoder steps on MLX's CPU device, in numpy: one token for every live sequence per call.

A decode step is tiny next to the encoder (a batch of a few rows through four layers), so on a CPU its time is not
arithmetic but overhead and memory: MLX built and dispatched a graph of ~150 operations to its CPU stream for each
token (tiny.en: 12.5 ms before the vocabulary projection), where numpy calls the same BLAS and element-wise loops
directly (about 5). The projection onto the vocabulary reads 80 MB of weights a step, which numpy's BLAS streams at
the memory's speed (3 ms against MLX's 7).

Each sequence keeps its own caches here: self-attention keys and values in buffers of the text context's length,
filled as it goes, and its window's cross-attention keys and values as numpy views of the MLX arrays. Attention runs
row by row over exactly that row's positions, so rows of different lengths and windows need no padding or masks;
the products of every layer's linear maps take all rows at once. The prompt's forward pass (``WindowDecoder.begin``)
stays in MLX; Metal keeps batch.py's MLX ``DecodeBatch``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import gelu_rows, numpy_blas_single_threaded
from omnid.engine.numpy_layers import Linear, Norm, as_numpy

# What this module reads of model.py's and decoding.py's objects, said here: model.py imports this module (its
# TextDecoder's cpu_step), so neither is imported back.
KVCache = tuple[mx.array, mx.array]  # model.KVCache: a layer's keys and values


class Sequence(Protocol):
    """A decoding.Decoding as a step sees it: the tokens it has so far."""

    sampled: list[int]


@dataclass(frozen=True)
class _Layer:
    attn_ln: Norm
    query: Linear
    key: Linear
    value: Linear
    out: Linear
    cross_ln: Norm
    cross_query: Linear
    cross_out: Linear
    mlp_ln: Norm
    mlp1: Linear
    mlp2: Linear


@dataclass
class Row:
    """One sequence's caches: per layer, self-attention keys and values (heads, text context, head_dim), the first
    ``length`` positions filled; and its window's cross-attention keys and values (heads, audio positions,
    head_dim)."""

    keys: list[np.ndarray]
    values: list[np.ndarray]
    length: int
    cross: list[tuple[np.ndarray, np.ndarray]]  # views that keep their MLX arrays alive


class CpuTextDecoder:
    """A TextDecoder's step in numpy (see the module docstring); weights are views of the MLX arrays. (``decoder``
    is a model.TextDecoder, typed by its base.)"""

    def __init__(self, decoder: nn.Module):
        first = decoder.blocks[0].attn
        self.n_head = first.n_head
        self.head_dim = first.query.weight.shape[0] // first.n_head
        self.n_ctx = decoder.positional_embedding.shape[0]
        self.embedding = as_numpy(decoder.token_embedding.weight)
        self.positions = as_numpy(decoder.positional_embedding)
        self.projection = as_numpy(decoder._projection) if decoder._projection is not None else self.embedding.T
        self.ln = Norm.of(decoder.ln)
        self.layers = []
        for block in decoder.blocks:
            cross, cross_ln = block.cross_attn, block.cross_attn_ln
            assert cross is not None and cross_ln is not None, "decoder blocks have cross-attention"
            self.layers.append(_Layer(
                Norm.of(block.attn_ln), Linear.of(block.attn.query), Linear.of(block.attn.key),
                Linear.of(block.attn.value), Linear.of(block.attn.out), Norm.of(cross_ln),
                Linear.of(cross.query), Linear.of(cross.out), Norm.of(block.mlp_ln), Linear.of(block.mlp1),
                Linear.of(block.mlp2),
            ))

    def row(self, self_kv: list[KVCache], cross: list) -> Row:
        """A sequence's caches from its prompt's MLX ones (batch of one) and its window's ``cross_kv``."""
        mx.eval(self_kv)
        length = self_kv[0][0].shape[2]
        keys, values = [], []
        shape = (self.n_head, self.n_ctx, self.head_dim)
        for k, v in self_kv:
            key, value = np.empty(shape, np.float32), np.empty(shape, np.float32)
            key[:, :length], value[:, :length] = np.asarray(k)[0], np.asarray(v)[0]
            keys.append(key)
            values.append(value)
        mx.eval([kv for _, kv in cross])
        return Row(keys, values, length, [(np.asarray(k)[0], np.asarray(v)[0]) for _, (k, v) in cross])

    def step(self, tokens: list[int], rows: list[Row]) -> np.ndarray:
        """Feeds each row its token; returns the next logits, one row per sequence (len(rows), vocabulary)."""
        if any(r.length >= self.n_ctx for r in rows):
            raise ValueError(f"a sequence is past the decoder's {self.n_ctx} positions")
        # A step's products are small: a second BLAS thread would be woken for each (or spin between them) on the
        # core that other sessions' work needs.
        with numpy_blas_single_threaded():
            return self._step(tokens, rows)

    def _step(self, tokens: list[int], rows: list[Row]) -> np.ndarray:
        x = self.embedding[tokens] + self.positions[[r.length for r in rows]]
        scale = np.float32(self.head_dim**-0.5)
        heads = np.empty_like(x)
        for i, layer in enumerate(self.layers):
            h = layer.attn_ln(x.copy())
            q, k, v = (f(h).reshape(len(rows), self.n_head, self.head_dim) for f in (layer.query, layer.key, layer.value))
            for b, row in enumerate(rows):
                n = row.length
                row.keys[i][:, n], row.values[i][:, n] = k[b], v[b]
                heads[b] = _attend(q[b] * scale, row.keys[i][:, : n + 1], row.values[i][:, : n + 1])
            x += layer.out(heads)
            q = layer.cross_query(layer.cross_ln(x.copy())).reshape(len(rows), self.n_head, self.head_dim)
            for b, row in enumerate(rows):
                heads[b] = _attend(q[b] * scale, *row.cross[i])
            x += layer.cross_out(heads)
            x += layer.mlp2(gelu_rows(layer.mlp1(layer.mlp_ln(x.copy()))))
        for row in rows:
            row.length += 1
        return self.ln(x) @ self.projection  # x is not used again: normed in place


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(q k^T) v for one query per head: q (heads, head_dim), k and v (heads, positions, head_dim) ->
    (heads * head_dim,). Keys are read as stored: each head's scores are one matrix-vector product."""
    scores = np.matmul(k, q[:, :, None])[:, :, 0]
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.matmul(scores[:, None, :], v).reshape(-1)


class CpuDecodeBatch:
    """batch.py's DecodeBatch on the CPU: live sequences stepping together through CpuTextDecoder, each with its
    own caches (no padding: join and leave only add or drop a row)."""

    def __init__(self, decoder: CpuTextDecoder):
        self.decoder = decoder
        self.keys: list[Any] = []
        self.sequences: list[Sequence] = []
        self.rows: list[Row] = []

    def __len__(self) -> int:
        return len(self.keys)

    def join(self, key: Any, sequence: Sequence, state: tuple[list[KVCache], list]) -> None:
        self_kv, cross = state
        self.keys.append(key)
        self.sequences.append(sequence)
        self.rows.append(self.decoder.row(self_kv, cross))

    def leave(self, keys: Collection[Any]) -> None:
        keep = [i for i, k in enumerate(self.keys) if k not in keys]
        self.keys = [self.keys[i] for i in keep]
        self.sequences = [self.sequences[i] for i in keep]
        self.rows = [self.rows[i] for i in keep]

    def step(self) -> np.ndarray:
        return self.decoder.step([s.sampled[-1] for s in self.sequences], self.rows)
