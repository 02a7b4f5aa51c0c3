"""The Qwen3 decoder's per-token step in numpy, for MLX's CPU backend.

A decode step is 28 layers of single-row matrix products: it reads every weight once (2.4 GB at the 0.6B size)
and is bound by memory bandwidth. MLX's CPU backend runs a (1 x K) @ (K x N) product at about 12 GB/s on the
machines omnid is tested on; OpenBLAS's gemv, through numpy, reads the same matrix at about 30 GB/s (measured in
bench/qwen3_asr_speed.py). So on the CPU the step runs here, on zero-copy numpy views of the model's own MLX
weights (no second copy in memory), with the KV cache the MLX prefill filled. On Metal the MLX step is used.
The arithmetic is the MLX step's (float32 RMSNorm, rotate-half RoPE, grouped-query attention, SwiGLU, tied head),
checked against it and against the official goldens by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from omnid.engine.qwen3_asr.model import KVCache, Qwen3ASR


def _view(a: mx.array) -> np.ndarray:
    view = np.asarray(a)
    assert view.dtype == np.float32 and view.flags["C_CONTIGUOUS"], "float32 contiguous weights expected"
    return view


@dataclass(frozen=True)
class _Layer:
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    o: np.ndarray
    q_norm: np.ndarray
    k_norm: np.ndarray
    gate: np.ndarray
    up: np.ndarray
    down: np.ndarray
    input_norm: np.ndarray
    post_norm: np.ndarray


class NumpyStep:
    """Greedy decoding steps after an MLX prefill: ``start`` takes over the prefilled caches, ``step`` feeds one
    token and returns the next position's logits."""

    def __init__(self, model: Qwen3ASR, eps: float, theta: float, heads: int, kv_heads: int, head_dim: int):
        t = model.text
        self.eps, self.heads, self.kv_heads, self.head_dim = eps, heads, kv_heads, head_dim
        self.layers = [
            _Layer(*(_view(w) for w in (
                layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight,
                layer.self_attn.o_proj.weight, layer.self_attn.q_norm.weight, layer.self_attn.k_norm.weight,
                layer.mlp.gate_proj.weight, layer.mlp.up_proj.weight, layer.mlp.down_proj.weight,
                layer.input_layernorm.weight, layer.post_attention_layernorm.weight)))
            for layer in t.layers
        ]
        self.embed = _view(t.embed_tokens.weight)
        self.norm = _view(t.norm.weight)
        self.head = self.embed if model.tied else _view(model.lm_head.weight)
        self.inv_freq = (1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)).astype(np.float32)
        self.keys: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.length = 0

    def start(self, caches: list[KVCache], room: int) -> None:
        """Copies the prefilled keys and values (a few MB) into buffers with ``room`` more positions."""
        self.length = caches[0].offset
        self.keys, self.values = [], []
        for cache in caches:
            assert cache.keys is not None and cache.values is not None
            for store, source in ((self.keys, cache.keys), (self.values, cache.values)):
                buf = np.empty((self.kv_heads, self.length + room, self.head_dim), np.float32)
                buf[:, : self.length] = np.asarray(source[0, :, : self.length])
                store.append(buf)

    def step(self, token: int) -> np.ndarray:
        pos = self.length
        x = self.embed[token].astype(np.float32)
        angle = pos * self.inv_freq
        cos, sin = np.cos(angle), np.sin(angle)
        for i, w in enumerate(self.layers):
            x = x + self._attention(self._rms(x, w.input_norm), w, i, pos, cos, sin)
            h = self._rms(x, w.post_norm)
            gate = w.gate @ h
            x = x + w.down @ (gate / (1.0 + np.exp(-gate)) * (w.up @ h))
        self.length = pos + 1
        return self.head @ self._rms(x, self.norm)

    def _rms(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return weight * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps))

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        half = self.head_dim // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def _attention(self, x: np.ndarray, w: _Layer, layer: int, pos: int, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        hd = self.head_dim
        q = self._rope(self._rms((w.q @ x).reshape(self.heads, hd), w.q_norm), cos, sin)
        k = self._rope(self._rms((w.k @ x).reshape(self.kv_heads, hd), w.k_norm), cos, sin)
        keys, values = self.keys[layer], self.values[layer]
        keys[:, pos] = k
        values[:, pos] = (w.v @ x).reshape(self.kv_heads, hd)
        group = self.heads // self.kv_heads  # query heads per key/value head, consecutive
        q = q.reshape(self.kv_heads, group, hd)
        scores = np.matmul(q, keys[:, : pos + 1].transpose(0, 2, 1)) * hd**-0.5  # (kv, group, positions)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out = np.matmul(scores / scores.sum(axis=-1, keepdims=True), values[:, : pos + 1])
        return w.o @ out.reshape(-1)
