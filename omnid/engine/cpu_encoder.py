"""A pre-norm transformer encoder layer (Whisper's encoder blocks, Qwen3-ASR's audio encoder layers) on MLX's CPU
device, in numpy over blocks of rows (as Sortformer's cpu_layers).

On the CPU, MLX runs each element-wise operation of a layer (layer norms, GELU, residual adds) over the whole
activation on one core, and the idle thread of its BLAS spins on after every product, on the core that the rest of
the daemon (the VAD, other sessions, the event loop) needs; under many realtime sessions the two BLAS threads took
most of a core. Here a layer is two passes over its rows, shared among cpu_math's threads: each block of rows gets
its layer norm and q/k/v products, then (after the attention, which needs all rows) its output product, residual
add, MLP with GELU and second residual add while it is in cache. Products use numpy's BLAS one thread per caller;
MLX's is not called. Weights are numpy views of the MLX arrays. Each model keeps its MLX layers for Metal.

A layer kept packed (a quantized folder, cpu_packed.py) runs each product over all its rows, the output columns
shared among the threads: a packed product over many rows unpacks its weight for the BLAS, which a thread with a
block of rows would do for all of it, and a thread with a share of the columns does for its share alone.
"""

from __future__ import annotations

import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import CPU_THREADS, by_share, gelu_rows, head_attention_np
from omnid.engine.numpy_layers import Linear, Norm, all_rows, any_packed, blocks, by_columns, linear_map, scratch

# Below this many rows per thread the products are split by columns instead (measured with 128-row blocks).
FEW_ROWS = 128

class CpuEncoderLayer:
    """x + attention(norm(x)), then x + mlp2(gelu(mlp1(norm(x)))) on numpy arrays, updating the (batch, positions,
    state) stream in place. Attention has no mask: each batch row attends over its own positions, or, with
    ``window``, each run of ``window`` consecutive positions of a row over itself (the last run may be shorter), as
    Qwen3-ASR's windowed audio encoder does; its products then run over all the windows' rows at once."""

    def __init__(self, n_head: int, attn_ln: nn.LayerNorm, query: nn.Module, key: nn.Module, value: nn.Module,
                 out: nn.Module, mlp_ln: nn.LayerNorm, mlp1: nn.Module, mlp2: nn.Module, window: int | None = None):
        self.n_head = n_head
        self.window = window
        self.attn_ln, self.mlp_ln = Norm.of(attn_ln), Norm.of(mlp_ln)
        self.query, self.key, self.value, self.out = (linear_map(p) for p in (query, key, value, out))
        self.mlp1, self.mlp2 = linear_map(mlp1), linear_map(mlp2)
        self.packed = any_packed((self.query, self.key, self.value, self.out, self.mlp1, self.mlp2))

    def __call__(self, x: np.ndarray) -> None:
        b, t, d = x.shape
        rows = x.reshape(b * t, d)
        if self.packed:
            self._packed(rows, b, t)
            return
        few = b * t < CPU_THREADS * FEW_ROWS
        q, k, v = (np.empty((b * t, d), np.float32) for _ in range(3))

        def projections(start: int, stop: int) -> None:
            normed = scratch.get("normed", stop - start, d)
            normed[:] = rows[start:stop]
            self.attn_ln(normed)
            for proj, out in ((self.query, q), (self.key, k), (self.value, v)):
                proj(normed, out[start:stop])

        if few:
            normed = self.attn_ln(rows.copy())
            by_columns(normed, ((self.query, q), (self.key, k), (self.value, v)))
        else:
            blocks(projections, b * t)
        att = self._attention(q, k, v, b, t)
        if few:
            self._rest_by_columns(rows, att)
            return
        inner = self.mlp1.shape[1]

        def rest(start: int, stop: int) -> None:
            n, block = stop - start, rows[start:stop]
            block += self.out(att[start:stop], scratch.get("out", n, d))
            normed = scratch.get("normed", n, d)
            normed[:] = block
            hidden = self.mlp1(self.mlp_ln(normed), scratch.get("hidden", n, inner))
            gelu_rows(hidden, tuple(scratch.get(f"gelu{i}", n, inner) for i in range(4)))
            block += self.mlp2(hidden, scratch.get("out", n, d))

        blocks(rest, b * t)

    def _attention(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, b: int, t: int) -> np.ndarray:
        """Each row's (or window's) heads over its own positions: (b t, d) each in and out."""
        d = q.shape[1]
        att = np.empty((b * t, d), np.float32)
        for first, count, width in self._runs(b, t):
            span = slice(first, first + count * width)
            qs, ks, vs = (a[span].reshape(count, width, self.n_head, -1) for a in (q, k, v))
            att[span] = head_attention_np(qs, ks, vs, (d // self.n_head) ** -0.5).reshape(-1, d)
        return att

    def _packed(self, rows: np.ndarray, b: int, t: int) -> None:
        """The layer with each product over all the rows (see the module docstring: packed maps)."""
        normed = self.attn_ln(rows.copy())
        q, k, v = (all_rows(p, normed) for p in (self.query, self.key, self.value))
        rows += all_rows(self.out, self._attention(q, k, v, b, t))
        hidden = all_rows(self.mlp1, self.mlp_ln(rows.copy()))
        blocks(lambda start, stop: gelu_rows(hidden[start:stop]), len(hidden))
        rows += all_rows(self.mlp2, hidden)

    def _rest_by_columns(self, rows: np.ndarray, att: np.ndarray) -> None:
        """The layer after its attention for a few rows: each product split by output columns among the threads
        (each thread's product over all the rows: OpenBLAS ran a 65-row product at two thirds of a 130-row one's
        speed), the feed-forward split by its hidden units, each thread's share of the second product summed."""
        projected = np.empty_like(rows)
        by_columns(att, ((self.out, projected),))
        rows += projected
        normed = self.mlp_ln(rows.copy())
        mlp1, mlp2 = self.mlp1, self.mlp2
        assert isinstance(mlp1, Linear) and isinstance(mlp2, Linear), "packed layers take _packed"
        inner = mlp1.weight_t.shape[1]
        share = -(-inner // CPU_THREADS)
        partial = np.empty((CPU_THREADS, *rows.shape), np.float32)

        def hidden_units(start: int, stop: int) -> None:
            i = start // share
            hidden = np.matmul(normed, mlp1.weight_t[:, start:stop])
            if mlp1.bias is not None:
                hidden += mlp1.bias[start:stop]
            gelu_rows(hidden)
            np.matmul(hidden, mlp2.weight_t[start:stop], out=partial[i])

        by_share(hidden_units, inner, share)
        rows += partial[: -(-inner // share)].sum(axis=0)
        if mlp2.bias is not None:
            rows += mlp2.bias

    def _runs(self, b: int, t: int) -> list[tuple[int, int, int]]:
        """The attention's groups of equal runs: (first row, runs, positions per run)."""
        if self.window is None or self.window >= t:
            return [(0, b, t)]
        full, tail = divmod(t, self.window)
        if b == 1:
            return [(0, full, self.window)] + ([(full * self.window, 1, tail)] if tail else [])
        return [run for row in range(b) for run in ((row * t, full, self.window), (row * t + full * self.window, 1, tail))
                if run[1] and run[2]]
