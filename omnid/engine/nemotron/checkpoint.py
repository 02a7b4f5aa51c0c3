"""Nemotron streaming checkpoints: NVIDIA's ``.nemo`` of an ``EncDecRNNTBPEModelWithPrompt`` (Nemotron 3.5 ASR
streaming), read without torch through engine/nemo.

Parakeet's transducer config with a cache-aware encoder (causal subsampling and convolutions, a layer norm in the
convolution module, chunked-limited attention) and a language prompt: a one-hot of ``num_prompts`` concatenated to
each encoder frame, then Linear, ReLU, Linear back to the encoder's width. The attention contexts the checkpoint
was trained for (``att_context_size``: [left, right] pairs, the first its default) and the prompt dictionary come
from its config, never from defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo import archive
from omnid.engine.nemo.features import FrontEnd
from omnid.engine.nemo.tokenizer import Vocabulary
from omnid.engine.parakeet.checkpoint import Dims, check_vocabulary, expected_shapes, model_config, nemo_weights
from omnid.engine.pins import verify
from omnid.engine.tensor_file import check_shapes


@dataclass(frozen=True)
class Streaming:
    contexts: tuple[tuple[int, int], ...]  # (left, right) encoder frames, the checkpoint's default first
    prompts: dict[str, int]  # language key (e.g. "en-US") -> prompt index
    num_prompts: int
    default_language: str | None  # the config's, when it names one


@dataclass
class Checkpoint:
    path: Path
    front: FrontEnd
    dims: Dims
    streaming: Streaming
    vocabulary: Vocabulary
    weights: dict[str, Any]  # float32, this package's names, MLX layouts
    files: list[Path]


def shapes(d: Dims, s: Streaming) -> dict[str, tuple[int, ...]]:
    m = d.conformer.d_model
    out = expected_shapes(d)
    out["prompt_kernel.0.weight"], out["prompt_kernel.0.bias"] = (2 * m, m + s.num_prompts), (2 * m,)
    out["prompt_kernel.2.weight"], out["prompt_kernel.2.bias"] = (m, 2 * m), (m,)
    return out


def streaming_config(cfg: dict, source: Path) -> Streaming:
    enc = archive.section(cfg, "encoder", source)
    defaults = archive.section(cfg, "model_defaults", source)
    raw = enc.get("att_context_size")
    pairs = raw if isinstance(raw, list) and raw and isinstance(raw[0], list) else [raw]
    contexts = []
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                  for x in pair) and pair[0] >= 0 and pair[1] >= 0):
            raise CheckpointError(f"{source}: encoder.att_context_size must be [left, right] pairs of frame counts, "
                                  f"not {raw!r}")
        contexts.append((pair[0], pair[1]))
    prompts = defaults.get("prompt_dictionary")
    if not isinstance(prompts, dict) or not prompts:
        raise CheckpointError(f"{source}: model_defaults.prompt_dictionary is missing: not a prompt (Nemotron) model")
    num_prompts = cfg.get("num_prompts", defaults.get("num_prompts", 128))
    if isinstance(num_prompts, bool) or not isinstance(num_prompts, int) or num_prompts < 1:
        raise CheckpointError(f"{source}: num_prompts must be a positive integer, not {num_prompts!r}")
    for key, index in prompts.items():
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < num_prompts:
            raise CheckpointError(f"{source}: prompt {key!r} has index {index!r}; num_prompts is {num_prompts}")
    default = defaults.get("default_language", cfg.get("default_language"))
    if default is not None and default not in prompts:
        raise CheckpointError(f"{source}: default_language {default!r} is not in the prompt dictionary")
    return Streaming(tuple(contexts), {str(k): int(v) for k, v in prompts.items()}, num_prompts, default)


def load(path: Path, pins: dict[str, str] | None = None) -> Checkpoint:
    """A Nemotron streaming ``.nemo``: its config, tokenizer and weights, each tensor shape-checked."""
    path = Path(path)
    if not (path.is_file() and path.suffix == ".nemo"):
        raise CheckpointError(f"{path}: not a .nemo file")
    source = Path(f"{path}:model_config.yaml")

    def limit(cfg: dict) -> int:
        dims, front = model_config(cfg, source, streaming=True)
        return archive.state_limit(shapes(dims, streaming_config(cfg, source)), front)

    nemo = archive.read(path, limit, artifacts=("tokenizer.model",))
    dims, front = model_config(nemo.config, source, streaming=True)
    streaming = streaming_config(nemo.config, source)
    if dims.durations or dims.ctc:
        raise CheckpointError(f"{source}: a Nemotron streaming model has an RNN-T decoder only")
    vocabulary = Vocabulary.from_sentencepiece(nemo.artifacts["tokenizer.model"], f"{path}:tokenizer.model")
    check_vocabulary(vocabulary, dims, f"{path}:tokenizer.model")
    weights = nemo_weights(nemo, front, path)
    check_shapes(weights, shapes(dims, streaming), path)
    if pins:
        verify([path], pins)
    return Checkpoint(path, front, dims, streaming, vocabulary, weights, [path])
