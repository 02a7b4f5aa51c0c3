"""NeMo's FastConformer encoder in MLX, Sortformer's and that of any NeMo kind built on it (NVIDIA's transducers use
the same network with their own sizes): the dw-striding convolutional pre-encode (x8 in time), then Conformer
layers with Transformer-XL relative-position attention (half-step feed-forwards around attention and a convolution
module). Module names follow mlx-community's layout, which the kinds' checkpoint readers map NeMo's names onto.
On MLX's CPU device one sequence runs in numpy (cpu_fastconformer.py, and cpu_math's convolutions); Metal and batches of
more than one sequence keep the MLX layers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import TypeVar

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import (
    conv2d_stride2_relu,
    depthwise_conv1d,
    relative_attention,
    separable_conv2d_stride2_relu,
    sigmoid,
    silu,
    silu_of_fresh,
)
from omnid.engine.nemo.cpu_cache_aware import CpuStreamingLayer
from omnid.engine.nemo.cpu_fastconformer import CpuConformerLayer, linear, relative_sinusoids, relative_table
from omnid.engine.numpy_layers import through_layers
from omnid.engine.quantization import Quantization

Tensor = TypeVar("Tensor", np.ndarray, mx.array)


@dataclass(frozen=True)
class ConformerDims:
    """A FastConformer's sizes, as each kind's config gives them."""

    n_mels: int
    d_model: int
    layers: int
    heads: int
    ff: int
    conv_kernel: int
    subsampling_factor: int
    subsampling_channels: int
    xscaling: bool
    bias: bool = True  # the Conformer layers' linear maps and convolutions (Parakeet's have none: use_bias false)
    # Cache-aware streaming encoders (Nemotron's): causal subsampling and depthwise convolutions, and a layer norm
    # in the convolution module where the others have a batch norm.
    causal: bool = False
    conv_norm: str = "batch_norm"

    @property
    def subsampled_mels(self) -> int:
        """Frequency bins after the three stride-2 convolutions (padding 1 | 1, or causal 2 | 1)."""
        return subsampled_length(self.n_mels, self.causal)


def subsampled_length(n: int, causal: bool) -> int:
    """Frames (or bins) after the three stride-2, kernel-3 convolutions: ceil(n / 8) with padding 1 on each side;
    with a causal one's 2 before and 1 after, floor(n / 2) + 1 each time."""
    for _ in range(3):
        n = n // 2 + 1 if causal else -(-n // 2)
    return n


