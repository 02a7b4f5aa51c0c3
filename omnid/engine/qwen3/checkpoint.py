"""Qwen3-ASR checkpoints from a local folder, in the three layouts a user will have, validated at load.

* ``qwen``: the original repos (``Qwen/Qwen3-ASR-0.6B``): ``thinker.*`` keys, PyTorch conv layout, bf16, a
  ``config.json`` with ``thinker_config`` and a stored copy of the tied ``thinker.lm_head.weight``;
* ``mlx``: mlx-community's conversions (mlx-audio's converter): no prefix (``audio_tower.*``, ``model.*``), conv
  weights already in MLX's (out, kH, kW, in) layout, the decoder quantized or not (``.scales``, and ``.biases`` in
  affine mode; ``quantization`` in the config, per module for mixed recipes: :mod:`omnid.engine.quantization`);
* ``hf``: transformers >= 5.13's native layout: top-level ``audio_config``/``text_config``, ``model.audio_tower.*``,
  ``model.language_model.*`` (and ``model.multi_modal_projector.linear_{1,2}``), no audio ``k_proj.bias`` (a
  per-query constant that softmax cancels: loaded as zeros).

Qwen3-ForcedAligner checkpoints are the same network with another head: ``thinker_config.model_type`` names the
forced aligner, ``classify_num`` gives its time classes (``lm_head`` is (classes, hidden), never tied), and the
top-level ``timestamp_token_id`` and ``timestamp_segment_time`` (ms a class) say how its answer is read.

Every layout is renamed onto :mod:`omnid.engine.qwen3.model`'s names (``audio.*``, ``text.*``), checked tensor by
tensor against the shapes the config implies (file and tensor named), and unquantized tensors widened to float32.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.quantization import Block, Quantization, packed, read_block
from omnid.engine.tensor_file import weight_files

FLOAT_DTYPES = {mx.float16, mx.bfloat16, mx.float32}


@dataclass(frozen=True)
class AudioDims:
    n_mels: int
    d_model: int
    layers: int
    heads: int
    ffn_dim: int
    output_dim: int
    conv_channels: int  # downsample_hidden_size
    n_window: int  # half a chunk: chunks are 2 * n_window mel frames
    n_window_infer: int  # frames per attention window


@dataclass(frozen=True)
class TextDims:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    tied: bool
    classes: int = 0  # a forced aligner's head: this many time classes instead of the vocabulary

    @property
    def head_rows(self) -> int:
        return self.classes or self.vocab_size


@dataclass(frozen=True)
class TokenIds:
    audio_pad: int
    audio_start: int
    audio_end: int | None  # often absent from config.json: then the tokenizer's


@dataclass(frozen=True)
class Timestamps:
    """How a forced aligner's answer is read: the marker token whose positions are classified, and the ms a class."""

    token_id: int
    segment_ms: float


@dataclass(frozen=True)
class Checkpoint:
    folder: Path
    layout: str
    audio: AudioDims
    text: TextDims
    ids: TokenIds
    languages: tuple[str, ...]  # English names the checkpoint supports (support_languages)
    weights: dict[str, mx.array]
    quantized: dict[str, Quantization]  # module path -> how its weight is packed
    files: tuple[Path, ...]
    head_differs: bool = False  # a stored lm_head that a tied config ignores is not the embedding
    timestamps: Timestamps | None = None  # a forced aligner's (None: a transcription model)


def is_qwen3_asr(folder: Path) -> bool:
    """Whether a folder holds a checkpoint of the Qwen3-ASR network (by its config), a transcription model or a
    forced aligner, for `omnid transcribe --model FOLDER` and `omnid models`."""
    raw = _config(folder)
    return raw is not None and (str(raw.get("model_type", "")).startswith("qwen3_asr") or "thinker_config" in raw)


def is_forced_aligner(folder: Path) -> bool:
    """Whether such a folder holds a forced aligner: the official test, its thinker's model_type (as load_checkpoint
    tells it)."""
    raw = _config(folder)
    if raw is None or not is_qwen3_asr(folder):
        return False
    thinker = raw.get("thinker_config")
    return "forced_aligner" in str((thinker if isinstance(thinker, dict) else raw).get("model_type", ""))


