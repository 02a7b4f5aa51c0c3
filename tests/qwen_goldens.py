"""The tiny random Qwen3-ASR checkpoint and the official implementation's goldens (scripts/qwen3_asr_goldens.py),
and conversions of that checkpoint into the other layouts a user will have (mlx-community, transformers -hf)."""

from __future__ import annotations

import json
import shutil
from functools import lru_cache
from pathlib import Path

import mlx.core as mx
import numpy as np

from tests.helpers import ROOT, clip_audio

TINY = ROOT / "tests" / "goldens" / "qwen3_asr_tiny"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
# Official margins below this are near-ties: float32 arithmetic in another order may pick the other token (spec 6.2).
CLEAR = 1e-2
LANGUAGE_CODES = {"English": "en", None: None}


@lru_cache(maxsize=1)
def meta() -> dict:
    return json.loads((TINY / "goldens.json").read_text())


@lru_cache(maxsize=1)
def arrays() -> dict[str, np.ndarray]:
    with np.load(TINY / "goldens.npz") as data:
        return {k: data[k] for k in data.files}


@lru_cache(maxsize=8)
def clip(name: str) -> np.ndarray:
    c = meta()["clips"][name]
    audio = clip_audio(Path(c["path"]).stem)[int(c["start_s"] * 16000) : int(c["end_s"] * 16000)]
    assert len(audio) == c["samples"] and abs(float(np.float64(audio).sum()) - c["sum"]) < 1e-3, "corpus audio moved"
    return audio


def clear_prefix(tokens: list[int], margins: np.ndarray | list[float]) -> int:
    """How many leading tokens were chosen by a clear margin (comparison stops at the first near-tie)."""
    for i, m in enumerate(margins):
        if m <= CLEAR:
            return i
    return len(tokens)


def tiny_weights() -> dict[str, mx.array]:
    loaded = mx.load(str(TINY / "model.safetensors"))
    assert isinstance(loaded, dict)
    return loaded


def copy_tokenizer(dest: Path) -> None:
    for name in TOKENIZER_FILES + ("generation_config.json", "preprocessor_config.json"):
        shutil.copy(TINY / name, dest / name)


def write_original(dest: Path, dtype: mx.Dtype = mx.float32, decoder_bits: int | None = None,
                   group_size: int = 32) -> Path:
    """The original layout again, e.g. in bf16 as the real repos ship it; with ``decoder_bits``, the decoder's
    matrices replaced by what affine quantization at that width keeps of them (the float twin of
    write_mlx_community's checkpoint)."""
    dest.mkdir(parents=True, exist_ok=True)
    copy_tokenizer(dest)
    shutil.copy(TINY / "config.json", dest / "config.json")
    weights = tiny_weights()
    if decoder_bits:
        for name, value in weights.items():
            if name.startswith("thinker.model.") and name.endswith(".weight") and value.ndim == 2:
                weights[name] = mx.dequantize(*mx.quantize(value, group_size=group_size, bits=decoder_bits),
                                              group_size=group_size, bits=decoder_bits)
        weights["thinker.lm_head.weight"] = weights["thinker.model.embed_tokens.weight"]
    mx.save_safetensors(str(dest / "model.safetensors"), {k: v.astype(dtype) for k, v in weights.items()})
    return dest


def write_mlx_community(dest: Path, bits: int | None, group_size: int = 32) -> Path:
    """mlx-community's layout: no thinker. prefix, conv weights in MLX order, no tied lm_head, the decoder's
    linears and embedding affine-quantized, ``quantization`` in the config."""
    dest.mkdir(parents=True, exist_ok=True)
    copy_tokenizer(dest)
    out: dict[str, mx.array] = {}
    for name, value in tiny_weights().items():
        if name == "thinker.lm_head.weight":
            continue
        name = name.removeprefix("thinker.")
        if name.startswith("audio_tower.conv2d") and name.endswith(".weight"):
            value = value.transpose(0, 2, 3, 1)
        quantizable = name.startswith("model.") and name.endswith(".weight") and value.ndim == 2
        if bits and quantizable:
            packed, scales, biases = mx.quantize(value, group_size=group_size, bits=bits)
            module = name.removesuffix(".weight")
            out[name], out[module + ".scales"], out[module + ".biases"] = packed, scales, biases
        else:
            out[name] = value
    mx.save_safetensors(str(dest / "model.safetensors"), out)
    config = json.loads((TINY / "config.json").read_text())
    if bits:
        config["quantization"] = {"group_size": group_size, "bits": bits}
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def write_hf(dest: Path) -> Path:
    """transformers >= 5.13's layout: top-level audio/text configs, model.audio_tower / model.language_model,
    the projector as multi_modal_projector.linear_{1,2}, no audio k_proj bias."""
    dest.mkdir(parents=True, exist_ok=True)
    copy_tokenizer(dest)
    out: dict[str, mx.array] = {}
    for name, value in tiny_weights().items():
        if name.endswith("self_attn.k_proj.bias") and "audio_tower" in name:
            continue
        name = (name.replace("thinker.audio_tower.proj1.", "model.multi_modal_projector.linear_1.")
                .replace("thinker.audio_tower.proj2.", "model.multi_modal_projector.linear_2.")
                .replace("thinker.audio_tower.", "model.audio_tower.")
                .replace("thinker.model.", "model.language_model.")
                .replace("thinker.lm_head.", "lm_head."))
        out[name] = value
    mx.save_safetensors(str(dest / "model.safetensors"), out)
    thinker = json.loads((TINY / "config.json").read_text())["thinker_config"]
    config = {"model_type": "qwen3_asr", "architectures": ["Qwen3ASRForConditionalGeneration"],
              "audio_config": thinker["audio_config"], "text_config": thinker["text_config"],
              "audio_token_id": thinker["audio_token_id"], "audio_start_token_id": thinker["audio_start_token_id"]}
    (dest / "config.json").write_text(json.dumps(config))
    return dest
