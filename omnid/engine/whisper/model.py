"""Whisper (Radford et al., 2022) in MLX: encoder, decoder with KV cache, and the dims that describe them.

Names follow mlx-examples' Whisper so that an mlx-community checkpoint loads without renaming. Compute stays in
float32: on the CPU backend float16 matmuls are ~5x slower, and on Metal float32 costs little for these sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from omnid.engine.cpu_cross_decoder import CpuCrossDecoder
from omnid.engine.cpu_math import gelu
from omnid.engine.quantization import widen_module
from omnid.engine.whisper.cpu_decoder import cpu_text_decoder
from omnid.engine.whisper_net import AudioEncoder, KVCache, MultiHeadAttention, ResidualAttentionBlock, sinusoids

__all__ = ["AudioEncoder", "KVCache", "ModelDims", "MultiHeadAttention", "ResidualAttentionBlock", "TextDecoder",
           "Whisper", "sinusoids"]



@dataclass(frozen=True)
class ModelDims:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @property
    def is_multilingual(self) -> bool:
        # English-only checkpoints have 51864 tokens; multilingual ones 51865 and up.
        return self.n_vocab >= 51865


class TextDecoder(nn.Module):
    def __init__(self, n_vocab: int, n_ctx: int, n_state: int, n_head: int, n_layer: int):
        super().__init__()
        self.token_embedding = nn.Embedding(n_vocab, n_state)
        self.positional_embedding = mx.zeros((n_ctx, n_state))
        self.blocks = [ResidualAttentionBlock(n_state, n_head, cross_attention=True) for _ in range(n_layer)]
        self.ln = nn.LayerNorm(n_state)
        self._projection: mx.array | None = None

    def __call__(
        self,
        tokens: mx.array,
        xa: mx.array | None,
        kv_cache: list[tuple[KVCache, KVCache | None]] | None = None,
        positions: mx.array | None = None,
        mask: mx.array | None = None,
        cross_mask: mx.array | None = None,
    ) -> tuple[mx.array, list[tuple[KVCache, KVCache | None]]]:
        """tokens: (batch, n_new). Returns hidden states (not logits) so callers project only the rows
        they need onto the vocabulary. A batch whose rows are at different lengths (one token each, caches
        left-padded to a common length) gives each row's ``positions`` and the additive ``mask`` hiding its
        padding; ``cross_mask`` hides the audio positions past a shorter row's window."""
        n_new = tokens.shape[-1]
        if positions is None:
            offset = kv_cache[0][0][0].shape[2] if kv_cache and kv_cache[0][0] is not None else 0
            x = self.token_embedding(tokens) + self.positional_embedding[offset : offset + n_new]
            if n_new > 1:
                mask = _causal_mask(n_new, offset)
        else:
            x = self.token_embedding(tokens) + self.positional_embedding[positions][:, None]
        caches: list[Any] = kv_cache or [(None, None)] * len(self.blocks)
        new_caches = []
        for block, cache in zip(self.blocks, caches):
            x, cache = block(x, xa, mask=mask, kv_cache=cache, cross_mask=cross_mask)
            new_caches.append(cache)
        return self.ln(x), new_caches

    def cross_attention(self, tokens: mx.array, xa: mx.array) -> list[mx.array]:
        """Each layer's cross-attention weights (batch, head, n_tokens, n_audio) for a whole token sequence, as
        word alignment needs them (the fast path never materialises them)."""
        x = self.token_embedding(tokens) + self.positional_embedding[: tokens.shape[-1]]
        mask = _causal_mask(tokens.shape[-1], 0)
        weights = []
        for block in self.blocks:
            y, _ = block.attn(block.attn_ln(x), mask=mask)
            x = x + y
            attn, norm = _cross(block)
            h = norm(x)
            q, k, v = (attn.split_heads(f(t)) for f, t in ((attn.query, h), (attn.key, xa), (attn.value, xa)))
            w = mx.softmax((q @ k.transpose(0, 1, 3, 2)) * q.shape[-1] ** -0.5, axis=-1)
            weights.append(w)
            n_batch, _, n_ctx, head = q.shape
            x = x + attn.out((w @ v).transpose(0, 2, 1, 3).reshape(n_batch, n_ctx, attn.n_head * head))
            x = x + block.mlp2(gelu(block.mlp1(block.mlp_ln(x))))
        return weights

    def logits(self, hidden: mx.array) -> mx.array:
        if self._projection is not None:
            return hidden @ self._projection
        return self.token_embedding.as_linear(hidden)

    def freeze_projection(self) -> None:
        """On the CPU keep a contiguous (state, vocab) copy of the tied embedding: MLX multiplies a row vector by
        it ~2x faster than by the transposed (vocab, state) view, and this matmul is a third of each step. A table
        kept packed (a quantized folder) is widened here for the head alone, as the loader would have widened it
        (in its scales' dtype, then float32); its lookups stay packed."""
        self._projection = None
        if mx.default_device().type == mx.cpu:
            table = self.token_embedding
            weight = widen_module(table) if isinstance(table, nn.QuantizedEmbedding) else table.weight
            self._projection = mx.contiguous(weight.T)
            mx.eval(self._projection)

    @cached_property
    def cpu_step(self) -> CpuCrossDecoder:
        """The one-token step in numpy, for MLX's CPU device (built at the first CPU decode, after the weights and
        ``freeze_projection``: it reads them in place)."""
        return cpu_text_decoder(self)

    def cross_kv(self, xa: mx.array) -> list[tuple[None, KVCache]]:
        """Cross-attention keys and values of one window, computed once and reused for every token."""
        attn = [_cross(b)[0] for b in self.blocks]
        # Contiguous, or every step's attention would copy the strided view again.
        return [(None, (mx.contiguous(a.split_heads(a.key(xa))), mx.contiguous(a.split_heads(a.value(xa))))) for a in attn]


def _causal_mask(n_new: int, offset: int) -> mx.array:
    rows = mx.arange(n_new)[:, None] + offset
    cols = mx.arange(offset + n_new)[None, :]
    return mx.where(cols > rows, mx.array(-mx.inf, mx.float32), mx.array(0.0, mx.float32))


class Whisper(nn.Module):
    def __init__(self, dims: ModelDims):
        super().__init__()
        self.dims = dims
        self.encoder = AudioEncoder(
            dims.n_mels, dims.n_audio_ctx, dims.n_audio_state, dims.n_audio_head, dims.n_audio_layer
        )
        self.decoder = TextDecoder(
            dims.n_vocab, dims.n_text_ctx, dims.n_text_state, dims.n_text_head, dims.n_text_layer
        )


def _cross(block: ResidualAttentionBlock) -> tuple[MultiHeadAttention, nn.LayerNorm]:
    """A decoder block's cross-attention and its norm (decoder blocks always have them)."""
    assert block.cross_attn is not None and block.cross_attn_ln is not None
    return block.cross_attn, block.cross_attn_ln
