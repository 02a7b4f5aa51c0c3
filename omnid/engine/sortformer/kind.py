"""Streaming Sortformer as a kind of model (engine/kind.py): a speaker diarization model (the diarization routes'
own settings are the configuration's [diarization], whichever diarizer serves them); its checkpoint NVIDIA's .nemo
or mlx-community's folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.errors import CheckpointError
from omnid.engine.kind import KindDescriptor, no_options

if TYPE_CHECKING:
    from omnid.engine.sortformer.engine import SortformerEngine


def load(model_id: str, path: Path, pins: Mapping[str, str], _: None) -> SortformerEngine:
    from omnid.engine.sortformer.engine import SortformerEngine

    return SortformerEngine(model_id, path, dict(pins))


def recognises(path: Path) -> bool:
    """mlx-community's folder (its config.json's encoder and Sortformer module sections) or a .nemo (the file, or
    the one in a folder) whose config has Sortformer's modules."""
    import json

    from omnid.engine.nemo.transducer_checkpoint import nemo_config

    try:
        config = json.loads((path / "config.json").read_text()) if path.is_dir() else None
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict):
        return all(isinstance(config.get(k), dict) for k in ("fc_encoder_config", "modules_config"))
    nemo = nemo_config(path)
    return nemo is not None and isinstance(nemo.get("sortformer_modules"), dict)


def layout(path: Path) -> str:
    """As its loader tells it: a folder with config.json is mlx-community's, else a .nemo (the file, or the one in
    a folder)."""
    from omnid.engine.nemo.transducer_checkpoint import nemo_file

    if path.is_dir() and (path / "config.json").is_file():
        return "mlx"
    if nemo_file(path) is not None:
        return "nemo"
    raise CheckpointError(f"{path}: no Sortformer checkpoint (a .nemo file or an mlx-community folder)")


KIND: KindDescriptor[None] = KindDescriptor(
    name="sortformer", title="Sortformer", role="diarization", options=no_options, load=load, layout=layout,
    recognises=recognises,
)
