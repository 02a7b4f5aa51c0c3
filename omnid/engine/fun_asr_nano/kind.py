"""Fun-ASR-Nano as a kind of model (engine/kind.py): a transcription model with its own [fun_asr_nano] section; its
checkpoint a folder as FunAudioLLM releases it (config.yaml, model.pt, Qwen3-0.6B/)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.errors import CheckpointError
from omnid.engine.fun_asr_nano.options import FunAsrNanoOptions
from omnid.engine.kind import KindDescriptor, Section

if TYPE_CHECKING:
    from omnid.engine.fun_asr_nano.engine import FunAsrNanoEngine

SECTION = Section("fun_asr_nano", FunAsrNanoOptions)


def load(model_id: str, path: Path, pins: Mapping[str, str], opts: FunAsrNanoOptions) -> FunAsrNanoEngine:
    from omnid.engine.fun_asr_nano.engine import FunAsrNanoEngine

    return FunAsrNanoEngine(model_id, path, pins, opts)


def layout(path: Path) -> str:
    from omnid.engine.fun_asr_nano.checkpoint import MODEL, is_fun_asr_nano

    if not path.is_dir() or not is_fun_asr_nano(path):
        raise CheckpointError(f"{path}: no Fun-ASR-Nano checkpoint (a folder whose config.yaml has model: {MODEL})")
    return "funasr"


def recognises(path: Path) -> bool:
    from omnid.engine.fun_asr_nano.checkpoint import is_fun_asr_nano

    return path.is_dir() and is_fun_asr_nano(path)


KIND: KindDescriptor[FunAsrNanoOptions] = KindDescriptor(
    name="fun_asr_nano", title="Fun-ASR-Nano", role="transcription", options=SECTION.read, load=load, layout=layout,
    recognises=recognises, section=SECTION,
)