def _config(folder: Path) -> dict[str, Any] | None:
    try:
        raw = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return raw if isinstance(raw, dict) else None


def load_checkpoint(folder: Path) -> Checkpoint:
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: " + ("not a folder" if folder.exists() else "no such folder"))
    config_path = folder / "config.json"
    raw = read_json_object(config_path)
    found = weight_files(folder, "*.safetensors")  # the original repos' shards by their index, else every file
    if not found.shards:
        raise CheckpointError(f"{folder}: no *.safetensors files (a Qwen3-ASR checkpoint keeps its weights there)")
    files = found.files
    tensors: dict[str, tuple[mx.array, Path]] = {}
    for path, loaded in found.read():
        for name, value in loaded.items():
            tensors[name] = (value, path)
    layout = _layout(tensors, config_path)
    thinker = raw.get("thinker_config") if layout != "hf" else raw
    if not isinstance(thinker, dict):
        raise CheckpointError(f"{config_path}: no thinker_config")
    audio, text = _dims(thinker, config_path)
    ids = TokenIds(
        audio_pad=_field(thinker, "audio_token_id", int, config_path),
        audio_start=_field(thinker, "audio_start_token_id", int, config_path),
        audio_end=thinker.get("audio_end_token_id") if isinstance(thinker.get("audio_end_token_id"), int) else None,
    )
    renamed = {_rename(name, layout): entry for name, entry in tensors.items()}
    renamed.pop("unused", None)
    # The block's per-module entries are under the file's module paths: renamed as the tensors are.
    block = read_block(raw, config_path, lambda module: _rename(module + ".weight", layout).removesuffix(".weight"))
    weights, quantized = _checked(renamed, audio, text, layout, block, config_path)
    languages = tuple(str(x) for x in raw.get("support_languages") or thinker.get("support_languages") or ())
    head = renamed.get("lm_head.weight")
    differs = bool(text.tied and head is not None and "text.embed_tokens" not in quantized
                   and not mx.array_equal(head[0].astype(mx.float32), weights["text.embed_tokens.weight"]).item())
    timestamps = None
    if text.classes:
        section = raw if "timestamp_token_id" in raw else thinker
        timestamps = Timestamps(_field(section, "timestamp_token_id", int, config_path),
                                _field(section, "timestamp_segment_time", float, config_path))
        if not 0 <= timestamps.token_id < text.vocab_size or timestamps.segment_ms <= 0:
            raise CheckpointError(f"{config_path}: timestamp_token_id must be a token of the vocabulary and "
                                  "timestamp_segment_time positive")
    return Checkpoint(folder, layout, audio, text, ids, languages, weights, quantized, files, differs, timestamps)


def _field(section: dict[str, Any], key: str, kind: type, path: Path, default: Any = None) -> Any:
    value = section.get(key, default)
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else kind):
        raise CheckpointError(f"{path}: {key} missing or not a {kind.__name__}")
    return kind(value)


