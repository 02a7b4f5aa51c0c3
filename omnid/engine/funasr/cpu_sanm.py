"""The SAN-M encoder (sanm.py) on MLX's CPU device, in numpy over blocks of rows, as the Whisper and Qwen3-ASR
encoder layers run there (engine/cpu_encoder.py): products through numpy's BLAS, the softmax's exp vectorised where
MLX's CPU exp is a scalar loop (bench/sensevoice_speed.py measures the whole against funasr). Weights are numpy
views of the MLX arrays; Metal keeps the MLX layers.

A layer is two passes over its rows, shared among cpu_math's threads: each block gets its layer norm and the fused
q/k/v product; then, with every row's keys and values, the attention (heads shared among the threads); then each
block its output product, its rows of the FSMN memory of v, the residual (none in encoders0, whose input is
wider), and the feed-forward with its residual while the block is in cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from omnid.engine.cpu_math import head_attention_np, relu_rows
from omnid.engine.numpy_layers import Linear, Norm, blocks, scratch


@dataclass(frozen=True)
class CpuSanmLayer:
    """One SAN-M layer's weights as numpy views (sanm.py's SanmLayer.on_cpu builds it)."""

    residual: bool  # False in encoders0, whose input is wider than its output
    norm1: Norm
    qkv: Linear  # linear_q_k_v
    out: Linear  # linear_out
    fsmn: np.ndarray  # (d, kernel): the FSMN memory's depthwise kernel
    left: int  # zero frames before the memory's window
    heads: int
    d: int
    norm2: Norm
    w_1: Linear
    w_2: Linear

    def memory(self, v: np.ndarray, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of the FSMN memory of v (T, d): v plus its depthwise convolution over time, the frames
        outside [0, T) zeros (skipped: adding nothing). A block's rows read ``left`` frames before it and
        ``kernel - 1 - left`` after, so the blocks can be computed apart, on the threads, while in cache."""
        t = len(v)
        out = v[start:stop].copy()
        term = scratch.get("sanm_fsmn", stop - start, self.d)
        for j in range(self.fsmn.shape[1]):
            first, last = start + j - self.left, stop + j - self.left  # the frames tap j reads for these rows
            a, b = max(first, 0), min(last, t)
            if a < b:
                np.multiply(v[a:b], self.fsmn[:, j], out=term[: b - a])
                out[a - first : b - first] += term[: b - a]
        return out

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(T, in) -> (T, d): a new array (encoders0's width differs), or ``x`` updated in place."""
        t, width = x.shape
        d = self.d
        qkv = np.empty((t, 3 * d), np.float32)

        def projections(start: int, stop: int) -> None:
            normed = scratch.get("sanm_normed", stop - start, width)
            normed[:] = x[start:stop]
            self.qkv(self.norm1(normed), qkv[start:stop])

        blocks(projections, t)
        q, k, v = (qkv[:, i * d : (i + 1) * d].reshape(1, t, self.heads, -1) for i in range(3))
        att = head_attention_np(q, k, v, (d // self.heads) ** -0.5).reshape(t, d)
        v = qkv[:, 2 * d :]
        y = x if self.residual else np.zeros((t, d), np.float32)
        inner = self.w_1.weight_t.shape[1]

        def rest(start: int, stop: int) -> None:
            n, block = stop - start, y[start:stop]
            block += self.out(att[start:stop], scratch.get("sanm_out", n, d))
            block += self.memory(v, start, stop)
            normed = scratch.get("sanm_normed2", n, d)
            normed[:] = block
            hidden = self.w_1(self.norm2(normed), scratch.get("sanm_hidden", n, inner))
            relu_rows(hidden)
            block += self.w_2(hidden, scratch.get("sanm_out", n, d))

        blocks(rest, t)
        return y
