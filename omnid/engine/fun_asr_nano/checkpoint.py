"""Fun-ASR-Nano checkpoints as FunAudioLLM releases them: ``config.yaml`` (``model: FunASRNano``, the encoder's,
adaptor's and front end's settings, ``llm_conf.init_param_path`` naming the LLM folder), ``model.pt`` (the state
dict inside ``{"state_dict": ...}``: ``audio_encoder.*``, ``audio_adaptor.*``, ``llm.*``; read without torch) and the
LLM folder (``Qwen3-0.6B/``: the Qwen3 config.json and tokenizer files). Every tensor is checked against the shapes
the configs imply, naming the file and the tensor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.funasr.adaptor import AdaptorDims
from omnid.engine.funasr.frontend import FrontEnd, read_cmvn
from omnid.engine.funasr.sanm import SanmDims, mlx_weights
from omnid.engine.nemo.torch_zip import read_state_dict
from omnid.engine.pins import verify
from omnid.engine.qwen3.checkpoint import TextDims
from omnid.engine.qwen3.tokenizer import ChatTokenizer, tokenizer_files
from omnid.engine.yaml_file import read_yaml_file

MODEL = "FunASRNano"
ENCODER = "SenseVoiceEncoderSmall"
ADAPTOR = "Transformer"
LLM_FOLDER = "Qwen3-0.6B"
FRONTEND: dict[str, str | int] = {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25, "frame_shift": 10, "lfr_m": 7,
            "lfr_n": 6}
WIDTH = 80 * 7  # the stacked features: 80 mel bins, 7 frames
MAX_WEIGHT_BYTES = 8 << 30  # the real model.pt is about 2 GB in bfloat16
PARTS = ("audio_encoder.", "audio_adaptor.", "llm.")


@dataclass
class Checkpoint:
    path: Path
    front: FrontEnd
    encoder: SanmDims
    adaptor: AdaptorDims
    text: TextDims
    low_frame_rate: bool  # the prompt takes the adaptor's first slots(T) rows (else all T)
    tokenizer: ChatTokenizer
    encoder_weights: list[tuple[str, mx.array]]
    adaptor_weights: list[tuple[str, mx.array]]
    llm_weights: list[tuple[str, mx.array]]
    files: list[Path] = field(default_factory=list)


def is_fun_asr_nano(path: Path) -> bool:
    try:
        return (path / "config.yaml").is_file() and read_yaml_file(path / "config.yaml").get("model") == MODEL
    except CheckpointError:
        return False


def _section(config: dict[str, Any], key: str, source: Path) -> dict[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise CheckpointError(f"{source}: {key} must be a mapping")
    return value


def _int(section: dict[str, Any], key: str, default: int, source: Path, name: str) -> int:
    value = section.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CheckpointError(f"{source}: {name}.{key} must be a non-negative integer, not {value!r}")
    return value


def _llm_folder(path: Path, config: dict[str, Any]) -> Path:
    """The LLM folder: llm_conf.init_param_path where it is a folder (relative to the checkpoint, or absolute and
    present), else the release's Qwen3-0.6B beside config.yaml."""
    named = _section(config, "llm_conf", path / "config.yaml").get("init_param_path")
    if isinstance(named, str) and named:
        for candidate in (path / named, Path(named)):
            if candidate.is_dir():
                return candidate
    return path / LLM_FOLDER


