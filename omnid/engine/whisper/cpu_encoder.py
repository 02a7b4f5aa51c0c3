"""Whisper's encoder layers on MLX's CPU device, in numpy over blocks of rows (as Sortformer's cpu_layers).

On the CPU, MLX runs each element-wise operation of a layer (layer norms, GELU, residual adds) over the whole
activation on one core, and the idle thread of its BLAS spins on after every product, on the core that the rest of
the daemon (the VAD, other sessions, the event loop) needs; under many realtime sessions the two BLAS threads took
most of a core. Here a layer is two passes over its rows, shared among cpu_math's threads: each block of rows gets
its layer norm and q/k/v products, then (after the attention, which needs all rows) its output product, residual
add, MLP with GELU and second residual add while it is in cache. Products use numpy's BLAS one thread per caller;
MLX's is not called. Weights are numpy views of the MLX arrays. model.py keeps its MLX layers for Metal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from omnid.engine.cpu_math import gelu_rows, head_attention_np
from omnid.engine.numpy_layers import Linear, Norm, blocks, scratch

if TYPE_CHECKING:
    from omnid.engine.whisper.model import ResidualAttentionBlock


class CpuEncoderLayer:
    """An encoder ResidualAttentionBlock on numpy arrays: updates the (batch, positions, state) stream in place."""

    def __init__(self, block: ResidualAttentionBlock):
        attn = block.attn
        self.n_head = attn.n_head
        self.attn_ln, self.mlp_ln = Norm.of(block.attn_ln), Norm.of(block.mlp_ln)
        self.query, self.key, self.value, self.out = (Linear.of(p) for p in (attn.query, attn.key, attn.value, attn.out))
        self.mlp1, self.mlp2 = Linear.of(block.mlp1), Linear.of(block.mlp2)

    def __call__(self, x: np.ndarray) -> None:
        b, t, d = x.shape
        rows = x.reshape(b * t, d)
        q, k, v = (np.empty((b * t, d), np.float32) for _ in range(3))

        def projections(start: int, stop: int) -> None:
            normed = scratch.get("normed", stop - start, d)
            normed[:] = rows[start:stop]
            self.attn_ln(normed)
            for proj, out in ((self.query, q), (self.key, k), (self.value, v)):
                proj(normed, out[start:stop])

        blocks(projections, b * t)
        h = self.n_head
        att = head_attention_np(q.reshape(b, t, h, -1), k.reshape(b, t, h, -1), v.reshape(b, t, h, -1),
                                (d // h) ** -0.5).reshape(b * t, d)
        inner = self.mlp1.weight_t.shape[1]

        def rest(start: int, stop: int) -> None:
            n, block = stop - start, rows[start:stop]
            block += self.out(att[start:stop], scratch.get("out", n, d))
            normed = scratch.get("normed", n, d)
            normed[:] = block
            hidden = self.mlp1(self.mlp_ln(normed), scratch.get("hidden", n, inner))
            gelu_rows(hidden, tuple(scratch.get(f"gelu{i}", n, inner) for i in range(4)))
            block += self.mlp2(hidden, scratch.get("out", n, d))

        blocks(rest, b * t)
