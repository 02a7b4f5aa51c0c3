"""A checkpoint's YAML configs (NeMo's model_config.yaml, FunASR's config.yaml), read as plain data with errors
that name the file: small, and without YAML aliases (a few lines of them expand to billions of nodes; neither
NeMo nor FunASR writes one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omnid.engine.errors import CheckpointError

MAX_CONFIG_BYTES = 1 << 20  # a model's config is a few kilobytes


def parse_yaml(data: bytes, source: str) -> dict[str, Any]:
    """A YAML mapping from ``data`` (``source`` names it in errors)."""
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise CheckpointError(f"{source}: YAML aliases are not accepted")
            return super().compose_node(parent, index)

    if len(data) > MAX_CONFIG_BYTES:
        raise CheckpointError(f"{source} is {len(data)} bytes; a config is at most {MAX_CONFIG_BYTES}")
    try:
        config = yaml.load(data, Loader=NoAliases)  # noqa: S506  (a SafeLoader: plain data only)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise CheckpointError(f"{source}: cannot read: {type(exc).__name__}: {exc}") from exc
    if not isinstance(config, dict):
        raise CheckpointError(f"{source} is not a mapping")
    return config


def read_yaml_file(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise CheckpointError(f"{path} is {size} bytes; a config is at most {MAX_CONFIG_BYTES}")
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path}: missing") from exc
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_yaml(data, str(path))
