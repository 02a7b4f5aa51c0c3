"""NVIDIA's ``.nemo`` checkpoint archive, read without torch for every NeMo kind: a tarball holding
``model_config.yaml`` (an OmegaConf config: plain YAML, ``${}`` references), ``model_weights.ckpt`` (a torch zip,
torch_zip.py) and a kind's own artifacts (a tokenizer). Everything here is bounded before it is read: the member
count, the config's size, its references' expansion; the weights' size is the kind's to bound (it knows the model).
"""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Any

from omnid.engine.errors import CheckpointError

# A .nemo holds a config, the weights and perhaps a few artifacts; a config is a few kilobytes.
MAX_MEMBERS = 256
MAX_CONFIG_BYTES = 1 << 20


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
    """model_config.yaml as plain data: small, and without YAML aliases (a few lines of them expand to billions
    of nodes; NeMo never writes one)."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise CheckpointError(f"{path}:model_config.yaml: YAML aliases are not accepted")
            return super().compose_node(parent, index)

    if member.size > MAX_CONFIG_BYTES:
        raise CheckpointError(f"{path}:model_config.yaml is {member.size} bytes; a config is at most {MAX_CONFIG_BYTES}")
    file = tar.extractfile(member)
    assert file is not None
    try:
        config = yaml.load(file.read(), Loader=NoAliases)  # noqa: S506  (a SafeLoader: plain data only)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise CheckpointError(f"{path}:model_config.yaml: cannot read: {type(exc).__name__}: {exc}") from exc
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}:model_config.yaml is not a mapping")
    return config



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

