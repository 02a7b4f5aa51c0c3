"""The shared FastConformer's cache-aware streaming step (NeMo's ``cache_aware_stream_step``, Nemotron's encoder):
each chunk of new frames is encoded once, against fixed-size caches of what came before.

Per layer a stream keeps the attention's keys and values (projected: NeMo caches the normed input and projects all
``left`` cached frames again at every chunk, the same numbers for several times the work) for the last ``left``
frames and the convolution module's last kernel-1 GLU outputs; and how many of the attention slots hold real frames
(a fresh stream's are zeros, masked out). A chunk's frames attend to the valid cached frames and to each other (a chunk is
at most right + 1 frames: one chunk of the chunked-limited mask, with the left chunks in the cache), with
relative positions counted from the oldest slot; the causal depthwise convolution reads its cache before the
chunk. The caches then keep the newest frames. Nothing grows with the length of the stream.

The caller gives the subsampling's input: the chunk's mel frames after the last frames of the previous chunk (its
pre-encode cache), and how many of the subsampled frames those extra frames produced (dropped here).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import mlx.core as mx
import numpy as np

from omnid.engine.cpu_math import depthwise_conv1d, silu
from omnid.engine.nemo.fastconformer import ConformerLayer, FastConformer, relative_positions


@dataclass(frozen=True)
class EncoderCache:
    """One stream's encoder state: a few fixed-size arrays."""

    keys: mx.array | np.ndarray  # (layers, left, d_model): each layer's attention keys of the last frames
    values: mx.array | np.ndarray  # (layers, left, d_model): and their values
    time: mx.array | np.ndarray  # (layers, kernel - 1, d_model): each layer's last GLU outputs (numpy on the CPU)
    filled: int  # attention slots holding real frames (the newest ones), at most left

    @classmethod
    def initial(cls, encoder: FastConformer, left: int) -> EncoderCache:
        d = encoder.d
        kv = mx.zeros((d.layers, left, d.d_model))
        return cls(kv, kv, mx.zeros((d.layers, d.conv_kernel - 1, d.d_model)), 0)


def stream_step(encoder: FastConformer, mel: mx.array, cache: EncoderCache, context: tuple[int, int] | None,
                first: int, last: int | None = None) -> tuple[mx.array, EncoderCache]:
    """mel (frames, n_mels): the subsampling's input for one chunk; its subsampled frames ``first`` to ``last``
    (the end if None) are the chunk's, those before belong to the previous chunk. With ``context`` NeMo's
    chunked-limited mask applies within the chunk; without, every chunk frame attends to the whole chunk and the
    cache (the reference server's rule; the same wherever a chunk is no longer than right + 1 frames). -> the
    chunk's encoded frames (T, d_model) and the new cache."""
    (encoded, out), = stream_steps(encoder, mel[None], [cache], context, first, last)
    return encoded, out


def stream_steps(encoder: FastConformer, mels: mx.array, caches: list[EncoderCache],
                 context: tuple[int, int] | None, first: int, last: int | None = None,
                 between: Callable[[], None] | None = None) -> list[tuple[mx.array, EncoderCache]]:
    """``stream_step`` for several streams at once, one row each (mels (B, frames, n_mels), the same chunk shape),
    each with its own caches: one call per layer for all of them. ``between`` is called before each layer (a batch
    may stop there)."""
    x = encoder.subsampling(mels)[:, first:last]
    if encoder.d.xscaling:
        x = x * math.sqrt(encoder.d.d_model)
    t, left = x.shape[1], caches[0].keys.shape[1]
    masks = np.stack([_mask(t, left, c.filled, context) for c in caches])  # (B, t, left + t)
    stack: Callable[..., Any]
    convert: Callable[[Any], Any]
    h: Any = x  # the chunks' frames through the layers
    if mx.default_device() == mx.cpu:  # the layers in numpy (cpu_cache_aware.py); the caches stay numpy arrays
        h, stack, convert = np.array(x), np.stack, np.asarray
        cpu = encoder.cpu_streaming_layers

        def step(i: int, x: Any, keys: Any, values: Any, time: Any) -> tuple[Any, Any, Any, Any]:
            return x, *cpu[i](x, keys, values, time, masks)  # x is updated in place
    else:
        mask, stack, convert = mx.array(masks)[:, None], cast(Callable[..., Any], mx.stack), mx.array
        pos = relative_positions(left + t, encoder.d.d_model)

        def step(i: int, x: Any, keys: Any, values: Any, time: Any) -> tuple[Any, Any, Any, Any]:
            return _layer(encoder.layers[i], x, pos, mask, keys, values, time)
    keys, values, time = (stack([convert(getattr(c, name)) for c in caches], axis=1)  # (layers, B, ...)
                          for name in ("keys", "values", "time"))
    new: list[list[Any]] = [[], [], []]
    for i in range(len(encoder.layers)):
        if between is not None:
            between()
        h, *caches_i = step(i, h, keys[i], values[i], time[i])
        for kept, c in zip(new, caches_i):
            kept.append(c)
    new_keys, new_values, new_time = (stack(kept, axis=1) for kept in new)  # (B, layers, ...)
    if isinstance(h, mx.array):
        mx.eval(h, new_keys, new_values, new_time)
    return [(mx.array(h[b]), EncoderCache(new_keys[b], new_values[b], new_time[b], min(c.filled + t, left)))
            for b, c in enumerate(caches)]


