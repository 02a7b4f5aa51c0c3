"""The Qwen3 decoder in numpy, for MLX's CPU backend: prefill and per-token steps.

A decode step is 28 layers of single-row matrix products: it reads every weight once (2.4 GB at the 0.6B size)
and is bound by memory bandwidth. OpenBLAS's gemv, through numpy, reads a weight matrix much faster than MLX's
CPU backend multiplies a single row. In the prefill, matrix products cost the same in both (both call OpenBLAS),
but MLX's CPU exp is a scalar loop and the attention softmax of a long prompt dominated it. So on the
CPU the decoder runs here (bench/qwen3_asr_speed.py: per token and prefill against an all-MLX port), on
zero-copy numpy views of the model's own MLX weights (no second copy in memory); a quantized module at 4 or 8
affine bits is multiplied as it is packed (cpu_packed.py: a step reads an eighth or a quarter of float32's bytes),
one in another mode (mxfp4, nvfp4, mxfp8, other bits) widened to float32 once, here, by MLX's own dequantize (a
float copy of it); on Metal the MLX model runs, quantized modules packed. The arithmetic is the MLX decoder's (float32 RMSNorm,
rotate-half RoPE, grouped-query causal attention, SwiGLU, tied head), checked against it and against the official
goldens by the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx
import numpy as np

from omnid.engine.cpu_math import CPU_THREADS, by_rows, by_share
from omnid.engine.numpy_layers import Joined, Linear, LinearMap, linear_map
from omnid.engine.qwen3.checkpoint import TextDims
from omnid.engine.qwen3.model import TextModel, greedy_steps

# Prompt positions per prefill step: its products' activations are BLOCK x 3072 floats (12 MB at the 0.6B size);
# OpenBLAS ran a 0.6B prefill's products over 811 rows in blocks of 256 at a fraction of its speed over all of them.
BLOCK = 1024
# Query positions per attention step: its scores are (query heads per key head) x QUERIES x prompt floats per thread
# (32 MB for a 20-minute chunk's 15 600 positions), whatever the prompt's length.
QUERIES = 256


def _swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """silu(gate) * up, in place in ``gate``, the rows shared among the cores."""

    def rows(start: int, stop: int) -> None:
        g = gate[start:stop]
        e = np.negative(g)
        np.exp(e, out=e)
        e += 1.0
        np.divide(g, e, out=g)
        g *= up[start:stop]

    by_rows(rows, len(gate))
    return gate


@lru_cache(maxsize=4)
def _upper_mask(n: int) -> np.ndarray:
    """(n, n): -inf above the diagonal (a later key), 0 on and below it."""
    return np.triu(np.full((n, n), -np.inf, np.float32), k=1)


def _view(a: mx.array) -> np.ndarray:
    view = np.asarray(a)
    assert view.dtype == np.float32 and view.flags["C_CONTIGUOUS"], "float32 contiguous weights expected"
    return view


@dataclass(frozen=True)
class _Layer:
    qkv: Joined  # the query, key and value maps of the normed input
    o: LinearMap
    q_norm: np.ndarray
    k_norm: np.ndarray
    gate_up: Joined
    down: LinearMap
    input_norm: np.ndarray
    post_norm: np.ndarray


@dataclass
class Row:
    """One sequence's keys and values: per layer (kv_heads, capacity, head_dim), the first ``length`` filled."""

    keys: list[np.ndarray]
    values: list[np.ndarray]
    length: int = 0


