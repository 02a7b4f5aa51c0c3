"""A checkpoint's tensor files (.safetensors, .npz), read by MLX with one error that names the file, the same in
every loader."""

from __future__ import annotations

from pathlib import Path

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
