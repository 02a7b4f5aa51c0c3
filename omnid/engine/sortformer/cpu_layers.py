"""Sortformer's Transformer layers on MLX's CPU device, in numpy over blocks of rows, as the shared FastConformer's
(engine/nemo/cpu_fastconformer.py, whose reasons hold here): each block of rows gets its products, residual adds
and layer norms while it is in cache; only the attention waits for all rows. model.py keeps its MLX layers for Metal
and for batches of more than one sequence.
"""

from __future__ import annotations

import math

import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import head_attention_np
from omnid.engine.numpy_layers import Linear, Norm, blocks, scratch


class CpuTransformerLayer:
    """model.TransformerLayer (post-LN) on numpy arrays: updates the (T, d_model) stream in place. (``layer`` is
    one, typed by its base, nn.Module: model.py imports this module and is not imported back.)"""

    def __init__(self, layer: nn.Module):
        att = layer.self_attn
        self.heads = att.heads
        self.q, self.k, self.v, self.o = (Linear.of(p) for p in (att.q_proj, att.k_proj, att.v_proj, att.out_proj))
        self.norm_att, self.norm_out = Norm.of(layer.self_attn_layer_norm), Norm.of(layer.final_layer_norm)
        self.fc1, self.fc2 = Linear.of(layer.fc1), Linear.of(layer.fc2)

    def __call__(self, x: np.ndarray) -> None:
        t, f = x.shape
        h = self.heads
        # NeMo scales q and k each by dh^-1/4.
        scale = np.float32(1.0 / math.sqrt(math.sqrt(f // h)))
        q, k, v = (np.empty((t, f), np.float32) for _ in range(3))

        def projections(start: int, stop: int) -> None:
            rows = x[start:stop]
            self.q(rows, q[start:stop])
            self.k(rows, k[start:stop])
            self.v(rows, v[start:stop])
            q[start:stop] *= scale
            k[start:stop] *= scale

        blocks(projections, t)
        att = head_attention_np(q.reshape(1, t, h, -1), k.reshape(1, t, h, -1), v.reshape(1, t, h, -1), 1.0)
        att = att.reshape(t, f)
        inner = self.fc1.weight_t.shape[1]

        def rest(start: int, stop: int) -> None:
            rows = x[start:stop]
            rows += self.o(att[start:stop], scratch.get("out", stop - start, f))
            self.norm_att(rows)
            hidden = self.fc1(rows, scratch.get("hidden", stop - start, inner))
            np.maximum(hidden, 0.0, out=hidden)
            rows += self.fc2(hidden, scratch.get("out", stop - start, f))
            self.norm_out(rows)

        blocks(rest, t)
