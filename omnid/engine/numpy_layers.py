"""An MLX model's linear maps and layer norms as numpy, for the CPU paths that run a layer in numpy (Sortformer's
cpu_layers, Whisper's cpu_decoder): the weights are numpy views of the MLX arrays, never copies."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.cpu_math import layer_norm_rows


def as_numpy(a: mx.array) -> np.ndarray:
    """A float32 MLX array's numpy view (a copy only for another dtype)."""
    return np.asarray(a, dtype=np.float32)


@dataclass(frozen=True)
class Linear:
    """y = x W^T + b with W^T a transposed view (the BLAS reads it as it is stored)."""

    weight_t: np.ndarray
    bias: np.ndarray | None

    @classmethod
    def of(cls, layer: nn.Module) -> Linear:
        """A Linear, or a 1x1 convolution (MLX stores its weight as (out, 1, in) or (out, 1, 1, in))."""
        weight = as_numpy(layer.weight)
        return cls(weight.reshape(len(weight), -1).T, as_numpy(layer.bias) if "bias" in layer else None)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Into ``out`` when given, else a new array."""
        out = np.matmul(x, self.weight_t, out=out)
        if self.bias is not None:
            out += self.bias
        return out


@dataclass(frozen=True)
class Norm:
    weight: np.ndarray
    bias: np.ndarray
    eps: float

    @classmethod
    def of(cls, norm: nn.LayerNorm) -> Norm:
        return cls(as_numpy(norm.weight), as_numpy(norm.bias), norm.eps)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """In place."""
        return layer_norm_rows(x, self.weight, self.bias, self.eps)
