"""Whisper as a kind of model (engine/kind.py): a transcription model, its decoding knobs read from the
configuration's [transcription] keys, its checkpoint a CTranslate2, mlx-community (mlx-examples' convert.py or
mlx-audio's converter) or transformers folder."""

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
    name = fmt + _quantized(path) if fmt in ("mlx", "mlx-audio") else fmt
    if fmt == "ctranslate2" or tokenizer_files(path):
        return name
    # No tokenizer file (mlx-community's folders): the shipped ranks its vocabulary size names, or the reason none.
    n_vocab, config = vocabulary_size(path, fmt)
    ranks = shipped_ranks(n_vocab, config, VOCABULARY_KEY[fmt])
    return f"{name}, tokenizer: shipped {ranks.name} ranks ({VOCABULARY_KEY[fmt]} {n_vocab})"


def _quantized(path: Path) -> str:
    """What a quantized mlx-community folder's config.json block says (checked against the tensors at load):
    `` 4-bit (group 64)`` (affine), `` mxfp4 4-bit (group 32)``, `` mixed 4/6-bit (group 64)`` for a recipe whose
    per-module entries differ; empty for a float folder."""
    from omnid.engine.json_file import read_json_object
    from omnid.engine.quantization import read_block

    block = read_block(read_json_object(path / "config.json"), path / "config.json", lambda module: module)
    if block is None:
        return ""
    entries = [block.default, *(e for e in block.modules.values() if e.quantized)]
    modes = sorted({e.mode for e in entries})
    bits = sorted({e.bits for e in entries if e.bits is not None})
    groups = sorted({e.group_size for e in entries if e.group_size is not None})
    mixed = " mixed" if len({(e.mode, e.bits, e.group_size) for e in entries}) > 1 else ""
    mode = "" if modes == ["affine"] else " " + "/".join(modes)
    return f"{mixed}{mode} {'/'.join(map(str, bits))}-bit (group {'/'.join(map(str, groups))})"


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
