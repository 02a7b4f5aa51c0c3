"""Cohere Transcribe as a kind of model (engine/kind.py): a transcription model with its own [cohere_asr] section;
its checkpoint a folder in the original Hugging Face layout or mlx-audio's conversion."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.cohere_asr.options import CohereOptions
from omnid.engine.errors import CheckpointError
from omnid.engine.kind import KindDescriptor, Section

if TYPE_CHECKING:
    from omnid.engine.cohere_asr.engine import CohereAsrEngine

SECTION = Section("cohere_asr", CohereOptions)


def load(model_id: str, path: Path, pins: Mapping[str, str], opts: CohereOptions) -> CohereAsrEngine:
    from omnid.engine.cohere_asr.engine import CohereAsrEngine

    return CohereAsrEngine(model_id, path, pins, opts)


def layout(path: Path) -> str:
    """"original" (the original repo's names, PyTorch layouts) or "mlx" (mlx-audio's conversion; "mlx N-bit" when
    quantized), with the tokenizer file the text comes from."""
    from omnid.engine.cohere_asr import checkpoint
    from omnid.engine.json_file import read_json_object

    if not path.is_dir() or not checkpoint.is_cohere(path):
        raise CheckpointError(f"{path}: no Cohere Transcribe checkpoint (a folder whose config.json has model_type "
                              '"cohere_asr")')
    form = checkpoint.layout(path)
    block = read_json_object(path / "config.json").get("quantization")
    if form == "mlx" and isinstance(block, dict) and "bits" in block:
        form = f"mlx {block['bits']}-bit (group {block.get('group_size', 64)}, {block.get('mode', 'affine')})"
    tokenizer = "tokenizer.json" if (path / "tokenizer.json").is_file() else "tokenizer.model"
    return f"{form}, tokenizer: {tokenizer}"


def recognises(path: Path) -> bool:
    from omnid.engine.cohere_asr.checkpoint import is_cohere

    return path.is_dir() and is_cohere(path)


KIND: KindDescriptor[CohereOptions] = KindDescriptor(
    name="cohere_asr", title="Cohere Transcribe", role="transcription", options=SECTION.read, load=load,
    layout=layout, recognises=recognises, shadows=("whisper",), section=SECTION,
)