def _text_dims(folder: Path) -> TextDims:
    source = folder / "config.json"
    try:
        c = json.loads(source.read_text())
    except FileNotFoundError as exc:
        raise CheckpointError(f"{source}: missing (the LLM's config)") from exc
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{source}: cannot read: {exc}") from exc
    try:
        hidden, heads = int(c["hidden_size"]), int(c["num_attention_heads"])
        return TextDims(int(c["vocab_size"]), hidden, int(c["intermediate_size"]), int(c["num_hidden_layers"]),
                        heads, int(c["num_key_value_heads"]), int(c.get("head_dim", hidden // heads)),
                        float(c.get("rope_theta", 1e6)), float(c.get("rms_norm_eps", 1e-6)),
                        bool(c.get("tie_word_embeddings", True)))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: not a Qwen3 config ({type(exc).__name__}: {exc})") from exc


def load(path: Path, pins: dict[str, str] | None = None) -> Checkpoint:
    path = Path(path)
    source = path / "config.yaml"
    if not path.is_dir() or not source.is_file():
        raise CheckpointError(f"{path}: no Fun-ASR-Nano checkpoint (a folder with config.yaml, model.pt and "
                              f"{LLM_FOLDER}/)")
    config = read_yaml_file(source)
    for key, want in (("model", MODEL), ("audio_encoder", ENCODER), ("audio_adaptor", ADAPTOR)):
        if config.get(key) != want:
            raise CheckpointError(f"{source}: {key} is {config.get(key)!r}, not {want}")
    front = _section(config, "frontend_conf", source)
    for name, value in FRONTEND.items():
        if front.get(name, value) != value:
            raise CheckpointError(f"{source}: frontend_conf.{name} is {front.get(name)!r}; Fun-ASR-Nano's front end "
                                  f"has {value!r}")
    width = WIDTH
    shift, scale = np.zeros(width, np.float32), np.ones(width, np.float32)
    if isinstance(front.get("cmvn_file"), str) and front["cmvn_file"]:
        shift, scale = read_cmvn(path / Path(front["cmvn_file"]).name)
    e, a = _section(config, "audio_encoder_conf", source), _section(config, "audio_adaptor_conf", source)
    encoder = SanmDims(width, _int(e, "output_size", 512, source, "audio_encoder_conf"),
                       _int(e, "attention_heads", 4, source, "audio_encoder_conf"),
                       _int(e, "linear_units", 2048, source, "audio_encoder_conf"),
                       _int(e, "num_blocks", 50, source, "audio_encoder_conf"),
                       _int(e, "tp_blocks", 20, source, "audio_encoder_conf"),
                       _int(e, "kernel_size", 11, source, "audio_encoder_conf"),
                       _int(e, "sanm_shfit", 0, source, "audio_encoder_conf"))
    llm = _llm_folder(path, config)
    text = _text_dims(llm)
    adaptor = AdaptorDims(encoder.d_model, text.hidden_size, _int(a, "ffn_dim", 2048, source, "audio_adaptor_conf"),
                          _int(a, "n_layer", 2, source, "audio_adaptor_conf"),
                          _int(a, "attention_heads", 8, source, "audio_adaptor_conf"),
                          max(1, _int(a, "downsample_rate", 1, source, "audio_adaptor_conf")))
    tokenizer = ChatTokenizer.from_folder(llm)
    weights = path / "model.pt"
    files = [source, weights, llm / "config.json", *tokenizer_files(llm)]
    if pins:
        verify(files, pins)
    if not weights.is_file():
        raise CheckpointError(f"{weights}: missing (the model's weights)")
    state = read_state_dict(weights, max_bytes=MAX_WEIGHT_BYTES)
    state = {k: v for k, v in state.items() if k.startswith(PARTS)}  # a CTC head, where a release has one, unused
    head = state.pop("llm.lm_head.weight", None)
    if text.tied and head is not None and "llm.model.embed_tokens.weight" in state and \
            not np.array_equal(head, state["llm.model.embed_tokens.weight"]):
        raise CheckpointError(f"{weights}: tensor llm.lm_head.weight differs from the embedding it is tied to")
    if not text.tied and head is not None:
        state["llm.lm_head.weight"] = head

    def part(prefix: str) -> list[tuple[str, mx.array]]:
        return [(k.removeprefix(prefix), mx.array(np.asarray(v, np.float32))) for k, v in state.items()
                if k.startswith(prefix)]

    return Checkpoint(path, FrontEnd(shift, scale), encoder, adaptor, text,
                      bool(a.get("use_low_frame_rate", False)), tokenizer,
                      mlx_weights(state, "audio_encoder."), part("audio_adaptor."), part("llm."), files)
