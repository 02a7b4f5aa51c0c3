"""FunASR's LLM-ASR adaptor (funasr 1.4.16 ``models/llm_asr/adaptor.py``, registered as ``Transformer``): what maps an
audio encoder's frames into a language model's embedding width, as Fun-ASR-Nano uses it, in MLX under funasr's
module names (``audio_adaptor.*`` in its checkpoints).

Frames are grouped ``downsample_rate`` at a time (the sequence zero-padded to a multiple; Fun-ASR-Nano's rate is 1),
then ``linear2(relu(linear1(x)))`` from ``encoder_dim * rate`` through ``ffn_dim`` to ``llm_dim``, then ``n_layer``
of funasr's transformer ``EncoderLayer`` (pre-LN: ``x + MHA(norm1(x))``, ``x + FFN(norm2(x))``), with
``attention_heads`` (8) heads of q/k/v/out linear maps with biases, a feed-forward of ``llm_dim // 4`` units with
ReLU (funasr fixes that width), LayerNorm eps 1e-12, no positions. One sequence at a time: no padding mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

LAYER_NORM_EPS = 1e-12  # funasr's transformer LayerNorm


@dataclass(frozen=True)
class AdaptorDims:
    encoder_dim: int
    llm_dim: int
    ffn_dim: int
    layers: int = 2  # n_layer
    heads: int = 8  # attention_heads
    downsample: int = 1  # downsample_rate


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.linear_q, self.linear_k = nn.Linear(d, d), nn.Linear(d, d)
        self.linear_v, self.linear_out = nn.Linear(d, d), nn.Linear(d, d)

    def __call__(self, x: mx.array) -> mx.array:
        b, t, d = x.shape
        q, k, v = (lin(x).reshape(b, t, self.heads, -1).transpose(0, 2, 1, 3)
                   for lin in (self.linear_q, self.linear_k, self.linear_v))
        att = mx.fast.scaled_dot_product_attention(q, k, v, scale=(d // self.heads) ** -0.5)
        return self.linear_out(att.transpose(0, 2, 1, 3).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d, hidden), nn.Linear(hidden, d)

    def __call__(self, x: mx.array) -> mx.array:
        return self.w_2(nn.relu(self.w_1(x)))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.self_attn = Attention(d, heads)
        self.feed_forward = FeedForward(d, d // 4)
        self.norm1, self.norm2 = nn.LayerNorm(d, eps=LAYER_NORM_EPS), nn.LayerNorm(d, eps=LAYER_NORM_EPS)

    def __call__(self, x: mx.array) -> mx.array:
        x = x + self.self_attn(self.norm1(x))
        return x + self.feed_forward(self.norm2(x))


class Adaptor(nn.Module):
    def __init__(self, d: AdaptorDims):
        super().__init__()
        self.dims = d
        self.linear1 = nn.Linear(d.encoder_dim * d.downsample, d.ffn_dim)
        self.linear2 = nn.Linear(d.ffn_dim, d.llm_dim)
        self.blocks = [Block(d.llm_dim, d.heads) for _ in range(d.layers)]

    def __call__(self, x: mx.array) -> mx.array:
        """(B, T, encoder_dim) -> (B, ceil(T / downsample), llm_dim)."""
        b, t, c = x.shape
        k = self.dims.downsample
        chunks = -(-t // k)
        if chunks * k != t:
            x = mx.pad(x, [(0, 0), (0, chunks * k - t), (0, 0)])
        x = self.linear2(nn.relu(self.linear1(x.reshape(b, chunks, c * k))))
        for block in self.blocks:
            x = block(x)
        return x


def slots(frames: int) -> int:
    """How many of the adaptor's rows Fun-ASR-Nano puts into its prompt (``use_low_frame_rate``): funasr's
    fake_token_len, the stacked frames through three stride-2 steps (kernel 3, padding 1), ceil(n / 2) each; only
    the first rows are used."""
    n = frames
    for _ in range(3):
        n = 1 + (n - 1) // 2 if n > 0 else 0
    return n