class Subsampling(nn.Module):
    """Conv2d 3x3/2 -> ReLU -> (depthwise 3x3/2, pointwise 1x1, ReLU) x 2 over (time, frequency), then the
    channels x frequency features of each frame (channel-major, as NeMo flattens) -> d_model."""

    def __init__(self, d: ConformerDims):
        super().__init__()
        c = d.subsampling_channels
        self.causal = d.causal
        pad = 0 if d.causal else 1  # a causal one pads itself: 2 before, 1 after, in time and frequency
        self.layers_0 = nn.Conv2d(1, c, 3, stride=2, padding=pad)
        self.layers_2 = nn.Conv2d(c, c, 3, stride=2, padding=pad, groups=c)
        self.layers_3 = nn.Conv2d(c, c, 1)
        self.layers_5 = nn.Conv2d(c, c, 3, stride=2, padding=pad, groups=c)
        self.layers_6 = nn.Conv2d(c, c, 1)
        self.linear = nn.Linear(c * d.subsampled_mels, d.d_model)

    def __call__(self, mel: mx.array) -> mx.array:
        """mel (B, T, n_mels) -> (B, subsampled_length(T), d_model)."""
        if on_cpu(mel) and not self.causal:
            mx.eval(mel)
            return mx.array(self._cpu(np.asarray(mel)[0]))[None]
        x = nn.relu(self.layers_0(self._pad(mel[..., None])))
        x = nn.relu(self.layers_3(self.layers_2(self._pad(x))))
        x = nn.relu(self.layers_6(self.layers_5(self._pad(x))))
        b, t, f, c = x.shape
        return self.linear(x.transpose(0, 1, 3, 2).reshape(b, t, c * f))

    def _pad(self, x: mx.array) -> mx.array:
        """A causal convolution's input (B, T, F, C) padded 2 before and 1 after in time and frequency."""
        return mx.pad(x, [(0, 0), (2, 1), (2, 1), (0, 0)]) if self.causal else x

    def _cpu(self, mel: np.ndarray) -> np.ndarray:
        """The same in numpy on the pool's threads, over blocks of output frames: the first activation holds 64 x
        256 features for every other mel frame (200 MB for a minute of audio), so a long input is taken
        SUBSAMPLING_BLOCK output frames at a time, each block with SUBSAMPLING_HALO frames of real context on both
        sides (the zero padding of a block's edges reaches only its outermost output frame), and its edges dropped.
        The mel frames of a block start on a multiple of 8, so that its striding grid is the whole input's."""
        frames = -(-len(mel) // 8)
        if frames <= SUBSAMPLING_BLOCK + 2 * SUBSAMPLING_HALO:
            return self._cpu_block(mel)
        out = np.empty((frames, self.linear.weight.shape[0]), np.float32)
        for first in range(0, frames, SUBSAMPLING_BLOCK):
            last = min(first + SUBSAMPLING_BLOCK, frames)
            start = max(0, first - SUBSAMPLING_HALO)
            block = self._cpu_block(mel[8 * start : 8 * (last + SUBSAMPLING_HALO)])
            out[first:last] = block[first - start : last - start]
        return out

    def _cpu_block(self, mel: np.ndarray) -> np.ndarray:
        """The first convolution writes its ReLU straight into the first depthwise one's padded input, and the
        largest activation is never copied into or out of MLX."""
        x = conv2d_stride2_relu(mel, *_conv(self.layers_0))
        x = separable_conv2d_stride2_relu(x, _conv(self.layers_2), _pointwise(self.layers_3), padded=True)
        x = separable_conv2d_stride2_relu(x, _conv(self.layers_5), _pointwise(self.layers_6))
        t, f, c = x.shape
        return linear(x.transpose(0, 2, 1).reshape(t, c * f), self.linear)


# Output frames a block of the CPU subsampling computes (1024 mel frames: a 34 MB first activation), and the frames of
# context on each side of it.
SUBSAMPLING_BLOCK = 128
SUBSAMPLING_HALO = 2


def _conv(conv: nn.Conv2d) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(conv.weight, dtype=np.float32), np.asarray(conv.bias, dtype=np.float32)


def _pointwise(conv: nn.Conv2d) -> tuple[np.ndarray, np.ndarray]:
    """A 1x1 convolution's (C_in, C_out) weight (a transposed view) and bias."""
    weight = np.asarray(conv.weight, dtype=np.float32)
    return weight.reshape(len(weight), -1).T, np.asarray(conv.bias, dtype=np.float32)


def on_cpu(x: mx.array) -> bool:
    """One sequence on MLX's CPU device: cpu_layers' numpy layers run it."""
    return mx.default_device() == mx.cpu and x.shape[0] == 1


def chunked_mask(t: int, left: int, right: int) -> mx.array:
    """NeMo's chunked-limited attention over t frames as an additive mask: chunks of right + 1 frames, each query
    attending its own chunk and the left // (right + 1) chunks before it (0), nothing else (-inf)."""
    size = right + 1
    chunk = np.arange(t) // size
    apart = chunk[:, None] - chunk[None, :]
    allowed = (apart >= 0) & (apart <= left // size)
    return mx.array(np.where(allowed, 0.0, -np.inf).astype(np.float32))


@lru_cache(maxsize=8)
def relative_positions(length: int, d_model: int) -> mx.array:
    """Transformer-XL sinusoids for relative positions length-1 ... -(length-1), sin and cos interleaved, in
    float32 arithmetic as NeMo computes them."""
    return mx.array(relative_table(length, d_model))


class RelPositionAttention(nn.Module):
    def __init__(self, d: ConformerDims):
        super().__init__()
        m, self.heads = d.d_model, d.heads
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(m, m, bias=d.bias) for _ in range(4))
        self.relative_k_proj = nn.Linear(m, m, bias=False)
        self.bias_u = mx.zeros((d.heads, m // d.heads))
        self.bias_v = mx.zeros((d.heads, m // d.heads))

    def __call__(self, x: mx.array, pos: mx.array, mask: mx.array | None = None) -> mx.array:
        b, t, m = x.shape
        h, dk = self.heads, m // self.heads
        q, k, v = (proj(x).reshape(b, t, h, dk) for proj in (self.q_proj, self.k_proj, self.v_proj))
        p = self.relative_k_proj(pos).reshape(-1, h, dk)
        out = relative_attention(q, self.bias_u, self.bias_v, k, p, v, 1 / math.sqrt(dk), mask)
        return self.o_proj(out.reshape(b, t, m))


class FeedForward(nn.Module):
    def __init__(self, m: int, ff: int, bias: bool):
        super().__init__()
        self.linear1 = nn.Linear(m, ff, bias=bias)
        self.linear2 = nn.Linear(ff, m, bias=bias)

    def __call__(self, x: mx.array) -> mx.array:
        return self.linear2(silu_of_fresh(self.linear1(x)))


class BatchNorm(nn.Module):
    """Inference batch norm on running statistics."""

    def __init__(self, n: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = mx.ones((n,)), mx.zeros((n,))
        self.running_mean, self.running_var = mx.zeros((n,)), mx.ones((n,))

    def __call__(self, x: mx.array) -> mx.array:
        return (x - self.running_mean) * mx.rsqrt(self.running_var + self.eps) * self.weight + self.bias


class ConvModule(nn.Module):
    """Pointwise conv -> GLU -> depthwise conv (k9; 'same', or causal: k-1 frames before) -> batch norm (or a layer
    norm over the channels) -> SiLU -> pointwise conv."""

    def __init__(self, d: ConformerDims):
        super().__init__()
        m, k = d.d_model, d.conv_kernel
        self.causal = d.causal
        self.pointwise_conv1 = nn.Conv1d(m, 2 * m, 1, bias=d.bias)
        self.depthwise_conv = nn.Conv1d(m, m, k, padding=(k - 1) // 2, groups=m, bias=d.bias)
        self.norm = nn.LayerNorm(m) if d.conv_norm == "layer_norm" else BatchNorm(m)
        self.pointwise_conv2 = nn.Conv1d(m, m, 1, bias=d.bias)

    def __call__(self, x: mx.array) -> mx.array:
        a, gate = mx.split(self.pointwise_conv1(x), 2, axis=-1)
        conv = self.depthwise_conv
        x = depthwise_conv1d(a * sigmoid(gate), conv.weight, conv.bias if "bias" in conv else None, self.causal)
        return self.pointwise_conv2(silu(self.norm(x)))


class ConformerLayer(nn.Module):
    def __init__(self, d: ConformerDims):
        super().__init__()
        m = d.d_model
        self.norm_feed_forward1 = nn.LayerNorm(m)
        self.feed_forward1 = FeedForward(m, d.ff, d.bias)
        self.norm_self_att = nn.LayerNorm(m)
        self.self_attn = RelPositionAttention(d)
        self.norm_conv = nn.LayerNorm(m)
        self.conv = ConvModule(d)
        self.norm_feed_forward2 = nn.LayerNorm(m)
        self.feed_forward2 = FeedForward(m, d.ff, d.bias)
        self.norm_out = nn.LayerNorm(m)

    def __call__(self, x: mx.array, pos: mx.array, mask: mx.array | None = None) -> mx.array:
        x = x + 0.5 * self.feed_forward1(self.norm_feed_forward1(x))
        x = x + self.self_attn(self.norm_self_att(x), pos, mask)
        x = x + self.conv(self.norm_conv(x))
        x = x + 0.5 * self.feed_forward2(self.norm_feed_forward2(x))
        return self.norm_out(x)


class FastConformer(nn.Module):
    def __init__(self, d: ConformerDims):
        super().__init__()
        self.d = d
        self.subsampling = Subsampling(d)
        self.layers = [ConformerLayer(d) for _ in range(d.layers)]

    def encode(self, x: mx.array, context: tuple[int, int] | None = None,
               check: Callable[[], None] | None = None) -> mx.array:
        """Pre-encoded frames (B, T, d_model) -> encoded (B, T, d_model); with ``context`` (left, right) frames,
        NeMo's chunked-limited attention (a cache-aware encoder's offline pass). ``check`` runs between layers (a
        cancelled job stops there)."""
        if self.d.xscaling:
            x = x * math.sqrt(self.d.d_model)
        if on_cpu(x) and not self.d.causal and context is None:
            table = relative_table(x.shape[1], self.d.d_model)
            return through_layers(x[0], self._cpu_layers, *relative_sinusoids(table), after_each=check)[None]
        pos = relative_positions(x.shape[1], self.d.d_model)
        mask = None if context is None else chunked_mask(x.shape[1], *context)
        for layer in self.layers:
            x = layer(x, pos, mask)
            mx.eval(x)  # one layer's graph at a time: bounded temporaries
            if check is not None:
                check()
        return x

    @cached_property
    def _cpu_layers(self) -> list[CpuConformerLayer]:
        """Built at the first CPU pass, after the weights are loaded (numpy views of them)."""
        return [CpuConformerLayer(layer) for layer in self.layers]

    @cached_property
    def cpu_streaming_layers(self) -> list[CpuStreamingLayer]:
        """The cache-aware step's numpy layers (cache_aware.py), built at the first CPU step."""
        return [CpuStreamingLayer(layer) for layer in self.layers]


def encoder_shapes(d: ConformerDims, prefix: str) -> dict[str, tuple[int, ...]]:
    """Every tensor of a FastConformer under ``prefix``, with its shape in MLX layouts."""
    c, m = d.subsampling_channels, d.d_model
    shapes: dict[str, tuple[int, ...]] = {}
    sub = f"{prefix}.subsampling"
    shapes[f"{sub}.layers_0.weight"], shapes[f"{sub}.layers_0.bias"] = (c, 3, 3, 1), (c,)
    for i in (2, 5):  # depthwise 3x3, then pointwise 1x1
        shapes[f"{sub}.layers_{i}.weight"], shapes[f"{sub}.layers_{i}.bias"] = (c, 3, 3, 1), (c,)
        shapes[f"{sub}.layers_{i + 1}.weight"], shapes[f"{sub}.layers_{i + 1}.bias"] = (c, 1, 1, c), (c,)
    shapes[f"{sub}.linear.weight"], shapes[f"{sub}.linear.bias"] = (m, c * d.subsampled_mels), (m,)

    def weight(name: str, *shape: int, bias: bool = d.bias) -> None:
        shapes[f"{name}.weight"] = shape
        if bias:
            shapes[f"{name}.bias"] = (shape[0],)

    for i in range(d.layers):
        p = f"{prefix}.layers.{i}"
        for n in ("norm_feed_forward1", "norm_self_att", "norm_conv", "norm_feed_forward2", "norm_out"):
            weight(f"{p}.{n}", m, bias=True)
        for ff in ("feed_forward1", "feed_forward2"):
            weight(f"{p}.{ff}.linear1", d.ff, m)
            weight(f"{p}.{ff}.linear2", m, d.ff)
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            weight(f"{p}.self_attn.{proj}", m, m)
        weight(f"{p}.self_attn.relative_k_proj", m, m, bias=False)
        shapes[f"{p}.self_attn.bias_u"] = shapes[f"{p}.self_attn.bias_v"] = (d.heads, m // d.heads)
        weight(f"{p}.conv.pointwise_conv1", 2 * m, 1, m)
        weight(f"{p}.conv.depthwise_conv", m, d.conv_kernel, 1)
        for s in ("weight", "bias") if d.conv_norm == "layer_norm" else ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{p}.conv.norm.{s}"] = (m,)
        weight(f"{p}.conv.pointwise_conv2", m, 1, m)
    return shapes


# NeMo's names below ``encoder.`` (a .nemo's, and Parakeet's mlx-community folders') -> this module's.
_ENCODER_RENAMES = (
    (r"^pre_encode\.conv\.(\d+)\.", r"subsampling.layers_\1."),
    (r"^pre_encode\.out\.", "subsampling.linear."),
    (r"\.self_attn\.linear_q\.", ".self_attn.q_proj."),
    (r"\.self_attn\.linear_k\.", ".self_attn.k_proj."),
    (r"\.self_attn\.linear_v\.", ".self_attn.v_proj."),
    (r"\.self_attn\.linear_out\.", ".self_attn.o_proj."),
    (r"\.self_attn\.linear_pos\.", ".self_attn.relative_k_proj."),
    (r"\.self_attn\.pos_bias_u$", ".self_attn.bias_u"),
    (r"\.self_attn\.pos_bias_v$", ".self_attn.bias_v"),
    (r"\.conv\.batch_norm\.", ".conv.norm."),
)


def numpy_packed(module: str, q: Quantization) -> bool:
    """The packed modules a FastConformer keeps on MLX's CPU device (mlx_folder.keep_packed's ``on_cpu``): its
    layers' linear maps, which cpu_fastconformer.py and cpu_cache_aware.py multiply packed (numpy_layers.linear_map)
    in cpu_packed.py's modes. The subsampling's output map is widened: the streaming step runs it in MLX."""
    return module.startswith("encoder.layers.") and q.multiplied_packed_on_cpu


def encoder_name(name: str) -> str:
    """A NeMo encoder tensor's name (without its ``encoder.``) -> the FastConformer module's."""
    for pattern, repl in _ENCODER_RENAMES:
        name = re.sub(pattern, repl, name)
    return name


def mlx_layout(name: str, t: Tensor) -> Tensor:
    """A torch convolution weight in MLX's layout (numpy's or MLX's array, transposed as a view or lazily); anything
    else as it is."""
    if t.ndim == 4:  # Conv2d (O, I, kH, kW) -> (O, kH, kW, I)
        return _stored(t.transpose(0, 2, 3, 1))
    if t.ndim == 3 and name.endswith("weight"):  # Conv1d (O, I, K) -> (O, K, I)
        return _stored(t.transpose(0, 2, 1))
    return t


def _stored(t: Tensor) -> Tensor:
    """An MLX transpose stored in its own order, as the numpy one is once MLX copies it into an array."""
    return mx.contiguous(t) if isinstance(t, mx.array) else t
