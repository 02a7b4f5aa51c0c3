"""Whisper (Radford et al., 2022) in MLX: encoder, decoder with KV cache, and the dims that describe them.

Names follow mlx-examples' Whisper so that an mlx-community checkpoint loads without renaming. Compute stays in
float32: on the CPU backend float16 matmuls are ~5x slower, and on Metal float32 costs little for these sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable

import mlx.core as mx
import mlx.nn as nn

from omnid.engine.cpu_cross_decoder import CpuCrossDecoder
from omnid.engine.cpu_encoder import CpuEncoderLayer
from omnid.engine.cpu_math import attention, gelu
from omnid.engine.numpy_layers import through_layers
from omnid.engine.quantization import widen_module
from omnid.engine.whisper.cpu_decoder import cpu_text_decoder

KVCache = tuple[mx.array, mx.array]


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
