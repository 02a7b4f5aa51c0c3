"""How a quantized MLX checkpoint's modules are packed, for every kind: the ``quantization`` block of
mlx-community's ``config.json`` (as mlx-audio 0.6.2's converter writes it) read once, its per-module entries renamed
onto the model's names, each packed module checked against it and against its own tensors' shapes, and widened to
float where a kind computes in float.

mlx-audio writes ``{"group_size": G, "bits": B, "mode": M}`` at the top (``mode`` absent in older folders: affine),
and with a mixed recipe (``mixed_2_6``, ``mixed_3_4``, ``mixed_3_6``, ``mixed_4_6``) one entry per quantized module
under its own module path (``"model.layers.1.mlp.down_proj": {"group_size": 64, "bits": 6, "mode": "affine"}``), each
module at its own bits. Modes (MLX's ``mx.quantize``): ``affine`` (``.scales`` and ``.biases``, any float scales),
``mxfp4``, ``nvfp4`` and ``mxfp8`` (``.scales`` only, one uint8 scale per group, no ``.biases``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import mlx.core as mx

from omnid.engine.errors import CheckpointError


@dataclass(frozen=True)
class Mode:
    bits: tuple[int, ...]
    groups: tuple[int, ...]
    biases: bool  # affine keeps a bias per group; the floating-point modes a uint8 scale alone


MODES = {
    "affine": Mode((2, 3, 4, 5, 6, 8), (32, 64, 128), True),
    "mxfp4": Mode((4,), (32,), False),
    "nvfp4": Mode((4,), (16,), False),
    "mxfp8": Mode((8,), (32,), False),
}
TOP_LEVEL = ("group_size", "bits", "mode", "quantize_input")


@lru_cache(maxsize=1)
def offered_modes() -> tuple[str, ...]:
    """The modes this MLX quantizes in (each tried once on a tiny matrix)."""
    offered = []
    for name in MODES:
        try:
            mx.eval(*mx.quantize(mx.zeros((1, 128)), mode=name))
        except (ValueError, RuntimeError):
            continue
        offered.append(name)
    return tuple(offered)


# The affine widths cpu_packed.py's kernels multiply as they are packed (mlx-audio's and mlx-examples' defaults).
CPU_PACKED_BITS = (4, 8)


@dataclass(frozen=True)
class Quantization:
    """How one module's weight is packed."""

    group_size: int
    bits: int
    mode: str = "affine"

    @classmethod
    def of(cls, module: Any) -> Quantization:
        """An MLX QuantizedLinear's or QuantizedEmbedding's packing."""
        return cls(module.group_size, module.bits, module.mode)

    def params(self) -> dict[str, Any]:
        """For ``nn.quantize``'s class predicate."""
        return {"group_size": self.group_size, "bits": self.bits, "mode": self.mode}

    @property
    def multiplied_packed_on_cpu(self) -> bool:
        """Whether cpu_packed.py's kernels multiply it as it is packed (else the numpy layers widen it)."""
        return self.mode == "affine" and self.bits in CPU_PACKED_BITS


@dataclass(frozen=True)
class Entry:
    """What the block says of a module: ``key`` as written in the file; bits or group size None where unsaid;
    ``quantized`` False for an entry that says the module is not."""

    key: str
    mode: str
    bits: int | None
    group_size: int | None
    quantized: bool = True


@dataclass(frozen=True)
class Block:
    path: Path  # config.json
    default: Entry
    modules: dict[str, Entry]  # the model's module name -> its own entry

    def entry(self, module: str) -> Entry:
        return self.modules.get(module, self.default)


def read_block(config: dict[str, Any], path: Path, rename: Callable[[str], str]) -> Block | None:
    """The config's ``quantization`` (or ``quantization_config``) block, its per-module entries under the names
    ``rename`` gives a module path of the file; None without one. An unknown or malformed entry is refused naming
    the file and the key."""
    for key in ("quantization", "quantization_config"):
        raw = config.get(key)
        if raw is not None:
            break
    else:
        return None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: {key} must be an object")
    default = _entry(raw, key, path, "affine")
    modules: dict[str, Entry] = {}
    for name, value in raw.items():
        if name in TOP_LEVEL:
            continue
        if isinstance(value, bool):
            modules[rename(name)] = Entry(f"{key}.{name}", default.mode, default.bits, default.group_size, value)
        elif isinstance(value, dict):
            # As nn.quantize reads a module's own parameters: an absent mode is affine, not the block's.
            modules[rename(name)] = _entry(value, f"{key}.{name}", path, "affine")
    return Block(path, default, modules)


