"""Nemotron streaming checkpoints: NVIDIA's ``.nemo`` of an ``EncDecRNNTBPEModelWithPrompt`` (Nemotron 3.5 ASR
streaming), read without torch through engine/nemo.

Parakeet's transducer config with a cache-aware encoder (causal subsampling and convolutions, a layer norm in the
convolution module, chunked-limited attention) and a language prompt: a one-hot of ``num_prompts`` concatenated to
each encoder frame, then Linear, ReLU, Linear back to the encoder's width. The attention contexts the checkpoint
was trained for (``att_context_size``: [left, right] pairs, the first its default) and the prompt dictionary come
from its config, never from defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.nemo import archive
from omnid.engine.nemo.features import FrontEnd
from omnid.engine.nemo.mlx_folder import Keep, check_folder, read_folder
from omnid.engine.nemo.tokenizer import Vocabulary
from omnid.engine.nemo.transducer_checkpoint import (
    DEFAULT_MAX_SYMBOLS,
    Dims,
    check_vocabulary,
    expected_shapes,
    model_config,
    nemo_config,
    nemo_file,
    nemo_weights,
    prompted,
)
from omnid.engine.pins import verify
from omnid.engine.quantization import Quantization
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
    weights: dict[str, Any]  # float32, this package's names, MLX layouts; packed modules as their MLX arrays
    files: list[Path]
    # The modules kept packed (a folder quantized by mlx-audio, loaded with keep_quantized); empty when all is float.
    quantized: dict[str, Quantization] = field(default_factory=dict)


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
    contexts: list[tuple[int, int]] = []
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
    # A default that is not a prompt (mlx-audio's converter writes "auto" whatever the dictionary holds) leaves
    # the reference's fallback, the prompt with index 0.
    default = default if isinstance(default, str) and default in prompts else None
    preferred = defaults.get("default_att_context_size", cfg.get("default_att_context_size"))
    if preferred is not None:
        if not (isinstance(preferred, list) and tuple(preferred) in contexts):
            raise CheckpointError(f"{source}: default_att_context_size {preferred!r} is not one of the encoder's "
                                  f"att_context_size {raw!r}")
        contexts.remove(tuple(preferred))
        contexts.insert(0, tuple(preferred))
    return Streaming(tuple(contexts), {str(k): int(v) for k, v in prompts.items()}, num_prompts, default)


def read_nemo(path: Path) -> tuple[archive.NemoFile, Dims, FrontEnd, Streaming, Vocabulary]:
    """A Nemotron streaming ``.nemo`` read and checked: its archive (NeMo's names), the model its config describes,
    its streaming configuration, its vocabulary."""
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
    return nemo, dims, front, streaming, vocabulary


def is_nemotron(path: Path) -> bool:
    """Whether a path holds a Nemotron streaming checkpoint: a ``.nemo`` (or a folder holding exactly one) whose
    config has a prompt dictionary, or an mlx-community folder."""
    path = Path(path)
    if path.is_dir() and is_mlx_folder(path):
        return True
    config = nemo_config(path)
    return config is not None and prompted(config)


def is_mlx_folder(path: Path) -> bool:
    """mlx-community's layout (mlx-audio's nemotron_asr): config.json naming model_type nemotron_asr."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "nemotron_asr"


def load(path: Path, pins: dict[str, str] | None = None, keep_quantized: bool | Keep = False) -> Checkpoint:
    """A Nemotron streaming ``.nemo`` or mlx-community folder: config, tokenizer and weights, each tensor
    shape-checked, naming the file and the tensor. A folder quantized by mlx-audio keeps its encoder's and prompt
    output layer's packed weights with ``keep_quantized`` (MLX's quantized layers); else, and for the transducer
    (numpy) always, they are widened to float32."""
    path = Path(path)
    if path.is_dir() and is_mlx_folder(path):
        ckpt = _load_mlx(path, keep_quantized)
    else:
        nemo_path = nemo_file(path)
        if nemo_path is None:
            raise CheckpointError(f"{path}: not a Nemotron .nemo file, a folder holding exactly one, or an "
                                  "mlx-community folder (config.json with model_type nemotron_asr, model.safetensors)")
        path = nemo_path
        nemo, dims, front, streaming, vocabulary = read_nemo(path)
        weights = nemo_weights(nemo, front, path)
        check_shapes(weights, shapes(dims, streaming), path)
        ckpt = Checkpoint(path, front, dims, streaming, vocabulary, weights, [path])
    if pins:
        verify(ckpt.files, pins)
    return ckpt


def _load_mlx(folder: Path, keep_quantized: bool | Keep = False) -> Checkpoint:
    """mlx-audio's config (its converter's keys) read as the NeMo config it came from; the weights as Parakeet's
    mlx-community folders hold them (float16, bfloat16 or float32; computed in float32), or quantized by mlx-audio
    (its converter's ``--quantize``, or ``mlx_audio.convert -q``: a ``quantization`` block, packed Linears and
    Embeddings)."""
    config_path, weights_path = folder / "config.json", folder / "model.safetensors"
    config = read_json_object(config_path)
    if not weights_path.is_file():
        raise CheckpointError(f"{folder}: model.safetensors is missing")
    for key in ("preprocessor", "encoder", "prompt", "decoder", "joint"):
        if not isinstance(config.get(key), dict):
            raise CheckpointError(f"{config_path}: {key} must be an object")
    dec, joint, prompt = config["decoder"], config["joint"], config["prompt"]
    nemo_config = {
        "preprocessor": config["preprocessor"], "encoder": config["encoder"],
        "decoder": {"vocab_size": dec.get("vocab_size"), "blank_as_pad": dec.get("blank_as_pad", True),
                    "prednet": {k: dec.get(k) for k in ("pred_hidden", "pred_rnn_layers")}},
        "joint": {"jointnet": {k: joint.get(k) for k in ("joint_hidden", "activation")}},
        "decoding": {"greedy": {"max_symbols": config.get("max_symbols", DEFAULT_MAX_SYMBOLS)}},
        "model_defaults": {"prompt_dictionary": prompt.get("prompt_dictionary"), "num_prompts": prompt.get("num_prompts"),
                           "default_language": config.get("default_language"),
                           "default_att_context_size": config.get("default_att_context_size")},
    }
    if config["preprocessor"].get("pad_mode", "constant") != "constant":
        raise CheckpointError(f"{config_path}: preprocessor.pad_mode {config['preprocessor']['pad_mode']!r}; NeMo's "
                              "STFT pads with zeros (constant)")
    dims, front = model_config(nemo_config, config_path, streaming=True)
    streaming = streaming_config(nemo_config, config_path)
    pieces = config.get("vocabulary")
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        raise CheckpointError(f"{config_path}: vocabulary must be a list of strings")
    vocabulary = Vocabulary.from_pieces(pieces)
    check_vocabulary(vocabulary, dims, f"{config_path}: vocabulary")
    want = shapes(dims, streaming)
    weights, quantized = read_folder(weights_path, config, config_path, want, keep_quantized, mlx_computed)
    check_folder(weights, quantized, want, weights_path)
    return Checkpoint(folder, front, dims, streaming, vocabulary, weights, [config_path, weights_path], quantized)


def mlx_computed(module: str) -> bool:
    """The modules MLX computes through their layers, which may stay packed: the encoder's and the prompt's output
    Linear (its first one is read as columns, model.Prompt; the transducer runs in numpy)."""
    return module.startswith("encoder.") or module == "prompt_kernel.2"
