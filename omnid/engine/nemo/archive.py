"""NVIDIA's ``.nemo`` checkpoint archive, read without torch for every NeMo kind: a tarball holding
``model_config.yaml`` (an OmegaConf config: plain YAML, ``${}`` references), ``model_weights.ckpt`` (a torch zip,
torch_zip.py) and a kind's own artifacts (a tokenizer). Everything here is bounded before it is read: the member
count, the config's size, its references' expansion; the weights' size is the kind's to bound (it knows the model).
"""

from __future__ import annotations

import math
import re
import tarfile
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.features import FrontEnd
from omnid.engine.nemo.torch_zip import read_state_dict
from omnid.engine.yaml_file import MAX_CONFIG_BYTES, parse_yaml

# A kind's own small artifacts (a tokenizer) are at most this large.
MAX_ARTIFACT_BYTES = 16 << 20


@dataclass
class NemoFile:
    config: dict  # model_config.yaml, its references resolved
    state: dict[str, np.ndarray]  # model_weights.ckpt
    artifacts: dict[str, bytes]  # the members a kind asked for, by the name's ending (NeMo prefixes a hash)


def read(path: Path, weights_limit: Callable[[dict], int], artifacts: tuple[str, ...] = ()) -> NemoFile:
    """A .nemo: the config first, then the kind's artifacts, then the weights, no larger than ``weights_limit``
    of the config says the model it describes can be (checked before they are read)."""
    try:
        if not tarfile.is_tarfile(path):  # tarfile's own message lists each decompressor it tried, a line each
            raise CheckpointError(f"{path}: not a .nemo checkpoint (a tar archive, as NeMo writes one)")
        with tarfile.open(path, "r:*") as tar:
            found = members(tar, path)
            source = f"{path}:model_config.yaml"
            config = resolve_interpolations(read_yaml(tar, found["model_config.yaml"], path), source)
            extra = {}
            for ending in artifacts:
                named = [m for name, m in found.items() if name == ending or name.endswith("_" + ending)]
                if len(named) != 1:
                    raise CheckpointError(f"{path}: {'no' if not named else 'more than one'} member named *{ending}")
                if named[0].size > MAX_ARTIFACT_BYTES:
                    raise CheckpointError(f"{path}:{named[0].name} is {named[0].size} bytes; at most "
                                          f"{MAX_ARTIFACT_BYTES}")
                file = tar.extractfile(named[0])
                assert file is not None
                extra[ending] = file.read()
            weights = found["model_weights.ckpt"]
            limit = weights_limit(config)
            if weights.size > limit:
                raise CheckpointError(f"{path}:model_weights.ckpt is {weights.size} bytes; the model its config "
                                      f"describes needs at most {limit}")
            file = tar.extractfile(weights)
            assert file is not None
            # read in place (the archive member is seekable), not copied whole into memory first
            state = read_state_dict(file, f"{path}:model_weights.ckpt", max_bytes=limit)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from exc
    return NemoFile(config, state, extra)


def state_limit(shapes: Mapping[str, tuple[int, ...]], front: FrontEnd) -> int:
    """The most bytes the weights of a model with these tensors may take in a .nemo: every tensor and the front
    end's window and filterbank in float64 (the widest a torch storage holds them), and a megabyte for the pickle
    and zip records."""
    elements = sum(math.prod(shape) for shape in shapes.values())
    elements += front.n_fft + front.n_mels * (front.n_fft // 2 + 1)
    return 8 * elements + (1 << 20)


def section(config: dict, key: str, source: Path | str) -> dict:
    value = config.get(key)
    if not isinstance(value, dict):
        raise CheckpointError(f"{source}: {key} is missing")
    return value


def getter(source: Path | str) -> Callable[[dict, str, type], Any]:
    """``get(section, key, int | float | str)``: a config value of that type, or an error naming the file and key."""

    def get(part: dict, key: str, kind: type) -> Any:
        if key not in part:
            raise CheckpointError(f"{source}: {key} is missing")
        value = part[key]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise CheckpointError(f"{source}: {key} must be an integer, not {value!r}")
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise CheckpointError(f"{source}: {key} must be a number, not {value!r}")
        if kind is str and not isinstance(value, str):
            raise CheckpointError(f"{source}: {key} must be a string, not {value!r}")
        return kind(value)

    return get

# A .nemo holds a config, the weights and perhaps a few artifacts; a config is a few kilobytes.
MAX_MEMBERS = 256


def members(tar: tarfile.TarFile, path: Path) -> dict[str, tarfile.TarInfo]:
    members: dict[str, tarfile.TarInfo] = {}
    for count, member in enumerate(tar, 1):
        if count > MAX_MEMBERS:
            raise CheckpointError(f"{path}: more than {MAX_MEMBERS} members: not a .nemo checkpoint")
        if member.isfile():
            members[member.name.rsplit("/", 1)[-1]] = member
    if "model_config.yaml" not in members or "model_weights.ckpt" not in members:
        raise CheckpointError(f"{path}: a .nemo must hold model_config.yaml and model_weights.ckpt")
    return members


def read_yaml(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> dict:
    """model_config.yaml as plain data (engine/yaml_file.py: small, without YAML aliases)."""
    source = f"{path}:model_config.yaml"
    if member.size > MAX_CONFIG_BYTES:
        raise CheckpointError(f"{source} is {member.size} bytes; a config is at most {MAX_CONFIG_BYTES}")
    file = tar.extractfile(member)
    assert file is not None
    return parse_yaml(file.read(), source)


_INTERPOLATION = re.compile(r"\$\{([^}]+)\}")


# Resolving references may not grow a config past these: a kilobyte of ``${}`` references to references otherwise
# expands to gigabytes.
MAX_LOOKUPS = 10_000
MAX_STRING_CHARS = 65_536


def resolve_interpolations(config: dict, source: str = "model_config.yaml") -> dict:
    """OmegaConf's ``${a.b}`` references resolved against the file's root (``model.`` may name the root itself,
    as in a model config saved inside a .nemo), within MAX_LOOKUPS references and MAX_STRING_CHARS a string."""
    lookups = 0

    def lookup(ref: str, depth: int) -> Any:
        nonlocal lookups
        lookups += 1
        if lookups > MAX_LOOKUPS:
            raise CheckpointError(f"{source}: more than {MAX_LOOKUPS} ${{}} references to resolve")
        node: Any = config
        parts = ref.split(".")
        if parts[0] == "model" and "model" not in config:
            parts = parts[1:]
        for part in parts:
            if not isinstance(node, dict) or part not in node:
                raise CheckpointError(f"{source}: unresolved reference ${{{ref}}}")
            node = node[part]
        return resolve(node, depth + 1)

    def resolve(node: Any, depth: int = 0) -> Any:
        if depth > 20:
            raise CheckpointError(f"{source}: references nest too deep")
        if isinstance(node, dict):
            return {k: resolve(v, depth) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v, depth) for v in node]
        if isinstance(node, str):
            whole = _INTERPOLATION.fullmatch(node)
            if whole:
                return lookup(whole.group(1), depth)
            out = _INTERPOLATION.sub(lambda m: _bounded(str(lookup(m.group(1), depth))), node)
            return _bounded(out)
        return node

    def _bounded(text: str) -> str:
        if len(text) > MAX_STRING_CHARS:
            raise CheckpointError(f"{source}: a resolved ${{}} reference is over {MAX_STRING_CHARS} characters")
        return text

    return resolve(config)

