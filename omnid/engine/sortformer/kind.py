"""Streaming Sortformer as a kind of model (engine/kind.py): a speaker diarization model (the diarization routes'
own settings are the configuration's [diarization], whichever diarizer serves them); its checkpoint NVIDIA's .nemo
or mlx-community's folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.kind import KindDescriptor, no_options, plain_layout

if TYPE_CHECKING:
    from omnid.engine.sortformer.engine import SortformerEngine


def load(model_id: str, path: Path, pins: Mapping[str, str], _: None) -> SortformerEngine:
    from omnid.engine.sortformer.engine import SortformerEngine

    return SortformerEngine(model_id, path, dict(pins))


KIND: KindDescriptor[None] = KindDescriptor(
    name="sortformer", title="Sortformer", role="diarization", options=no_options, load=load, layout=plain_layout,
)
