"""Nemotron as a kind of model (engine/kind.py): NVIDIA's cache-aware streaming transcription model; its checkpoint
a .nemo of NeMo's prompt model (or a folder holding one) or mlx-community's folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.errors import CheckpointError
from omnid.engine.kind import KindDescriptor, no_options

if TYPE_CHECKING:
    from omnid.engine.nemotron.engine import NemotronEngine


def load(model_id: str, path: Path, pins: Mapping[str, str], _: None) -> NemotronEngine:
    from omnid.engine.nemotron.engine import NemotronEngine

    return NemotronEngine(model_id, path, pins)


def layout(path: Path) -> str:
    from omnid.engine.nemo.transducer_checkpoint import nemo_file
    from omnid.engine.nemotron.checkpoint import is_mlx_folder

    if path.is_dir() and is_mlx_folder(path):
        return "mlx"
    if nemo_file(path) is not None:
        return "nemo"
    raise CheckpointError(f"{path}: no Nemotron checkpoint (a .nemo file or an mlx-community folder)")


def recognises(path: Path) -> bool:
    from omnid.engine.nemotron.checkpoint import is_nemotron

    return is_nemotron(path)


KIND: KindDescriptor[None] = KindDescriptor(
    name="nemotron", title="Nemotron", role="transcription", options=no_options, load=load, layout=layout,
    recognises=recognises, shadows=("parakeet", "whisper"),
)