class NumpyDecoder:
    """``prefill`` runs a prompt's embeddings into a new ``Row`` (its keys and values, in buffers sized for the prompt
    and ``room``) and returns the last position's logits; ``step`` feeds each of several rows its next token and
    returns their next logits, the rows' linear maps in one product each (a step reads every weight once, however
    many sequences take it), each row's attention over its own keys."""

    def __init__(self, model: TextModel, dims: TextDims):
        t = model.decoder
        self.eps, self.heads, self.kv_heads, self.head_dim = dims.rms_norm_eps, dims.heads, dims.kv_heads, dims.head_dim
        theta, head_dim = dims.rope_theta, dims.head_dim
        self.layers = [
            _Layer(Joined([linear_map(m) for m in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                                                    layer.self_attn.v_proj)]),
                   linear_map(layer.self_attn.o_proj),
                   _view(layer.self_attn.q_norm.weight), _view(layer.self_attn.k_norm.weight),
                   Joined([linear_map(layer.mlp.gate_proj), linear_map(layer.mlp.up_proj)]),
                   linear_map(layer.mlp.down_proj),
                   _view(layer.input_layernorm.weight), _view(layer.post_attention_layernorm.weight))
            for layer in t.layers
        ]
        # The embedding and, tied, the head: one map, its rows looked up (embed) and its product taken (head).
        self.head = linear_map(t.embed_tokens if model.tied else model.lm_head)
        self.embed = self.head if model.tied else linear_map(t.embed_tokens)
        self.norm = _view(t.norm.weight)
        self.inv_freq = (1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).astype(np.float32)

    def row(self, capacity: int) -> Row:
        shape = (self.kv_heads, capacity, self.head_dim)
        return Row([np.empty(shape, np.float32) for _ in self.layers], [np.empty(shape, np.float32) for _ in self.layers])

    def prefill(self, x: np.ndarray, room: int, check: Callable[[], None]) -> tuple[Row, np.ndarray]:
        """(positions, hidden) prompt embeddings -> its row, and the last position's logits."""
        row = self.row(x.shape[0] + room)
        for first in range(0, x.shape[0], BLOCK):
            h = self._forward(x[first : first + BLOCK], row)
            check()
        return row, self.head(self._rms(h[-1:], self.norm))[0]

    def hidden(self, x: np.ndarray, rows: np.ndarray, check: Callable[[], None]) -> np.ndarray:
        """(positions, hidden) prompt embeddings -> the final (normed) hidden states at ``rows``, in a single causal
        pass (a forced aligner reads its answer there)."""
        row = self.row(x.shape[0])
        out = []
        for first in range(0, x.shape[0], BLOCK):
            h = self._forward(x[first : first + BLOCK], row)
            wanted = rows[(rows >= first) & (rows < first + len(h))] - first
            out.append(self._rms(h[wanted], self.norm))
            check()
        return np.concatenate(out)

    def _forward(self, x: np.ndarray, row: Row) -> np.ndarray:
        """(positions, hidden) at the row's next positions, causal over everything before: the new hidden states."""
        pos = row.length
        angle = np.arange(pos, pos + x.shape[0], dtype=np.float32)[:, None] * self.inv_freq[None]
        cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]  # (positions, 1, head_dim / 2)
        for i, w in enumerate(self.layers):
            x = x + self._attention(self._rms(x, w.input_norm), w, row.keys[i], row.values[i], pos, cos, sin)
            h = self._rms(x, w.post_norm)
            x = x + w.down(_swiglu(*w.gate_up(h)))
        row.length = pos + x.shape[0]
        return x

    def step(self, tokens: list[int], rows: list[Row]) -> np.ndarray:
        """Feeds each row its token -> the next logits, one per row (len(rows), vocabulary)."""
        if any(r.length >= r.keys[0].shape[1] for r in rows):
            raise ValueError("a sequence is past the room its prefill made")
        x = self._embed(tokens)
        positions = np.array([r.length for r in rows], dtype=np.float32)
        angle = positions[:, None] * self.inv_freq[None]
        cos, sin = np.cos(angle)[:, None], np.sin(angle)[:, None]  # (rows, 1, head_dim / 2)
        n, hd, group = len(rows), self.head_dim, self.heads // self.kv_heads
        scale = np.float32(hd**-0.5)
        for i, w in enumerate(self.layers):
            q, k, v = w.qkv(self._rms(x, w.input_norm))
            q = self._rope(self._rms(q.reshape(n, self.heads, hd), w.q_norm), cos, sin)
            k = self._rope(self._rms(k.reshape(n, self.kv_heads, hd), w.k_norm), cos, sin)
            v = v.reshape(n, self.kv_heads, hd)
            out = np.empty((n, self.heads * hd), np.float32)
            for b, row in enumerate(rows):
                end = row.length + 1
                keys, values = row.keys[i], row.values[i]
                keys[:, row.length], values[:, row.length] = k[b], v[b]
                scores = np.matmul(q[b].reshape(self.kv_heads, group, hd), keys[:, :end].transpose(0, 2, 1)) * scale
                scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
                scores /= scores.sum(axis=-1, keepdims=True)
                out[b] = np.matmul(scores, values[:, :end]).reshape(-1)
            x = x + w.o(out)
            h = self._rms(x, w.post_norm)
            x = x + w.down(_swiglu(*w.gate_up(h)))
        for row in rows:
            row.length += 1
        return self.head(self._rms(x, self.norm))

    def _embed(self, tokens: list[int]) -> np.ndarray:
        """The tokens' embedding rows, float32 (len(tokens), hidden)."""
        if isinstance(self.embed, Linear):
            return self.embed.weight_t.T[tokens]
        return self.embed.rows(tokens)  # type: ignore[attr-defined]

    def _rms(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps))

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        half = self.head_dim // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def _attention(self, x: np.ndarray, w: _Layer, keys: np.ndarray, values: np.ndarray, pos: int, cos: np.ndarray,
                   sin: np.ndarray) -> np.ndarray:
        n, hd = x.shape[0], self.head_dim
        q, k, v = w.qkv(x)
        q = self._rope(self._rms(q.reshape(n, self.heads, hd), w.q_norm), cos, sin)
        k = self._rope(self._rms(k.reshape(n, self.kv_heads, hd), w.k_norm), cos, sin)
        keys[:, pos : pos + n] = k.transpose(1, 0, 2)
        values[:, pos : pos + n] = v.reshape(n, self.kv_heads, hd).transpose(1, 0, 2)
        group = self.heads // self.kv_heads  # query heads per key/value head, consecutive
        q *= np.float32(hd**-0.5)  # scaled here: n x head_dim numbers, not n x keys scores
        q = q.reshape(n, self.kv_heads, group, hd).transpose(1, 2, 0, 3)  # (kv, group, n, hd)
        out = np.empty((n, self.kv_heads, group, hd), np.float32)

        def head(kv: int) -> None:
            # A run of queries sees the keys up to its last position; of those, only the run's own (the square
            # from its first position on) need the causal mask, an added -inf above the diagonal.
            for start in range(0, n, QUERIES):
                stop = min(start + QUERIES, n)
                end = pos + stop
                scores = np.matmul(q[kv, :, start:stop], keys[kv, :end].T)  # (group, queries, end)
                if stop - start > 1:
                    scores[:, :, pos + start :] += _upper_mask(stop - start)
                scores -= scores.max(axis=-1, keepdims=True)
                np.exp(scores, out=scores)
                part = np.matmul(scores, values[kv, :end])
                part /= scores.sum(axis=-1, keepdims=True)  # normalised after the product: queries x head_dim
                out[start:stop, kv] = part.transpose(1, 0, 2)

        if n > 1:  # a prompt: the key/value heads shared among the cores (its exps are most of the time)
            def heads(first: int, last: int) -> None:
                for kv in range(first, last):
                    head(kv)

            by_share(heads, self.kv_heads, -(-self.kv_heads // CPU_THREADS))
        else:
            for kv in range(self.kv_heads):
                head(kv)
        return w.o(out.reshape(n, -1))


def greedy_numpy(decoder: NumpyDecoder, x: np.ndarray, stop: set[int], budget: int,
                 check: Callable[[], None] = lambda: None) -> tuple[list[int], str]:
    """model.greedy on the CPU: the prompt embeddings ``x`` (positions, hidden) through the numpy decoder."""
    row, logits = decoder.prefill(x, budget + 1, check)
    return greedy_steps(logits, lambda token: decoder.step([token], [row])[0], stop, budget, check)
