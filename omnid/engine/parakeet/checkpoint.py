"""Parakeet checkpoints: NVIDIA's ``.nemo`` (``model_config.yaml``, ``model_weights.ckpt`` and the SentencePiece
``tokenizer.model``, read without torch through engine/nemo), and mlx-community's folder as parakeet-mlx reads it
(the same config as ``config.json`` with the vocabulary in ``joint.vocabulary``, and ``model.safetensors``).

The config says everything: the front end, the FastConformer's sizes and switches, the prediction network and
joint, the decoder kind (TDT when it has durations, RNN-T, and a hybrid's CTC head), the greedy ``max_symbols``.
Every tensor is checked against the shape the config implies, naming the file and the tensor; weights are float32
under this package's names in MLX layouts.
"""

from __future__ import annotations

import json
from pathlib import Path

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.nemo import archive
from omnid.engine.nemo.features import FrontEnd
from omnid.engine.nemo.mlx_folder import Keep, check_folder, read_folder
from omnid.engine.nemo.tokenizer import Vocabulary
from omnid.engine.nemo.transducer_checkpoint import (
    Checkpoint,
    Dims,
    check_vocabulary,
    ctc_model,
    expected_shapes,
    model_config,
    nemo_config,
    nemo_file,
    nemo_weights,
    prompted,
)
from omnid.engine.parakeet import transformers_layout
from omnid.engine.parakeet.transformers_layout import transformers_architecture
from omnid.engine.pins import verify
from omnid.engine.tensor_file import check_shapes


def is_parakeet(path: Path) -> bool:
    """Whether a path holds a Parakeet checkpoint in any of its layouts, for `omnid transcribe --model PATH`: a
    ``.nemo`` whose config has a transducer's decoder and joint, or a CTC model's head as its decoder (where a
    Sortformer's has its own modules), an mlx-community folder or a transformers folder."""
    path = Path(path)
    if path.is_dir() and (is_mlx_folder(path) or transformers_architecture(path)):
        return True
    config = nemo_config(path)
    if config is None:
        return False
    transducer = isinstance(config.get("joint"), dict) and isinstance(config.get("decoder"), dict)
    return (transducer or ctc_model(config)) and not prompted(config)


def is_mlx_folder(path: Path) -> bool:
    """mlx-community's layout (parakeet-mlx's): a NeMo config as config.json, with its vocabulary in the joint (a
    transducer's) or in the decoder (a CTC model's, whose decoder is the CTC head)."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict):
        return False
    if isinstance(config.get("joint"), dict):
        return "vocabulary" in config["joint"]
    return ctc_model(config) and "vocabulary" in config["decoder"]


def load(path: Path, pins: dict[str, str] | None = None, keep_quantized: bool | Keep = False) -> Checkpoint:
    """A ``.nemo`` file, a folder holding exactly one, mlx-community's folder (config.json + model.safetensors,
    float or quantized by mlx-audio) or the transformers layout (config.json naming ParakeetForTDT/RNNT/CTC,
    safetensors, tokenizer.json). A quantized folder's encoder keeps its packed weights with ``keep_quantized`` (for
    MLX's quantized layers); else, and for the transducer (numpy) always, they are widened to float32."""
    path = Path(path)
    if path.is_dir() and is_mlx_folder(path):
        ckpt = _load_mlx(path, keep_quantized)
    elif path.is_dir() and transformers_architecture(path):
        ckpt = transformers_layout.load(path)
    else:
        nemo = nemo_file(path)
        if nemo is None:
            raise CheckpointError(f"{path}: not a Parakeet .nemo file, a folder holding exactly one, or an "
                                  "mlx-community folder (config.json with joint.vocabulary or a CTC model's "
                                  "decoder.vocabulary, model.safetensors)")
        ckpt = _load_nemo(nemo)
    if pins:
        verify(ckpt.files, pins)
    return ckpt


def read_nemo(path: Path) -> tuple[archive.NemoFile, Dims, FrontEnd, Vocabulary]:
    """A Parakeet .nemo read and checked: its archive, the model its config describes, its vocabulary."""
    source = Path(f"{path}:model_config.yaml")

    def limit(cfg: dict) -> int:
        dims, front = model_config(cfg, source)
        return archive.state_limit(expected_shapes(dims), front)

    nemo = archive.read(path, limit, artifacts=("tokenizer.model",))
    dims, front = model_config(nemo.config, source)
    vocabulary = Vocabulary.from_sentencepiece(nemo.artifacts["tokenizer.model"], f"{path}:tokenizer.model")
    check_vocabulary(vocabulary, dims, f"{path}:tokenizer.model")
    return nemo, dims, front, vocabulary


def _load_nemo(path: Path) -> Checkpoint:
    nemo, dims, front, vocabulary = read_nemo(path)
    weights = ctc_head_names(nemo_weights(nemo, front, path), dims)
    check_shapes(weights, expected_shapes(dims), path)
    return Checkpoint(path, "nemo", front, dims, vocabulary, weights, [path])


def _load_mlx(folder: Path, keep_quantized: bool | Keep = False) -> Checkpoint:
    """parakeet-mlx's layout: NeMo's names and config, MLX's convolution layouts, each LSTM layer as Wx, Wh and one
    bias (NeMo's two summed), float16, bfloat16 or float32 (computed in float32), or quantized by mlx-audio's
    converter (``mlx_audio.convert -q``: the encoder's Linears and the joint's encoder projection)."""
    config_path, weights_path = folder / "config.json", folder / "model.safetensors"
    config = read_json_object(config_path)
    if not weights_path.is_file():
        raise CheckpointError(f"{folder}: model.safetensors is missing")
    dims, front = model_config(config, config_path)
    key = "joint" if dims.transducer else "decoder"  # a CTC model's vocabulary is its head's
    pieces = config[key]["vocabulary"]
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        raise CheckpointError(f"{config_path}: {key}.vocabulary must be a list of strings")
    vocabulary = Vocabulary.from_pieces(pieces)
    check_vocabulary(vocabulary, dims, f"{config_path}: {key}.vocabulary")
    shapes = expected_shapes(dims)
    weights, quantized = read_folder(weights_path, config, config_path, shapes, keep_quantized, mlx_computed)
    weights = ctc_head_names(weights, dims)
    check_folder(weights, quantized, shapes, weights_path)
    return Checkpoint(folder, "mlx", front, dims, vocabulary, weights, [config_path, weights_path], quantized)


def mlx_computed(module: str) -> bool:
    """The modules MLX computes (the encoder's), which may stay packed; the transducer and CTC head run in numpy."""
    return module.startswith("encoder.")


def ctc_head_names(weights: dict, dims: Dims) -> dict:
    """A CTC model's head is its ``decoder`` (NeMo's and parakeet-mlx's name): under the hybrid's CTC head's names
    here, its 1x1 convolution (O, 1, I in MLX's layout) as a linear map. A transducer's weights as they are."""
    if dims.transducer:
        return weights
    for part in ("weight", "bias"):
        name = f"decoder.decoder_layers.0.{part}"
        if name in weights:
            t = weights.pop(name)
            weights[f"ctc_decoder.decoder_layers.0.{part}"] = t[:, 0, :] if t.ndim == 3 else t
    return weights
