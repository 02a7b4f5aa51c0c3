"""A checkpoint's tensor files (.safetensors, .npz), read by MLX with one error that names the file, the same in
every loader; and a folder's weights as transformers saves them, in one ``model.safetensors`` or in shards
(``model-00001-of-0000N.safetensors``...) that ``model.safetensors.index.json``'s ``weight_map`` names tensor by
tensor, read the same way for every kind."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"  # transformers' (and huggingface_hub's, mlx-lm's) index of a sharded save


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



@dataclass(frozen=True)
class WeightFiles:
    """A folder's tensor files: the shards its index names (``index`` set, ``mapped`` each shard's tensors as the
    index maps them), or the plain files found."""

    shards: tuple[Path, ...]
    index: Path | None = None
    mapped: Mapping[Path, tuple[str, ...]] | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file the weights are read from, the index first: what pins are checked against."""
        return ((self.index,) if self.index else ()) + self.shards

    def read(self) -> Iterator[tuple[Path, dict[str, mx.array]]]:
        """Each file's tensors in turn (one file's held at a time by the caller that wishes): a shard's are exactly
        those the index maps to it, one it lacks refused naming the shard, the tensor and the index."""
        for path in self.shards:
            tensors = read_tensors(path)
            if self.mapped is None:
                yield path, tensors
                continue
            names = self.mapped[path]
            for name in names:
                if name not in tensors:
                    raise CheckpointError(f"{path}: missing tensor {name}, which {INDEX} maps to this shard")
            yield path, {name: tensors[name] for name in names}

    def tensors(self) -> dict[str, mx.array]:
        """All the tensors, from every file."""
        out: dict[str, mx.array] = {}
        for _, tensors in self.read():
            out.update(tensors)
        return out


def is_sharded(folder: Path) -> bool:
    return (Path(folder) / INDEX).is_file()


def has_weights(folder: Path) -> bool:
    """Whether a folder holds transformers' weights, in one file or sharded."""
    return (Path(folder) / SINGLE).is_file() or is_sharded(folder)


def weight_files(folder: Path, pattern: str = SINGLE) -> WeightFiles:
    """A folder's weights: the shards ``model.safetensors.index.json`` names where there is one (every shard
    present, each a plain file of the folder), else the files matching ``pattern`` (none: an empty ``shards``)."""
    folder = Path(folder)
    index = folder / INDEX
    if not index.exists():
        return WeightFiles(tuple(sorted(p for p in folder.glob(pattern) if p.is_file())))
    weight_map = read_json_object(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{index}: weight_map must be an object naming each tensor's shard")
    mapped: dict[Path, list[str]] = {}
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard or shard in (".", ".."):
            raise CheckpointError(f"{index}: weight_map.{name} must name a shard file in the folder, "
                                  f"not {shard!r}")
        mapped.setdefault(folder / shard, []).append(name)
    for path, names in mapped.items():
        if not path.is_file():
            raise CheckpointError(f"{index}: shard {path.name} (tensor {names[0]}) is missing")
    shards = tuple(sorted(mapped))
    return WeightFiles(shards, index, {p: tuple(mapped[p]) for p in shards})
