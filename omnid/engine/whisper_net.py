"""Whisper's network pieces shared by the kinds built on it (Radford et al., 2022, in MLX, under mlx-examples'
names): multi-head attention, the residual attention block, sinusoidal positions and the audio encoder (the
``whisper`` kind's, and MOSS-Transcribe-Diarize's audio tower), with transformers' names for them. On MLX's CPU
device the encoder's blocks run as engine/cpu_encoder.py's numpy layers."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property

import mlx.core as mx
import mlx.nn as nn

from omnid.engine.cpu_encoder import CpuEncoderLayer
from omnid.engine.cpu_math import attention, gelu
from omnid.engine.numpy_layers import through_layers

KVCache = tuple[mx.array, mx.array]


class MultiHeadAttention(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross: bool = False):
        super().__init__()
        self.n_head = n_head
        self.cross = cross
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def __call__(
        self,
        x: mx.array,
        xa: mx.array | None = None,
        mask: mx.array | None = None,
        kv_cache: KVCache | None = None,
    ) -> tuple[mx.array, KVCache]:
        q = self.split_heads(self.query(x))
        if not self.cross:
            k, v = self.split_heads(self.key(x)), self.split_heads(self.value(x))
            if kv_cache is not None:
                k = mx.concatenate([kv_cache[0], k], axis=2)
                v = mx.concatenate([kv_cache[1], v], axis=2)
        elif kv_cache is None:
            assert xa is not None, "cross-attention needs the audio features or their cached keys/values"
            k, v = self.split_heads(self.key(xa)), self.split_heads(self.value(xa))
        else:
            k, v = kv_cache
        n_batch, _, n_ctx, head = q.shape
        if mask is None and kv_cache is None and xa is None:  # the encoder's self-attention
            wv = attention(q, k, v, scale=head**-0.5)
        else:
            wv = mx.fast.scaled_dot_product_attention(q, k, v, scale=head**-0.5, mask=mask)
        return self.out(wv.transpose(0, 2, 1, 3).reshape(n_batch, n_ctx, self.n_head * head)), (k, v)

    def split_heads(self, t: mx.array) -> mx.array:
        """(batch, ctx, state) -> (batch, head, ctx, state/head). Caches keep this layout so that a decode step
        does not re-split 1500 cached cross-attention positions every token."""
        n_batch, n_ctx, n_state = t.shape
        return t.reshape(n_batch, n_ctx, self.n_head, n_state // self.n_head).transpose(0, 2, 1, 3)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, n_state: int, n_head: int, cross_attention: bool = False):
        super().__init__()
        self.attn = MultiHeadAttention(n_state, n_head)
        self.attn_ln = nn.LayerNorm(n_state)
        self.cross_attn = MultiHeadAttention(n_state, n_head, cross=True) if cross_attention else None
        self.cross_attn_ln = nn.LayerNorm(n_state) if cross_attention else None
        self.mlp1 = nn.Linear(n_state, 4 * n_state)
        self.mlp2 = nn.Linear(4 * n_state, n_state)
        self.mlp_ln = nn.LayerNorm(n_state)

    def __call__(
        self,
        x: mx.array,
        xa: mx.array | None = None,
        mask: mx.array | None = None,
        kv_cache: tuple[KVCache | None, KVCache | None] = (None, None),
        cross_mask: mx.array | None = None,
    ) -> tuple[mx.array, tuple[KVCache, KVCache | None]]:
        self_kv, cross_kv = kv_cache
        y, self_kv = self.attn(self.attn_ln(x), mask=mask, kv_cache=self_kv)
        x = x + y
        if self.cross_attn is not None and self.cross_attn_ln is not None:
            y, cross_kv = self.cross_attn(self.cross_attn_ln(x), xa, mask=cross_mask, kv_cache=cross_kv)
            x = x + y
        x = x + self.mlp2(gelu(self.mlp1(self.mlp_ln(x))))
        return x, (self_kv, cross_kv)


def sinusoids(length: int, channels: int, max_timescale: int = 10000) -> mx.array:
    log_timescale_increment = mx.log(mx.array(max_timescale, mx.float32)) / (channels // 2 - 1)
    inv_timescales = mx.exp(-log_timescale_increment * mx.arange(channels // 2, dtype=mx.float32))
    scaled_time = mx.arange(length, dtype=mx.float32)[:, None] * inv_timescales[None, :]
    return mx.concatenate([mx.sin(scaled_time), mx.cos(scaled_time)], axis=1)


class AudioEncoder(nn.Module):
    def __init__(self, n_mels: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.positional_embedding = sinusoids(n_ctx, n_state)
        self.blocks = [ResidualAttentionBlock(n_state, n_head) for _ in range(n_layer)]
        self.ln_post = nn.LayerNorm(n_state)

    def __call__(self, mel: mx.array, between_layers: Callable[[], None] | None = None) -> mx.array:
        """mel: (batch, frames, n_mels) with frames <= 2 * n_ctx. Fewer frames than a full window are
        encoded as they are (no padding to 30 s); the caller chooses."""
        x = self.front(mel)
        if mx.default_device() == mx.cpu:
            return self.ln_post(through_layers(x, self._cpu_layers, after_each=between_layers))
        for block in self.blocks:
            x, _ = block(x)
            if between_layers is not None:
                # Evaluating layer by layer lets a cancelled job stop inside the encoder.
                mx.eval(x)
                between_layers()
        return self.ln_post(x)

    def front(self, mel: mx.array) -> mx.array:
        """The convolutions and positions before the blocks."""
        x = gelu(self.conv1(mel))
        x = gelu(self.conv2(x))
        return x + self.positional_embedding[: x.shape[1]]

    @cached_property
    def _cpu_layers(self) -> list[CpuEncoderLayer]:
        """Built at the first CPU pass, after the weights are loaded (numpy views of them)."""
        return [CpuEncoderLayer(b.attn.n_head, b.attn_ln, b.attn.query, b.attn.key, b.attn.value, b.attn.out, b.mlp_ln,
                                b.mlp1, b.mlp2) for b in self.blocks]


# --- Hugging Face transformers' names -------------------------------------------------------------------------

_HF_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p), r)
    for p, r in [
        (r"^(?:model\.)?encoder\.layer_norm\.", "encoder.ln_post."),
        (r"^(?:model\.)?decoder\.layer_norm\.", "decoder.ln."),
        (r"^(?:model\.)?encoder\.embed_positions\.weight$", "encoder.positional_embedding"),
        (r"^(?:model\.)?decoder\.embed_positions\.weight$", "decoder.positional_embedding"),
        (r"^(?:model\.)?decoder\.embed_tokens\.", "decoder.token_embedding."),
        (r"^(?:model\.)?(encoder|decoder)\.conv", r"\1.conv"),
        (r"^(?:model\.)?(encoder|decoder)\.layers\.(\d+)\.", r"\1.blocks.\2."),
    ]
]
_HF_BLOCK = [
    ("self_attn_layer_norm.", "attn_ln."),
    ("encoder_attn_layer_norm.", "cross_attn_ln."),
    ("final_layer_norm.", "mlp_ln."),
    ("self_attn.", "attn."),
    ("encoder_attn.", "cross_attn."),
    ("q_proj.", "query."),
    ("k_proj.", "key."),
    ("v_proj.", "value."),
    ("out_proj.", "out."),
    ("fc1.", "mlp1."),
    ("fc2.", "mlp2."),
]


def hf_to_canonical(name: str) -> str:
    for pattern, repl in _HF_RULES:
        new, n = pattern.subn(repl, name)
        if n:
            name = new
            break
    if ".blocks." in name:
        for old, new in _HF_BLOCK:
            name = name.replace(old, new)
    return name
