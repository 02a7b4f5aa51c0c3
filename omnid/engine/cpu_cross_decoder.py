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
(its caches become a Row), except where the maps are multiplied packed (cpu_packed.py: MLX's own quantized products
are several times slower on the CPU): there a Row starts from cross-attention keys and values computed in numpy and
takes its prompt through ``prefill`` (the prompt's tokens as rows of one step, each attending to those before it).
Metal keeps the MLX decoders.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cached_property

import mlx.core as mx
import numpy as np

from omnid.engine.cpu_math import numpy_blas_single_threaded
from omnid.engine.numpy_layers import LinearMap, Norm, QuantizedRows, any_packed

KVCache = tuple[mx.array, mx.array]  # a layer's keys and values, (1, heads, positions, head_dim)


@dataclass(frozen=True)
class CrossLayer:
    """One decoder layer's weights: self-attention, cross-attention (its keys and values are the Row's), MLP."""

    attn_ln: Norm
    query: LinearMap
    key: LinearMap
    value: LinearMap
    out: LinearMap
    cross_ln: Norm
    cross_query: LinearMap
    cross_out: LinearMap
    mlp_ln: Norm
    mlp1: LinearMap
    mlp2: LinearMap


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
    head: LinearMap
    activation: Callable[[np.ndarray], np.ndarray]
    single_threaded: bool = True

    @property
    def n_ctx(self) -> int:
        return len(self.positions)

    @cached_property
    def _alone(self) -> bool:
        """Whether a step holds numpy's BLAS to one thread: asked for, or some map is packed (packed maps share
        their own work among the pool's threads, and each share would otherwise set the BLAS's threads down and back
        up again around it)."""
        return self.single_threaded or any_packed([self.head, *(m for layer in self.layers for m in (
            layer.query, layer.key, layer.value, layer.out, layer.cross_query, layer.cross_out, layer.mlp1, layer.mlp2))])

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

    def start(self, cross: list[tuple[np.ndarray, np.ndarray]]) -> Row:
        """A sequence with no tokens yet over its input's cross-attention keys and values (per layer, each (heads,
        input positions, head_dim), contiguous): its prompt goes through ``prefill``."""
        shape = (self.n_head, self.n_ctx, self.head_dim)
        empty = [np.empty(shape, np.float32) for _ in self.layers]
        return Row(empty, [np.empty(shape, np.float32) for _ in self.layers], 0, cross)

    def step(self, tokens: list[int], rows: list[Row]) -> np.ndarray:
        """Feeds each row its token; returns the next logits, one row per sequence (len(rows), vocabulary)."""
        if any(r.length >= self.n_ctx for r in rows):
            raise ValueError(f"a sequence is past the decoder's {self.n_ctx} positions")
        return self._run(tokens, rows, [0] * len(rows))

    def prefill(self, tokens: list[int], row: Row) -> np.ndarray:
        """Feeds one row several tokens (a prompt), each attending to the row's positions up to its own; returns
        the logits after the last (vocabulary,)."""
        if row.length + len(tokens) > self.n_ctx:
            raise ValueError(f"a sequence is past the decoder's {self.n_ctx} positions")
        return self._run(tokens, [row] * len(tokens), list(range(len(tokens))))[-1]

    def _run(self, tokens: list[int], rows: list[Row], offsets: list[int]) -> np.ndarray:
        threads: AbstractContextManager[None] = numpy_blas_single_threaded() if self._alone else nullcontext()
        with threads:
            return self._step(tokens, rows, offsets)

    def _step(self, tokens: list[int], rows: list[Row], offsets: list[int]) -> np.ndarray:
        """Token b at position ``rows[b].length + offsets[b]`` (a row appears once per token it is fed, its offsets
        0, 1, ... in order); each row's length advances by its tokens."""
        places = [r.length + o for r, o in zip(rows, offsets, strict=True)]
        x = self.embedding[tokens] + self.positions[places]
        if self.embedding_ln is not None:
            self.embedding_ln(x)
        scale = np.float32(self.head_dim**-0.5)
        heads = np.empty_like(x)
        for i, layer in enumerate(self.layers):
            h = layer.attn_ln(x.copy())
            q, k, v = (f(h).reshape(len(rows), self.n_head, self.head_dim) for f in (layer.query, layer.key, layer.value))
            for b, (row, n) in enumerate(zip(rows, places, strict=True)):
                row.keys[i][:, n], row.values[i][:, n] = k[b], v[b]
                heads[b] = attend(q[b] * scale, row.keys[i][:, : n + 1], row.values[i][:, : n + 1])
            x += layer.out(heads)
            q = layer.cross_query(layer.cross_ln(x.copy())).reshape(len(rows), self.n_head, self.head_dim)
            for b, row in enumerate(rows):
                heads[b] = attend(q[b] * scale, *row.cross[i])
            x += layer.cross_out(heads)
            x += layer.mlp2(self.activation(layer.mlp1(layer.mlp_ln(x.copy()))))
        for row, n in zip(rows, places, strict=True):
            row.length = max(row.length, n + 1)
        return self.head(self.ln(x))  # x is not used again: normed in place


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """softmax(q k^T) v for one query per head: q (heads, head_dim), k and v (heads, positions, head_dim) ->
    (heads * head_dim,). Keys are read as stored: each head's scores are one matrix-vector product."""
    scores = np.matmul(k, q[:, :, None])[:, :, 0]
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.matmul(scores[:, None, :], v).reshape(-1)
