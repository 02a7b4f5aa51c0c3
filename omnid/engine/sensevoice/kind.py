"""SenseVoice Small as a kind of model (engine/kind.py): a transcription model with its own [sensevoice] section;
its checkpoint a folder in FunASR's layout (model.pt, config.yaml, am.mvn, the SentencePiece model) or
mlx-community's."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.errors import CheckpointError
from omnid.engine.kind import KindDescriptor, Section
from omnid.engine.sensevoice.options import SenseVoiceOptions

if TYPE_CHECKING:
    from omnid.engine.sensevoice.engine import SenseVoiceEngine

SECTION = Section("sensevoice", SenseVoiceOptions)


def load(model_id: str, path: Path, pins: Mapping[str, str], opts: SenseVoiceOptions) -> SenseVoiceEngine:
    from omnid.engine.sensevoice.engine import SenseVoiceEngine

    return SenseVoiceEngine(model_id, path, pins, opts)


def layout(path: Path) -> str:
    """"funasr" (model.pt and config.yaml, as FunAudioLLM and ModelScope ship it) or "mlx" (mlx-community's)."""
    from omnid.engine.sensevoice import checkpoint

    if not path.is_dir() or not checkpoint.is_sensevoice(path):
        raise CheckpointError(f"{path}: no SenseVoice checkpoint (a folder whose config.yaml has model: "
                              f"{checkpoint.MODEL}, or whose config.json has model_type \"{checkpoint.MODEL_TYPE}\")")
    return checkpoint.layout(path)


def recognises(path: Path) -> bool:
    from omnid.engine.sensevoice.checkpoint import is_sensevoice

    return path.is_dir() and is_sensevoice(path)


KIND: KindDescriptor[SenseVoiceOptions] = KindDescriptor(
    name="sensevoice", title="SenseVoice", role="transcription", options=SECTION.read, load=load, layout=layout,
    recognises=recognises, section=SECTION,
)
