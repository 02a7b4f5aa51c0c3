"""Streaming Sortformer in MLX (NeMo's ``SortformerEncLabelModel``, v2/v2.1): the shared FastConformer
(engine/nemo: dw-striding pre-encode x8 in time, relative-position attention), a projection, a post-LN
Transformer without positions, and a sigmoid head giving each 80 ms frame four independent speaker probabilities.

Module and tensor names follow mlx-community's layout (checkpoint.py maps NeMo's onto them). Everything runs in
float32 whatever the checkpoint's dtype. The network is the same for every mode; only what the Conformer is given
changes: a whole recording's pre-encoded frames (offline), or ``[speaker cache | FIFO | chunk]`` (streaming).
"""

from __future__ import annotations

import math
from functools import cached_property

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import head_attention, sigmoid
from omnid.engine.nemo.cpu_fastconformer import linear
from omnid.engine.nemo.fastconformer import FastConformer, on_cpu
from omnid.engine.numpy_layers import through_layers
from omnid.engine.sortformer.checkpoint import Checkpoint, Dims
from omnid.engine.sortformer.cpu_layers import CpuTransformerLayer


class TransformerAttention(nn.Module):
    def __init__(self, d: Dims):
        super().__init__()
        f, self.heads = d.tf_d_model, d.tf_heads
        self.q_proj, self.v_proj, self.out_proj = nn.Linear(f, f), nn.Linear(f, f), nn.Linear(f, f)
        self.k_proj = nn.Linear(f, f, bias=d.k_bias)

    def __call__(self, x: mx.array) -> mx.array:
        b, t, f = x.shape
        h, dh = self.heads, f // self.heads
        # NeMo scales q and k each by dh^-1/4.
        scale = 1.0 / math.sqrt(math.sqrt(dh))
        q = (self.q_proj(x) * scale).reshape(b, t, h, dh)
        k = (self.k_proj(x) * scale).reshape(b, t, h, dh)
        v = self.v_proj(x).reshape(b, t, h, dh)
        return self.out_proj(head_attention(q, k, v, 1.0).reshape(b, t, f))


class TransformerLayer(nn.Module):
    """Post-LN: LN(x + MHA(x)), then LN(h + FF(h))."""

    def __init__(self, d: Dims):
        super().__init__()
        f = d.tf_d_model
        self.self_attn = TransformerAttention(d)
        self.self_attn_layer_norm = nn.LayerNorm(f)
        self.fc1 = nn.Linear(f, d.tf_inner)
        self.fc2 = nn.Linear(d.tf_inner, f)
        self.final_layer_norm = nn.LayerNorm(f)

    def __call__(self, x: mx.array) -> mx.array:
        x = self.self_attn_layer_norm(x + self.self_attn(x))
        return self.final_layer_norm(x + self.fc2(nn.relu(self.fc1(x))))


class TransformerEncoder(nn.Module):
    def __init__(self, d: Dims, positions: int = 0):
        super().__init__()
        self.layers = [TransformerLayer(d) for _ in range(d.tf_layers)]
        if positions:
            # Only in converted checkpoints (mlx-community); NeMo's Transformer has no positions (see load()).
            self.embed_positions = nn.Embedding(positions, d.tf_d_model)

    def __call__(self, x: mx.array) -> mx.array:
        if "embed_positions" in self:
            x = x + self.embed_positions.weight[: x.shape[1]]
        if on_cpu(x):
            return through_layers(x[0], self._cpu_layers)[None]
        for layer in self.layers:
            x = layer(x)
        return x

    @cached_property
    def _cpu_layers(self) -> list[CpuTransformerLayer]:
        return [CpuTransformerLayer(layer) for layer in self.layers]


class Heads(nn.Module):
    """NeMo's ``sortformer_modules``: the projection to the Transformer's width and the speaker head."""

    def __init__(self, d: Dims):
        super().__init__()
        f = d.tf_d_model
        self.encoder_proj = nn.Linear(d.fc_d_model, f)
        self.first_hidden_to_hidden = nn.Linear(f, f)
        self.single_hidden_to_spks = nn.Linear(f, d.n_spk)
        self.hidden_to_spks = nn.Linear(2 * f, d.n_spk)  # in every checkpoint, unused by inference

    def project(self, x: mx.array) -> mx.array:
        if on_cpu(x):
            mx.eval(x)
            return mx.array(linear(np.asarray(x)[0], self.encoder_proj))[None]
        return self.encoder_proj(x)

    def speakers(self, h: mx.array) -> mx.array:
        if on_cpu(h):
            mx.eval(h)
            hidden = linear(np.maximum(np.asarray(h)[0], 0.0), self.first_hidden_to_hidden, relu=True)
            return sigmoid(mx.array(linear(hidden, self.single_hidden_to_spks))[None])
        return sigmoid(self.single_hidden_to_spks(nn.relu(self.first_hidden_to_hidden(nn.relu(h)))))


class Sortformer(nn.Module):
    def __init__(self, d: Dims, positions: int = 0):
        super().__init__()
        self.dims = d
        self.fc_encoder = FastConformer(d.conformer)
        self.tf_encoder = TransformerEncoder(d, positions)
        self.sortformer_modules = Heads(d)

    @classmethod
    def from_checkpoint(cls, ckpt: Checkpoint) -> Sortformer:
        """Takes the checkpoint's tensors over one by one (emptying ``ckpt.weights``), so a .nemo's numpy copy is
        freed as the MLX one grows and the peak stays near one copy of the weights."""
        pos = ckpt.embed_positions
        model = cls(ckpt.dims, 0 if pos is None else pos.shape[0])
        tensors = []
        for name in list(ckpt.weights):
            tensor = ckpt.weights.pop(name)
            tensor = tensor if isinstance(tensor, mx.array) else mx.array(tensor)
            mx.eval(tensor)
            tensors.append((name, tensor))
        model.load_weights(tensors)
        mx.eval(model.parameters())
        return model

    @property
    def max_positions(self) -> int | None:
        """The Transformer's positional table size, when it has one: no sequence may be longer."""
        return self.tf_encoder.embed_positions.weight.shape[0] if "embed_positions" in self.tf_encoder else None

    def pre_encode(self, mel: np.ndarray) -> mx.array:
        """(T, n_mels) log-mel -> (ceil(T / 8), d_model) pre-encoded frames."""
        out = self.fc_encoder.subsampling(mx.array(mel)[None])[0]
        mx.eval(out)
        return out

    def forward(self, embeddings: mx.array) -> mx.array:
        """Pre-encoded frames (T, d_model) -> speaker probabilities (T, n_spk)."""
        x = self.fc_encoder.encode(embeddings[None])
        x = self.tf_encoder(self.sortformer_modules.project(x))
        probs = self.sortformer_modules.speakers(x)[0]
        mx.eval(probs)
        return probs
