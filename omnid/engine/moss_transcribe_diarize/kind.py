"""MOSS-Transcribe-Diarize as a kind of model (engine/kind.py): a transcription model that names its speakers
itself, with its own [moss_transcribe_diarize] section; its checkpoint a folder in transformers' conversion layout
or the original release's (config.json with model_type "moss_transcribe_diarize")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.errors import CheckpointError
from omnid.engine.kind import KindDescriptor, Section
from omnid.engine.moss_transcribe_diarize.options import MossOptions

if TYPE_CHECKING:
    from omnid.engine.moss_transcribe_diarize.engine import MossEngine

SECTION = Section("moss_transcribe_diarize", MossOptions)


def load(model_id: str, path: Path, pins: Mapping[str, str], opts: MossOptions) -> MossEngine:
    from omnid.engine.moss_transcribe_diarize.engine import MossEngine

    return MossEngine(model_id, path, pins, opts)


def layout(path: Path) -> str:
    from omnid.engine.moss_transcribe_diarize.checkpoint import MODEL_TYPE, is_moss, layout_of

    if not is_moss(path):
        raise CheckpointError(f"{path}: no MOSS-Transcribe-Diarize checkpoint (a folder whose config.json has "
                              f"model_type \"{MODEL_TYPE}\")")
    return layout_of(path)


def recognises(path: Path) -> bool:
    from omnid.engine.moss_transcribe_diarize.checkpoint import is_moss

    return is_moss(path)


KIND: KindDescriptor[MossOptions] = KindDescriptor(
    name="moss_transcribe_diarize", title="MOSS-Transcribe-Diarize", role="transcription", options=SECTION.read,
    load=load, layout=layout, recognises=recognises, section=SECTION,
)