def _dims(thinker: dict[str, Any], path: Path) -> tuple[AudioDims, TextDims]:
    a, t = thinker.get("audio_config"), thinker.get("text_config")
    if not isinstance(a, dict) or not isinstance(t, dict):
        raise CheckpointError(f"{path}: audio_config and text_config must both be objects")
    audio = AudioDims(
        n_mels=_field(a, "num_mel_bins", int, path), d_model=_field(a, "d_model", int, path),
        layers=_field(a, "encoder_layers", int, path), heads=_field(a, "encoder_attention_heads", int, path),
        ffn_dim=_field(a, "encoder_ffn_dim", int, path), output_dim=_field(a, "output_dim", int, path),
        conv_channels=_field(a, "downsample_hidden_size", int, path),
        n_window=_field(a, "n_window", int, path), n_window_infer=_field(a, "n_window_infer", int, path),
    )
    heads = _field(t, "num_attention_heads", int, path)
    hidden = _field(t, "hidden_size", int, path)
    tied = t.get("tie_word_embeddings", thinker.get("tie_word_embeddings", True))
    rope = t.get("rope_parameters")  # transformers >= 5 saves rope_theta there (its -hf folders)
    rope_section = rope if "rope_theta" not in t and isinstance(rope, dict) else t
    classes = 0
    if "forced_aligner" in str(thinker.get("model_type", "")):  # the official test: its head classifies times
        classes, tied = _field(thinker, "classify_num", int, path), False
        if classes < 2:
            raise CheckpointError(f"{path}: classify_num must be at least 2")
    text = TextDims(
        vocab_size=_field(t, "vocab_size", int, path), hidden_size=hidden,
        intermediate_size=_field(t, "intermediate_size", int, path), layers=_field(t, "num_hidden_layers", int, path),
        heads=heads, kv_heads=_field(t, "num_key_value_heads", int, path),
        head_dim=_field(t, "head_dim", int, path, hidden // heads),
        rope_theta=_field(rope_section, "rope_theta", float, path),
        rms_norm_eps=_field(t, "rms_norm_eps", float, path), tied=bool(tied), classes=classes,
    )
    if audio.d_model % audio.heads or text.heads % text.kv_heads or audio.n_window <= 0 or audio.n_window_infer <= 0:
        raise CheckpointError(f"{path}: inconsistent dimensions (heads must divide the width, query heads the "
                              "key/value heads, windows must be positive)")
    return audio, text


def _layout(tensors: dict[str, Any], path: Path) -> str:
    names = tensors.keys()
    if any(n.startswith("thinker.") for n in names):
        return "qwen"
    if any(n.startswith("model.audio_tower.") or n.startswith("model.language_model.") for n in names):
        return "hf"
    if any(n.startswith("audio_tower.") for n in names):
        return "mlx"
    raise CheckpointError(f"{path.parent}: no Qwen3-ASR tensors (expected thinker.*, audio_tower.* or "
                          "model.audio_tower.* names)")


_RENAMES = {
    "qwen": [(r"^thinker\.audio_tower\.", "audio."), (r"^thinker\.model\.", "text."), (r"^thinker\.lm_head\.", "lm_head.")],
    "mlx": [(r"^audio_tower\.", "audio."), (r"^model\.", "text."), (r"^lm_head\.", "lm_head.")],
    "hf": [(r"^model\.audio_tower\.", "audio."), (r"^model\.language_model\.", "text."),
           (r"^model\.multi_modal_projector\.linear_1\.", "audio.proj1."),
           (r"^model\.multi_modal_projector\.linear_2\.", "audio.proj2."), (r"^lm_head\.", "lm_head.")],
}


def _rename(name: str, layout: str) -> str:
    for pattern, repl in _RENAMES[layout]:
        if re.match(pattern, name):
            return re.sub(pattern, repl, name)
    return name


def expected_shapes(a: AudioDims, t: TextDims) -> dict[str, tuple[int, ...]]:
    """Every tensor the model needs, in MLX layouts (Linear [out, in], Conv2d [out, kH, kW, in])."""
    c, d = a.conv_channels, a.d_model
    freq = ((((a.n_mels + 1) // 2 + 1) // 2 + 1) // 2)  # three stride-2 convs over the mel bins
    shapes: dict[str, tuple[int, ...]] = {
        "audio.conv2d1.weight": (c, 3, 3, 1), "audio.conv2d1.bias": (c,),
        "audio.conv2d2.weight": (c, 3, 3, c), "audio.conv2d2.bias": (c,),
        "audio.conv2d3.weight": (c, 3, 3, c), "audio.conv2d3.bias": (c,),
        "audio.conv_out.weight": (d, c * freq),
        "audio.ln_post.weight": (d,), "audio.ln_post.bias": (d,),
        "audio.proj1.weight": (d, d), "audio.proj1.bias": (d,),
        "audio.proj2.weight": (a.output_dim, d), "audio.proj2.bias": (a.output_dim,),
    }
    for i in range(a.layers):
        p = f"audio.layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[p + f"self_attn.{proj}.weight"] = (d, d)
            shapes[p + f"self_attn.{proj}.bias"] = (d,)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            shapes[p + f"{norm}.weight"] = (d,)
            shapes[p + f"{norm}.bias"] = (d,)
        shapes[p + "fc1.weight"], shapes[p + "fc1.bias"] = (a.ffn_dim, d), (a.ffn_dim,)
        shapes[p + "fc2.weight"], shapes[p + "fc2.bias"] = (d, a.ffn_dim), (d,)
    h, q, kv = t.hidden_size, t.heads * t.head_dim, t.kv_heads * t.head_dim
    shapes["text.embed_tokens.weight"] = (t.vocab_size, h)
    shapes["text.norm.weight"] = (h,)
    for i in range(t.layers):
        p = f"text.layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (t.head_dim,), p + "self_attn.k_norm.weight": (t.head_dim,),
            p + "mlp.gate_proj.weight": (t.intermediate_size, h), p + "mlp.up_proj.weight": (t.intermediate_size, h),
            p + "mlp.down_proj.weight": (h, t.intermediate_size),
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
        })
    if not t.tied:
        shapes["lm_head.weight"] = (t.head_rows, h)
    return shapes


def _checked(tensors: dict[str, tuple[mx.array, Path]], a: AudioDims, t: TextDims, layout: str,
             block: Block | None, config_path: Path) -> tuple[dict[str, mx.array], dict[str, Quantization]]:
    shapes = expected_shapes(a, t)
    weights: dict[str, mx.array] = {}
    quantized: dict[str, Quantization] = {}
    for name, want in shapes.items():
        entry = tensors.get(name)
        if entry is None and layout == "hf" and re.fullmatch(r"audio\.layers\.\d+\.self_attn\.k_proj\.bias", name):
            weights[name] = mx.zeros(want, mx.float32)  # dropped by the -hf conversion: softmax cancels it
            continue
        if entry is None:
            raise CheckpointError(f"{config_path.parent}: tensor {name} missing ({layout} layout)")
        value, path = entry
        module = name.rsplit(".", 1)[0]
        scales = tensors.get(module + ".scales")
        if scales is not None and name.endswith(".weight"):
            biases = tensors.get(module + ".biases")
            q = packed(module, want, value, scales[0], biases[0] if biases else None, block, path)
            weights[name], weights[module + ".scales"] = value, scales[0]
            if biases:
                weights[module + ".biases"] = biases[0]
            quantized[module] = q
            continue
        if value.dtype == mx.uint32 and name.endswith(".weight"):
            raise CheckpointError(f"{path}: tensor {name} is packed (uint32), but its {module}.scales is missing")
        if block is not None and value.ndim == 2 and block.modules.get(module) and block.modules[module].quantized:
            raise CheckpointError(f"{path}: tensor {name} is a float matrix without {module}.scales, but "
                                  f"{config_path.name}'s {block.modules[module].key} says it is quantized")
        if value.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{path}: tensor {name} has dtype {value.dtype}, expected a float")
        if name.startswith("audio.conv2d") and name.endswith(".weight") and layout != "mlx":
            value = value.transpose(0, 2, 3, 1)  # PyTorch (out, in, kH, kW) -> MLX (out, kH, kW, in)
        if tuple(value.shape) != want:
            raise CheckpointError(f"{path}: tensor {name} has shape {tuple(value.shape)}, expected {want} "
                                  f"({layout} layout, from {config_path.name})")
        weights[name] = value.astype(mx.float32)
    head = tensors.get("lm_head.weight")
    if t.tied and head is not None and tuple(head[0].shape) != shapes["text.embed_tokens.weight"]:
        raise CheckpointError(f"{head[1]}: tensor lm_head.weight has shape {tuple(head[0].shape)}, expected "
                              f"{shapes['text.embed_tokens.weight']} (tied to the embedding)")
    known = set(shapes) | {"lm_head.weight"} | {f"{m}.{part}" for m in quantized for part in ("scales", "biases")}
    unknown = sorted(k for k in tensors if k not in known)
    if unknown:
        raise CheckpointError(f"{tensors[unknown[0]][1]}: unexpected tensor {unknown[0]}"
                              + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    return weights, quantized

