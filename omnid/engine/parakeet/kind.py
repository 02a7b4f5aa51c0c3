"""Parakeet as a kind of model (engine/kind.py): a transcription model with its own [parakeet] section; its
checkpoint a .nemo (or a folder holding one), an mlx-community folder or a transformers folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.errors import CheckpointError
from omnid.engine.kind import KindDescriptor, Section
from omnid.engine.parakeet.options import ParakeetOptions

if TYPE_CHECKING:
    from omnid.engine.parakeet.engine import ParakeetEngine

SECTION = Section("parakeet", ParakeetOptions)


def load(model_id: str, path: Path, pins: Mapping[str, str], opts: ParakeetOptions) -> ParakeetEngine:
    from omnid.engine.parakeet.engine import ParakeetEngine

    return ParakeetEngine(model_id, path, pins, opts)


def layout(path: Path) -> str:
    from omnid.engine.nemo.transducer_checkpoint import nemo_file
    from omnid.engine.parakeet.checkpoint import is_mlx_folder
    from omnid.engine.parakeet.transformers_layout import transformers_architecture

    if path.is_dir() and is_mlx_folder(path):
        return "mlx"
    if path.is_dir() and transformers_architecture(path):
        return "transformers"
    if nemo_file(path) is not None:
        return "nemo"
    raise CheckpointError(f"{path}: no Parakeet checkpoint (a .nemo file, an mlx-community folder or a "
                          "transformers folder)")


def recognises(path: Path) -> bool:
    from omnid.engine.parakeet.checkpoint import is_parakeet

    return is_parakeet(path)


KIND: KindDescriptor[ParakeetOptions] = KindDescriptor(
    name="parakeet", title="Parakeet", role="transcription", options=SECTION.read, load=load, layout=layout,
    recognises=recognises, shadows=("whisper",), section=SECTION,
)
