"""Whisper as a kind of model (engine/kind.py): a transcription model, its decoding knobs read from the
configuration's [transcription] keys, its checkpoint a CTranslate2, mlx-community or transformers folder."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from omnid.engine.errors import CheckpointError
from omnid.engine.kind import KindDescriptor, Sections

if TYPE_CHECKING:
    from omnid.engine.whisper.engine import WhisperEngine
    from omnid.engine.whisper.options import WhisperOptions


def options(sections: Sections) -> WhisperOptions:
    from omnid.engine.whisper.decoding import DecodeOptions
    from omnid.engine.whisper.options import WhisperOptions

    t = sections["transcription"]
    return WhisperOptions(
        temperature_increment=t["temperature_increment"],
        condition_on_previous_text=t["condition_on_previous_text"],
        content_padding_s=t["content_padding_s"],
        content_min_window_s=t["content_min_window_s"],
        decode=DecodeOptions(
            compression_ratio_threshold=t["compression_ratio_threshold"],
            log_prob_threshold=t["log_prob_threshold"],
            no_speech_threshold=t["no_speech_threshold"],
            max_initial_timestamp=t["max_initial_timestamp"],
        ),
    )


def load(model_id: str, path: Path, pins: Mapping[str, str], opts: WhisperOptions) -> WhisperEngine:
    from omnid.engine.whisper.engine import WhisperEngine

    return WhisperEngine(model_id, path, pins, opts)


def layout(path: Path) -> str:
    from omnid.engine.whisper.checkpoint import VOCABULARY_KEY, detect_format, vocabulary_size
    from omnid.engine.whisper.tokenizer import shipped_ranks, tokenizer_files

    fmt = detect_format(path)
    name = fmt + _quantized(path) if fmt == "mlx" else fmt
    if fmt == "ctranslate2" or tokenizer_files(path):
        return name
    # No tokenizer file (mlx-community's folders): the shipped ranks its vocabulary size names, or the reason none.
    n_vocab, config = vocabulary_size(path, fmt)
    ranks = shipped_ranks(n_vocab, config, VOCABULARY_KEY[fmt])
    return f"{name}, tokenizer: shipped {ranks.name} ranks ({VOCABULARY_KEY[fmt]} {n_vocab})"


def _quantized(path: Path) -> str:
    """`` 4-bit (group 64)`` for a quantized mlx-community folder (its config.json's block, checked at load)."""
    from omnid.engine.json_file import read_json_object

    block = read_json_object(path / "config.json").get("quantization")
    if not isinstance(block, dict):
        return ""
    return f" {block.get('bits')}-bit (group {block.get('group_size')})"


def recognises(path: Path) -> bool:
    from omnid.engine.whisper.checkpoint import detect_format

    try:  # by its files alone: a folder whose tokenizer cannot be told is still Whisper's, refused at load
        return path.is_dir() and bool(detect_format(path))
    except CheckpointError:
        return False


KIND: KindDescriptor[WhisperOptions] = KindDescriptor(
    name="whisper", title="Whisper", role="transcription", options=options, load=load, layout=layout,
    recognises=recognises,
)
