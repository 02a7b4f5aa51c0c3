"""Qwen3-ASR as a kind of model (engine/kind.py): a transcription model with its own [qwen3_asr] section, which a
forced aligner may time; its checkpoint a folder (the original, mlx-community or transformers -hf layout)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.kind import KindDescriptor, Section, plain_layout
from omnid.engine.qwen3_asr.options import QwenOptions

if TYPE_CHECKING:
    from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine

SECTION = Section("qwen3_asr", QwenOptions)


def load(model_id: str, path: Path, pins: Mapping[str, str], opts: QwenOptions) -> Qwen3AsrEngine:
    from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine

    return Qwen3AsrEngine(model_id, path, pins, opts)


def recognises(path: Path) -> bool:
    from omnid.engine.qwen3.checkpoint import is_forced_aligner, is_qwen3_asr

    return path.is_dir() and is_qwen3_asr(path) and not is_forced_aligner(path)


KIND: KindDescriptor[QwenOptions] = KindDescriptor(
    name="qwen3_asr", title="Qwen3-ASR", role="transcription", options=SECTION.read, load=load, layout=plain_layout,
    recognises=recognises, shadows=("whisper",), section=SECTION,
)
