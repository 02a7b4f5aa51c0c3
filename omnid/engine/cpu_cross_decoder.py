"""A pre-LN Transformer decoder with cross-attention, one token per live sequence per step, in numpy on MLX's CPU
device: the step of Whisper's decoder and of Cohere Transcribe's (NeMo's TransformerDecoder), which differ only in
how a token is embedded, the feed-forward's activation and the head.

A decode step is single rows through every layer: on a CPU its time is not arithmetic but overhead and memory. MLX
builds and dispatches a graph of ~150 operations to its CPU stream for each token (Whisper tiny.en: 12.5 ms before
the vocabulary projection; Cohere's 8 x 1024 decoder: several times the numpy step, in a one-off profile), where
numpy calls the same BLAS and element-wise loops directly, and the BLAS's matrix-vector products stream the weights
at the memory's speed.

Each sequence keeps its own caches (``Row``): self-attention keys and values in buffers of the position table's
length, filled as it goes, and its cross-attention keys and values as numpy views of MLX arrays. Attention runs row
by row over exactly that row's positions, so rows of different lengths and inputs need no padding or masks; the
products of every layer's linear maps take all rows at once. A prompt's forward pass stays in the kind's MLX model
(its caches become a Row); Metal keeps the MLX decoders.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from omnid.engine.cpu_math import numpy_blas_single_threaded
from omnid.engine.numpy_layers import Linear, Norm, QuantizedRows

KVCache = tuple[mx.array, mx.array]  # a layer's keys and values, (1, heads, positions, head_dim)


@dataclass(frozen=True)
class CrossLayer:
    """One decoder layer's weights: self-attention, cross-attention (its keys and values are the Row's), MLP."""

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
    """One sequence's caches: per layer, self-attention keys and values (heads, positions, head_dim), the first
    ``length`` positions filled; and its input's cross-attention keys and values (heads, input positions,
    head_dim)."""

    keys: list[np.ndarray]
    values: list[np.ndarray]
    length: int
    cross: list[tuple[np.ndarray, np.ndarray]]  # views that keep their MLX arrays alive


@dataclass(frozen=True)
class CpuCrossDecoder:
    """The step (see the module docstring). ``embedding`` (vocabulary, state) and ``positions`` (table, state) are
    added per token, then ``embedding_ln`` where the model normalises the sum; ``activation`` runs in place on the
    MLP's hidden rows; ``head`` maps the final norm's output to the logits. ``single_threaded``: each product on one
    BLAS thread (a small decoder shared by many sequences, where a second thread would be woken for each product on
    the core other sessions need); else the BLAS's own threads, which read a large decoder's weights at twice one
    core's bandwidth."""

    n_head: int
    head_dim: int
    embedding: np.ndarray | QuantizedRows
    positions: np.ndarray
    embedding_ln: Norm | None
    layers: list[CrossLayer]
    ln: Norm
    head: Linear
    activation: Callable[[np.ndarray], np.ndarray]
    single_threaded: bool = True

    @property
    def n_ctx(self) -> int:
        return len(self.positions)

    def row(self, self_kv: list[KVCache], cross: list[KVCache]) -> Row:
        """A sequence's caches from its prompt's MLX ones (batch of one) and its input's cross-attention keys and
        values (batch of one)."""
        mx.eval(self_kv)
        length = self_kv[0][0].shape[2]
        keys, values = [], []
        shape = (self.n_head, self.n_ctx, self.head_dim)
        for k, v in self_kv:
            key, value = np.empty(shape, np.float32), np.empty(shape, np.float32)
            key[:, :length], value[:, :length] = np.asarray(k)[0], np.asarray(v)[0]
            keys.append(key)
            values.append(value)
        mx.eval(cross)
        return Row(keys, values, length, [(np.asarray(k)[0], np.asarray(v)[0]) for k, v in cross])

    def step(self, tokens: list[int], rows: list[Row]) -> np.ndarray:
        """Feeds each row its token; returns the next logits, one row per sequence (len(rows), vocabulary)."""
        if any(r.length >= self.n_ctx for r in rows):
            raise ValueError(f"a sequence is past the decoder's {self.n_ctx} positions")
        threads: AbstractContextManager[None] = numpy_blas_single_threaded() if self.single_threaded else nullcontext()
        with threads:
            return self._step(tokens, rows)

    def _step(self, tokens: list[int], rows: list[Row]) -> np.ndarray:
        x = self.embedding[tokens] + self.positions[[r.length for r in rows]]
        if self.embedding_ln is not None:
            self.embedding_ln(x)
        scale = np.float32(self.head_dim**-0.5)
        heads = np.empty_like(x)
        for i, layer in enumerate(self.layers):
            h = layer.attn_ln(x.copy())
            q, k, v = (f(h).reshape(len(rows), self.n_head, self.head_dim) for f in (layer.query, layer.key, layer.value))
            for b, row in enumerate(rows):
                n = row.length
                row.keys[i][:, n], row.values[i][:, n] = k[b], v[b]
                heads[b] = attend(q[b] * scale, row.keys[i][:, : n + 1], row.values[i][:, : n + 1])
            x += layer.out(heads)
            q = layer.cross_query(layer.cross_ln(x.copy())).reshape(len(rows), self.n_head, self.head_dim)
            for b, row in enumerate(rows):
                heads[b] = attend(q[b] * scale, *row.cross[i])
            x += layer.cross_out(heads)
            x += layer.mlp2(self.activation(layer.mlp1(layer.mlp_ln(x.copy()))))
        for row in rows:
            row.length += 1
        return self.head(self.ln(x))  # x is not used again: normed in place


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(q k^T) v for one query per head: q (heads, head_dim), k and v (heads, positions, head_dim) ->
    (heads * head_dim,). Keys are read as stored: each head's scores are one matrix-vector product."""
    scores = np.matmul(k, q[:, :, None])[:, :, 0]
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.matmul(scores[:, None, :], v).reshape(-1)