def _entry(raw: dict[str, Any], key: str, path: Path, mode_default: str) -> Entry:
    mode = raw.get("mode", mode_default)
    if not isinstance(mode, str) or mode not in MODES or mode not in offered_modes():
        raise CheckpointError(f"{path}: {key}.mode: unknown quantization mode {mode!r} (this MLX offers "
                              f"{', '.join(offered_modes())})")
    values = []
    for field in ("bits", "group_size"):
        value = raw.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise CheckpointError(f"{path}: {key}.{field} must be an integer, not {value!r}")
        values.append(value)
    return Entry(key, mode, values[0], values[1])


def packed(module: str, want: tuple[int, ...], weight: mx.array, scales: mx.array, biases: mx.array | None,
           block: Block | None, path: Path) -> Quantization:
    """How ``module``'s weight (a ``want``-shaped matrix) is packed, from its tensors' shapes, checked against the
    block (its own entry, else the block's top level): bits, group size, mode, and the ``.biases`` that affine has
    and the other modes have not. ``path``: the weights file, named on error with the tensor (and the key)."""
    rows, cols = want
    entry = block.entry(module) if block is not None else None
    if block is not None and entry is not None and not entry.quantized:
        raise CheckpointError(f"{path}: tensor {module}.weight is packed, but {block.path.name}'s {entry.key} says "
                              "it is not quantized")
    if weight.dtype != mx.uint32 or weight.ndim != 2 or weight.shape[0] != rows or scales.ndim != 2 or (
            scales.shape[0] != rows or not scales.shape[1]):
        raise CheckpointError(f"{path}: tensor {module}.weight is not a quantized ({rows}, ...) uint32 matrix with "
                              f"({rows}, groups) scales")
    bits, rem = divmod(weight.shape[1] * 32, cols)
    group, grem = divmod(cols, scales.shape[1])
    if entry is not None:
        mode = entry.mode
    elif biases is not None:
        mode = "affine"
    else:  # no block to say: the floating-point mode these shapes fit
        mode = next((m for m, spec in MODES.items() if not spec.biases and spec.bits == (bits,)
                     and spec.groups == (group,)), "mxfp4")
    spec = MODES[mode]
    if rem or grem or bits not in spec.bits or group not in spec.groups:
        raise CheckpointError(f"{path}: tensor {module}.weight has packed shape {tuple(weight.shape)} and scales "
                              f"{tuple(scales.shape)}, which fit no {mode} quantization of {want}")
    if spec.biases and (biases is None or biases.shape != scales.shape):
        raise CheckpointError(f"{path}: tensor {module}.biases missing or not shaped like its scales ({mode} "
                              "quantization keeps a bias per group)")
    if not spec.biases and biases is not None:
        raise CheckpointError(f"{path}: tensor {module}.biases is unexpected: {mode} quantization has no biases")
    if not spec.biases and scales.dtype != mx.uint8:
        raise CheckpointError(f"{path}: tensor {module}.scales has dtype {scales.dtype}, expected uint8 ({mode})")
    if entry is not None and block is not None:
        said = (entry.bits or bits, entry.group_size or group)
        if said != (bits, group):
            raise CheckpointError(
                f"{path}: tensor {module}.weight is packed {bits}-bit in groups of {group}, but "
                f"{block.path.name}'s {entry.key} says {entry.bits}-bit in groups of {entry.group_size}")
    return Quantization(group, bits, mode)


def widen(weight: mx.array, scales: mx.array, biases: mx.array | None, q: Quantization) -> mx.array:
    """A packed weight as float32, by MLX's own dequantize in the module's mode (the numpy paths on the CPU read
    float weights)."""
    wide = mx.dequantize(weight, scales, biases, group_size=q.group_size, bits=q.bits, mode=q.mode)
    return wide.astype(mx.float32)


def widen_module(module: Any) -> mx.array:
    """An MLX QuantizedLinear's or QuantizedEmbedding's weight as float32, as :func:`widen` widens a folder's."""
    return widen(module.weight, module.scales, module.get("biases"), Quantization.of(module))
