"""A checkpoint's tensor files (.safetensors, .npz), read by MLX with one error that names the file, the same in
every loader."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx

from omnid.engine.errors import CheckpointError


def read_tensors(path: Path) -> dict[str, mx.array]:
    try:
        loaded = mx.load(str(path))
    except Exception as exc:  # noqa: BLE001  (MLX raises plain OSError/RuntimeError/ValueError for a bad file)
        raise CheckpointError(f"{path}: corrupt or unreadable tensor file: {exc}") from exc
    if not isinstance(loaded, dict):  # a bare .npy holds one unnamed array: no checkpoint of ours is one
        raise CheckpointError(f"{path}: corrupt or unreadable tensor file: no named tensors")
    return loaded


def check_shapes(weights: Mapping[str, Any], want: Mapping[str, tuple[int, ...]], source: Path | str,
                 allowed: Iterable[str] = (), extra_ok: bool = False) -> None:
    """Every wanted tensor present with its shape, and (unless ``extra_ok``) nothing else but ``allowed``: one error
    naming the file and the first tensor that is wrong."""
    for name, shape in want.items():
        if name not in weights:
            raise CheckpointError(f"{source}: missing tensor {name}")
        if tuple(weights[name].shape) != shape:
            raise CheckpointError(f"{source}: tensor {name} has shape {tuple(weights[name].shape)}, expected {shape}")
    if extra_ok:
        return
    extra = sorted(set(weights) - set(want) - set(allowed))
    if extra:
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        raise CheckpointError(f"{source}: unexpected tensor {extra[0]}{more}")

