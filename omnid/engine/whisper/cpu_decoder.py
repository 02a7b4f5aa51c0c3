"""Whisper's decoder steps on MLX's CPU device, in numpy (the shared engine/cpu_cross_decoder.py): one token for every
live sequence per call.

A decode step is tiny next to the encoder (a batch of a few rows through four layers), so on a CPU its time is not
arithmetic but overhead and memory: MLX built and dispatched a graph of ~150 operations to its CPU stream for each
token (tiny.en: 12.5 ms before the vocabulary projection), where numpy calls the same BLAS and element-wise loops
directly (about 5). The projection onto the vocabulary reads 80 MB of weights a step, which numpy's BLAS streams at
the memory's speed (3 ms against MLX's 7). Each product runs on one BLAS thread: the steps of many sessions' sequences
share the cores. The prompt's forward pass (``WindowDecoder.begin``) stays in MLX; Metal keeps batch.py's MLX
``DecodeBatch``.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol

import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_cross_decoder import CpuCrossDecoder, CrossLayer, KVCache, Row
from omnid.engine.cpu_math import gelu_rows
from omnid.engine.numpy_layers import Linear, Norm, QuantizedRows, as_numpy


class Sequence(Protocol):
    """A decoding.Decoding as a step sees it: the tokens it has so far."""

    sampled: list[int]


def cpu_text_decoder(decoder: nn.Module) -> CpuCrossDecoder:
    """A model.TextDecoder's step in numpy (typed by its base: model.py imports this module); the weights are views of
    the MLX arrays, read after ``freeze_projection``."""
    first = decoder.blocks[0].attn
    layers = []
    for block in decoder.blocks:
        cross, cross_ln = block.cross_attn, block.cross_attn_ln
        assert cross is not None and cross_ln is not None, "decoder blocks have cross-attention"
        layers.append(CrossLayer(
            Norm.of(block.attn_ln), Linear.of(block.attn.query), Linear.of(block.attn.key),
            Linear.of(block.attn.value), Linear.of(block.attn.out), Norm.of(cross_ln),
            Linear.of(cross.query), Linear.of(cross.out), Norm.of(block.mlp_ln), Linear.of(block.mlp1),
            Linear.of(block.mlp2),
        ))
    table = decoder.token_embedding
    # A quantized folder's table stays packed on the CPU (checkpoint.numpy_packed): rows dequantized as looked up,
    # the head the widened copy freeze_projection made.
    embedding = QuantizedRows(table) if isinstance(table, nn.QuantizedEmbedding) else as_numpy(table.weight)
    if decoder._projection is not None:
        projection = as_numpy(decoder._projection)
    else:
        assert isinstance(embedding, np.ndarray), "freeze_projection widens a packed table's head on the CPU"
        projection = embedding.T
    return CpuCrossDecoder(
        n_head=first.n_head, head_dim=first.query.weight.shape[0] // first.n_head, embedding=embedding,
        positions=as_numpy(decoder.positional_embedding), embedding_ln=None, layers=layers, ln=Norm.of(decoder.ln),
        head=Linear(projection, None), activation=gelu_rows)


class CpuDecodeBatch:
    """batch.py's DecodeBatch on the CPU: live sequences stepping together through the numpy step, each with its
    own caches (no padding: join and leave only add or drop a row)."""

    def __init__(self, decoder: CpuCrossDecoder):
        self.decoder = decoder
        self.keys: list[Any] = []
        self.sequences: list[Sequence] = []
        self.rows: list[Row] = []

    def __len__(self) -> int:
        return len(self.keys)

    def join(self, key: Any, sequence: Sequence, state: tuple[list[KVCache], list]) -> None:
        self_kv, cross = state
        self.keys.append(key)
        self.sequences.append(sequence)
        self.rows.append(self.decoder.row(self_kv, [kv for _, kv in cross]))

    def leave(self, keys: Collection[Any]) -> None:
        keep = [i for i, k in enumerate(self.keys) if k not in keys]
        self.keys = [self.keys[i] for i in keep]
        self.sequences = [self.sequences[i] for i in keep]
        self.rows = [self.rows[i] for i in keep]

    def step(self) -> np.ndarray:
        return self.decoder.step([s.sampled[-1] for s in self.sequences], self.rows)
