"""The SAN-M encoder of FunASR's SenseVoice (``SenseVoiceEncoderSmall``, funasr 1.4.16
``models/sense_voice/model.py``) in MLX, under funasr's module names (``encoder.*`` in its checkpoints).

The input (stacked, normalised features, 560 wide) is scaled by sqrt(d_model) and given sinusoidal positions over
its own width (positions 1 ... T; sines then cosines, not interleaved; timescales 10000^(k / (width/2 - 1))). Then
``encoders0`` (one layer from the input width to d_model, with no residual around its attention), ``encoders``
(num_blocks - 1 layers), ``after_norm``, ``tp_encoders`` (tp_blocks layers), ``tp_norm``. A layer is pre-LN:
``x = x + SANM(norm1(x))`` (only ``SANM(norm1(x))`` where the widths differ), ``x = x + w_2(relu(w_1(norm2(x))))``.

SAN-M attention: ``q, k, v = split(linear_q_k_v(y))``; multi-head softmax(q k^T / sqrt(d_k)) v through
``linear_out``, plus the FSMN memory of v: a depthwise convolution of kernel ``kernel_size`` (no bias) over time,
zero-padded (kernel - 1) // 2 + sanm_shift frames before and the rest after, plus v itself. LayerNorm eps 1e-5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import head_attention
from omnid.engine.funasr.cpu_sanm import CpuSanmLayer
from omnid.engine.numpy_layers import Linear, Norm, as_numpy


@dataclass(frozen=True)
class SanmDims:
    input_size: int = 560  # the stacked features' width
    d_model: int = 512  # output_size
    heads: int = 4  # attention_heads
    ffn: int = 2048  # linear_units
    blocks: int = 50  # num_blocks: encoders0's one layer and encoders' blocks - 1
    tp_blocks: int = 20
    kernel: int = 11  # kernel_size of the FSMN memory
    shift: int = 0  # sanm_shfit: extra frames of left padding


def positions(frames: int, width: int) -> np.ndarray:
    """funasr's SinusoidalPositionEncoder for positions 1 ... frames, in float32 as it computes them."""
    step = np.float32(math.log(10000.0)) / np.float32(width / 2 - 1)
    inv = np.exp(np.arange(width // 2, dtype=np.float32) * -step)
    scaled = np.arange(1, frames + 1, dtype=np.float32)[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)


class SanmAttention(nn.Module):
    def __init__(self, in_size: int, d: SanmDims):
        super().__init__()
        self.heads, self.d_model = d.heads, d.d_model
        self.linear_q_k_v = nn.Linear(in_size, 3 * d.d_model)
        self.linear_out = nn.Linear(d.d_model, d.d_model)
        self.fsmn_block = nn.Module()
        self.fsmn_block.weight = mx.zeros((d.d_model, d.kernel))  # funasr's (d, 1, kernel) without its middle axis
        self.left = (d.kernel - 1) // 2 + d.shift

    def memory(self, v: mx.array) -> mx.array:
        """The FSMN memory of v (B, T, d): its depthwise convolution over time, plus v."""
        kernel = self.fsmn_block.weight.shape[1]
        t = v.shape[1]
        padded = mx.pad(v, [(0, 0), (self.left, kernel - 1 - self.left), (0, 0)])
        out = v
        for j in range(kernel):
            out = out + padded[:, j : j + t] * self.fsmn_block.weight[:, j]
        return out

    def __call__(self, y: mx.array) -> mx.array:
        b, t, _ = y.shape
        q, k, v = mx.split(self.linear_q_k_v(y), 3, axis=-1)
        qs, ks, vs = (a.reshape(b, t, self.heads, -1) for a in (q, k, v))
        # cpu_math's: MLX's fused kernel on Metal; on the CPU numpy's softmax (MLX's CPU exp is a scalar loop)
        att = head_attention(qs, ks, vs, (self.d_model // self.heads) ** -0.5)
        return self.linear_out(att.reshape(b, t, -1)) + self.memory(v)


class FeedForward(nn.Module):
    def __init__(self, d: SanmDims):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d.d_model, d.ffn), nn.Linear(d.ffn, d.d_model)

    def __call__(self, x: mx.array) -> mx.array:
        return self.w_2(nn.relu(self.w_1(x)))


class SanmLayer(nn.Module):
    def __init__(self, in_size: int, d: SanmDims):
        super().__init__()
        self.residual = in_size == d.d_model
        self.norm1, self.norm2 = nn.LayerNorm(in_size, eps=1e-5), nn.LayerNorm(d.d_model, eps=1e-5)
        self.self_attn = SanmAttention(in_size, d)
        self.feed_forward = FeedForward(d)

    def __call__(self, x: mx.array) -> mx.array:
        a = self.self_attn(self.norm1(x))
        x = x + a if self.residual else a
        return x + self.feed_forward(self.norm2(x))

    def on_cpu(self) -> CpuSanmLayer:
        """The layer's weights as numpy views, for the CPU path (cpu_sanm.py)."""
        a = self.self_attn
        return CpuSanmLayer(self.residual, Norm.of(self.norm1), Linear.of(a.linear_q_k_v), Linear.of(a.linear_out),
                            as_numpy(a.fsmn_block.weight), a.left, a.heads, a.d_model, Norm.of(self.norm2),
                            Linear.of(self.feed_forward.w_1), Linear.of(self.feed_forward.w_2))


class SanmEncoder(nn.Module):
    def __init__(self, d: SanmDims):
        super().__init__()
        self.dims = d
        self.encoders0 = [SanmLayer(d.input_size, d)]
        self.encoders = [SanmLayer(d.d_model, d) for _ in range(d.blocks - 1)]
        self.after_norm = nn.LayerNorm(d.d_model, eps=1e-5)
        self.tp_encoders = [SanmLayer(d.d_model, d) for _ in range(d.tp_blocks)]
        self.tp_norm = nn.LayerNorm(d.d_model, eps=1e-5)

    def __call__(self, x: mx.array) -> mx.array:
        """(B, T, input_size) -> (B, T, d_model)."""
        return self._on_cpu(x) if mx.default_device() == mx.cpu else self.in_mlx(x)

    def in_mlx(self, x: mx.array) -> mx.array:
        """The MLX layers (Metal's path; on the CPU the numpy layers give the same within rounding)."""
        x = x * (self.dims.d_model**0.5) + mx.array(positions(x.shape[1], x.shape[2]))
        for layer in [*self.encoders0, *self.encoders]:
            x = layer(x)
        x = self.after_norm(x)
        for layer in self.tp_encoders:
            x = layer(x)
        return self.tp_norm(x)

    @cached_property
    def _cpu(self) -> tuple[list[CpuSanmLayer], Norm, list[CpuSanmLayer], Norm]:
        """The numpy layers (cpu_sanm.py), built at the first CPU pass, after the weights are loaded."""
        return ([layer.on_cpu() for layer in [*self.encoders0, *self.encoders]], Norm.of(self.after_norm),
                [layer.on_cpu() for layer in self.tp_encoders], Norm.of(self.tp_norm))

    def _on_cpu(self, x: mx.array) -> mx.array:
        main, after_norm, tp, tp_norm = self._cpu
        mx.eval(x)
        out = []
        for row in np.array(x, np.float32):
            h = row * np.float32(self.dims.d_model**0.5) + positions(*row.shape)
            for layer in main:
                h = layer(h)
            after_norm(h)
            for layer in tp:
                h = layer(h)
            out.append(tp_norm(h))
        return mx.array(np.stack(out))


def mlx_weights(state: dict[str, np.ndarray], prefix: str = "encoder.") -> list[tuple[str, mx.array]]:
    """funasr's encoder tensors (PyTorch layouts) under ``prefix`` -> this module's names and layouts: the FSMN
    blocks' (d, 1, kernel) as (d, kernel)."""
    out = []
    for name, t in state.items():
        if not name.startswith(prefix):
            continue
        ours = name.removeprefix(prefix)
        if ours.endswith("fsmn_block.weight"):
            t = t[:, 0, :]
        out.append((ours, mx.array(np.asarray(t, np.float32))))
    return out


def shapes(d: SanmDims, prefix: str = "encoder.") -> dict[str, tuple[int, ...]]:
    """Every tensor of funasr's encoder state dict under ``prefix``, with its PyTorch shape."""
    out: dict[str, tuple[int, ...]] = {}
    layers = [("encoders0.0", d.input_size)] + [(f"encoders.{i}", d.d_model) for i in range(d.blocks - 1)]
    layers += [(f"tp_encoders.{i}", d.d_model) for i in range(d.tp_blocks)]
    for name, width in layers:
        p = f"{prefix}{name}."
        out |= {p + "self_attn.linear_q_k_v.weight": (3 * d.d_model, width), p + "self_attn.linear_q_k_v.bias": (3 * d.d_model,),
                p + "self_attn.linear_out.weight": (d.d_model, d.d_model), p + "self_attn.linear_out.bias": (d.d_model,),
                p + "self_attn.fsmn_block.weight": (d.d_model, 1, d.kernel),
                p + "feed_forward.w_1.weight": (d.ffn, d.d_model), p + "feed_forward.w_1.bias": (d.ffn,),
                p + "feed_forward.w_2.weight": (d.d_model, d.ffn), p + "feed_forward.w_2.bias": (d.d_model,),
                p + "norm1.weight": (width,), p + "norm1.bias": (width,), p + "norm2.weight": (d.d_model,),
                p + "norm2.bias": (d.d_model,)}
    for norm in ("after_norm", "tp_norm"):
        out |= {f"{prefix}{norm}.weight": (d.d_model,), f"{prefix}{norm}.bias": (d.d_model,)}
    return out