def _mask(t: int, left: int, filled: int, context: tuple[int, int] | None) -> np.ndarray:
    """(t, left + t) additive: the empty cache slots masked, and with ``context`` the chunked-limited mask on the
    [cache | chunk] axis."""
    keys = np.arange(left + t)
    allowed = np.broadcast_to((keys >= left - filled)[None, :], (t, left + t))
    if context is not None:
        size = context[1] + 1
        apart = (left + np.arange(t))[:, None] // size - keys[None, :] // size
        allowed = allowed & (apart >= 0) & (apart <= context[0] // size)
    return np.where(allowed, np.float32(0.0), np.float32(-np.inf)).astype(np.float32)


def _layer(layer: ConformerLayer, x: mx.array, pos: mx.array, mask: mx.array, keys: mx.array, values: mx.array,
           time: mx.array) -> tuple[mx.array, mx.array, mx.array, mx.array]:
    """One Conformer layer over a batch of chunks (B, t, d_model) with their caches -> output, new keys, values and
    conv cache."""
    x = x + 0.5 * layer.feed_forward1(layer.norm_feed_forward1(x))
    normed = layer.norm_self_att(x)
    att = layer.self_attn
    keys = mx.concatenate([keys, att.k_proj(normed)], axis=1)
    values = mx.concatenate([values, att.v_proj(normed)], axis=1)
    x = x + _attention(layer, normed, keys, values, pos, mask)
    conv = layer.conv
    a, gate = mx.split(conv.pointwise_conv1(layer.norm_conv(x)), 2, axis=-1)
    glu = mx.concatenate([time, a * mx.sigmoid(gate)], axis=1)
    depthwise, t = conv.depthwise_conv, x.shape[1]
    # The causal convolution over [cache | chunk]: its last t outputs read the cache where the zeros were.
    y = depthwise_conv1d(glu, depthwise.weight, depthwise.bias if "bias" in depthwise else None, True)[:, -t:]
    x = x + conv.pointwise_conv2(silu(conv.norm(y)))
    x = x + 0.5 * layer.feed_forward2(layer.norm_feed_forward2(x))
    return layer.norm_out(x), keys[:, t:], values[:, t:], glu[:, -time.shape[1] :]


def _attention(layer: ConformerLayer, queries: mx.array, keys: mx.array, values: mx.array, pos: mx.array,
               mask: mx.array) -> mx.array:
    """Relative-position attention of t queries (a chunk) over n = left + t projected keys and values ([cache |
    chunk]), per row of the batch: query i sits at position left + i, so its score with key j uses relative
    position left + i - j (``pos`` holds n-1 ... -(n-1))."""
    att = layer.self_attn
    b, t, m = queries.shape
    n, h = keys.shape[1], att.heads
    dk = m // h
    q = att.q_proj(queries).reshape(b, t, h, dk).transpose(0, 2, 1, 3)
    k = keys.reshape(b, n, h, dk).transpose(0, 2, 1, 3)
    v = values.reshape(b, n, h, dk).transpose(0, 2, 1, 3)
    p = att.relative_k_proj(pos).reshape(-1, h, dk).transpose(1, 0, 2)
    by_key = (q + att.bias_u[:, None]) @ k.transpose(0, 1, 3, 2)
    by_position = (q + att.bias_v[:, None]) @ p.transpose(0, 2, 1)  # (b, h, t, 2n - 1)
    column = (t - 1) + mx.arange(n)[None, :] - mx.arange(t)[:, None]  # row of pos for (query i, key j)
    shifted = mx.take_along_axis(by_position, mx.broadcast_to(column[None, None], (b, h, t, n)), axis=-1)
    weights = mx.softmax((by_key + shifted) * (1 / math.sqrt(dk)) + mask, axis=-1)
    return att.o_proj((weights @ v).transpose(0, 2, 1, 3).reshape(b, t, m))
