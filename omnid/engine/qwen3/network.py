"""The network loaded and checked once for either kind (a Qwen3-ASR model or a Qwen3-ForcedAligner), and the
numpy decoder that runs it on MLX's CPU device."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

from omnid.engine import pins as pinning
from omnid.engine.errors import CheckpointError
from omnid.engine.qwen3.checkpoint import Checkpoint, load_checkpoint
from omnid.engine.qwen3.cpu_decoder import NumpyDecoder
from omnid.engine.qwen3.model import Qwen3ASR
from omnid.engine.qwen3.tokenizer import QwenTokenizer, tokenizer_files

PREFILL_BLOCK = 1024  # prompt positions per MLX prefill step: scores are (block x prompt) per head, not (prompt^2)


@dataclass(frozen=True)
class Network:
    """A loaded Qwen3-ASR network (a transcription model's or a forced aligner's) and its tokenizer."""

    checkpoint: Checkpoint
    model: Qwen3ASR
    tokenizer: QwenTokenizer
    pin_report: dict[str, str]


def load_network(folder: Path, pins: Mapping[str, str] | None) -> Network:
    """The checkpoint, checked against its pins and its tokenizer, built into the MLX model."""
    ckpt = load_checkpoint(folder)
    pin_report = pinning.verify(list(ckpt.files) + tokenizer_files(folder), pins or {})
    tokenizer = QwenTokenizer.from_folder(folder)
    ids = tokenizer.ids
    if (ckpt.ids.audio_pad, ckpt.ids.audio_start) != (ids.audio_pad, ids.audio_start) or (
            ckpt.ids.audio_end not in (None, ids.audio_end)):
        raise CheckpointError(f"{folder / 'config.json'}: audio token ids {ckpt.ids} differ from the tokenizer's")
    if tokenizer.size > ckpt.text.vocab_size:
        raise CheckpointError(f"{folder / 'tokenizer_config.json'}: {tokenizer.size} tokens for an embedding of "
                              f"{ckpt.text.vocab_size} rows")
    model = Qwen3ASR(ckpt.audio, ckpt.text)
    # Exactly the modules the checkpoint packed, each at its own width and mode (mixed recipes exist).
    nn.quantize(model, class_predicate=lambda path, _module: q.params() if (q := ckpt.quantized.get(path)) else False)
    model.load_weights(list(ckpt.weights.items()), strict=True)
    mx.eval(model.parameters())
    return Network(ckpt, model, tokenizer, pin_report)


def numpy_decoder(net: Network, wanted: bool | None) -> NumpyDecoder | None:
    """The decoder in numpy on the CPU backend (see cpu_decoder.py: twice as fast there), quantized decoders too:
    MLX's quantized kernels on the CPU were measured 3x (Qwen3-ASR) to 20x (the aligner) slower than float32 there
    (bench/quantized.py), so 4- and 8-bit affine modules are multiplied packed by cpu_packed.py's kernels and other
    modes widened to float32 at load; None for MLX's, on Metal. ``wanted``: forced on or off (tests)."""
    if wanted is None:
        wanted = mx.default_device() == mx.cpu
    return NumpyDecoder(net.model, net.checkpoint.text) if wanted else None
