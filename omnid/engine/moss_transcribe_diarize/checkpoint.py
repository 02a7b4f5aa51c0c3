"""MOSS-Transcribe-Diarize checkpoints in the layouts a user has: transformers' conversion (config.json with
``model_type = "moss_transcribe_diarize"``, ``audio_config`` and ``text_config``; tensors ``model.audio_tower.*``,
``model.multi_modal_projector.{linear_1,linear_2,norm}.*``, ``model.language_model.*``, ``lm_head.weight`` unless
tied) and the original release's names (``model.whisper_encoder.*``, ``model.vq_adaptor.layers.{0,2,3}.*``, the
tied head stored as its own copy), one safetensors file or shards; the Qwen tokenizer beside them (vocab.json,
merges.txt, and its added tokens in tokenizer_config.json or tokenizer.json).

Tensors come out under this package's module names (model.py) in MLX layouts, each checked against the shape the
config implies (file and tensor named on error); float32 whatever the checkpoint's dtype."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.moss_transcribe_diarize.model import MERGE, AudioDims, MossDims
from omnid.engine.pins import verify
from omnid.engine.qwen3.checkpoint import TextDims
from omnid.engine.qwen3.tokenizer import ChatTokenizer, tokenizer_files
from omnid.engine.tensor_file import weight_files
from omnid.engine.whisper_net import hf_to_canonical

MODEL_TYPE = "moss_transcribe_diarize"
AUDIO_TOKEN_ID = 151671  # the released checkpoint's <|audio_pad|>, where the config names none
# The original release's names -> the conversion's (transformers' convert_moss_transcribe_diarize_to_hf.py).
ORIGINAL = [(re.compile(p), r) for p, r in [
    (r"^model\.whisper_encoder\.", "model.audio_tower."),
    (r"^model\.vq_adaptor\.layers\.(?:layers\.)?0\.", "model.multi_modal_projector.linear_1."),
    (r"^model\.vq_adaptor\.layers\.(?:layers\.)?2\.", "model.multi_modal_projector.linear_2."),
    (r"^model\.vq_adaptor\.layers\.(?:layers\.)?3\.", "model.multi_modal_projector.norm."),
]]


@dataclass
class Checkpoint:
    path: Path
    dims: MossDims
    audio_token_id: int
    tokenizer: ChatTokenizer
    weights: list[tuple[str, mx.array]]
    files: list[Path]


def layout_of(path: Path) -> str:
    """"original" (the release's config keeps adaptor_input_dim, which transformers' conversion drops) or
    "transformers"."""
    return "original" if "adaptor_input_dim" in read_json_object(path / "config.json") else "transformers"


def is_moss(path: Path) -> bool:
    try:
        return path.is_dir() and read_json_object(path / "config.json").get("model_type") == MODEL_TYPE
    except CheckpointError:
        return False


def _int(section: dict[str, Any], key: str, source: Path, name: str, default: int | None = None) -> int:
    value = section.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CheckpointError(f"{source}: {name}.{key} must be a positive integer, not {value!r}")
    return value


def dims_of(config: dict[str, Any], source: Path) -> MossDims:
    audio, text = config.get("audio_config"), config.get("text_config")
    if not isinstance(audio, dict) or not isinstance(text, dict):
        raise CheckpointError(f"{source}: audio_config and text_config must be objects")
    a = AudioDims(_int(audio, "num_mel_bins", source, "audio_config", 80),
                  _int(audio, "max_source_positions", source, "audio_config", 1500),
                  _int(audio, "hidden_size", source, "audio_config", audio.get("d_model", 1024)),
                  _int(audio, "num_attention_heads", source, "audio_config", audio.get("encoder_attention_heads", 16)),
                  _int(audio, "num_hidden_layers", source, "audio_config", audio.get("encoder_layers", 24)))
    hidden, heads = _int(text, "hidden_size", source, "text_config"), _int(text, "num_attention_heads", source, "text_config")
    rope = text.get("rope_parameters")
    theta = (rope.get("rope_theta") if isinstance(rope, dict) else None) or text.get("rope_theta") or 1e6
    tied = bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True)))
    t = TextDims(_int(text, "vocab_size", source, "text_config"), hidden,
                 _int(text, "intermediate_size", source, "text_config"),
                 _int(text, "num_hidden_layers", source, "text_config"), heads,
                 _int(text, "num_key_value_heads", source, "text_config", heads),
                 _int(text, "head_dim", source, "text_config", hidden // heads), float(str(theta)),
                 float(text.get("rms_norm_eps", 1e-6)), tied)
    ffn = _int(audio, "intermediate_size", source, "audio_config", audio.get("encoder_ffn_dim", 4 * a.width))
    if ffn != 4 * a.width:
        raise CheckpointError(f"{source}: audio_config.intermediate_size {ffn} is not 4 x hidden_size (Whisper's "
                              f"encoder, which omnid's is)")
    merge = _int(config, "audio_merge_size", source, "config", MERGE)
    if merge != MERGE or a.n_mels != 80:
        raise CheckpointError(f"{source}: audio_merge_size {merge} and num_mel_bins {a.n_mels}: omnid reads the "
                              f"released model's {MERGE} and 80")
    return MossDims(a, t, merge)


def ours(name: str) -> str | None:
    """A checkpoint tensor's name in this package's modules (None: not the model's)."""
    for pattern, repl in ORIGINAL:
        name = pattern.sub(repl, name)
    if name.startswith("model.audio_tower."):
        canon = hf_to_canonical("encoder." + name.removeprefix("model.audio_tower."))
        return "audio_tower." + canon.removeprefix("encoder.")
    if name.startswith("model.multi_modal_projector."):
        return name.removeprefix("model.")
    if name.startswith("model.language_model."):
        return "language_model.model." + name.removeprefix("model.language_model.")
    if name == "lm_head.weight":
        return "language_model.lm_head.weight"
    return None


def expected_shapes(d: MossDims) -> dict[str, tuple[int, ...]]:
    a, t = d.audio, d.text
    w, f = a.width, 4 * a.width
    out: dict[str, tuple[int, ...]] = {
        "audio_tower.conv1.weight": (w, 3, a.n_mels), "audio_tower.conv1.bias": (w,),
        "audio_tower.conv2.weight": (w, 3, w), "audio_tower.conv2.bias": (w,),
        "audio_tower.positional_embedding": (a.positions, w),
        "audio_tower.ln_post.weight": (w,), "audio_tower.ln_post.bias": (w,),
    }
    for i in range(a.layers):
        p = f"audio_tower.blocks.{i}."
        for ln in ("attn_ln", "mlp_ln"):
            out |= {p + ln + ".weight": (w,), p + ln + ".bias": (w,)}
        for proj in ("query", "value", "out"):
            out |= {p + f"attn.{proj}.weight": (w, w), p + f"attn.{proj}.bias": (w,)}
        out |= {p + "attn.key.weight": (w, w), p + "mlp1.weight": (f, w), p + "mlp1.bias": (f,),
                p + "mlp2.weight": (w, f), p + "mlp2.bias": (w,)}
    h = t.hidden_size
    out |= {"multi_modal_projector.linear_1.weight": (h, w * d.merge), "multi_modal_projector.linear_1.bias": (h,),
            "multi_modal_projector.linear_2.weight": (h, h), "multi_modal_projector.linear_2.bias": (h,),
            "multi_modal_projector.norm.weight": (h,), "multi_modal_projector.norm.bias": (h,)}
    q, kv = t.heads * t.head_dim, t.kv_heads * t.head_dim
    m = "language_model.model."
    out |= {m + "embed_tokens.weight": (t.vocab_size, h), m + "norm.weight": (h,)}
    for i in range(t.layers):
        p = f"{m}layers.{i}."
        out |= {p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                p + "self_attn.q_norm.weight": (t.head_dim,), p + "self_attn.k_norm.weight": (t.head_dim,),
                p + "mlp.gate_proj.weight": (t.intermediate_size, h), p + "mlp.up_proj.weight": (t.intermediate_size, h),
                p + "mlp.down_proj.weight": (h, t.intermediate_size), p + "input_layernorm.weight": (h,),
                p + "post_attention_layernorm.weight": (h,)}
    if not t.tied:
        out["language_model.lm_head.weight"] = (t.vocab_size, h)
    return out


def load(path: Path, pins: dict[str, str] | None = None) -> Checkpoint:
    path = Path(path)
    source = path / "config.json"
    config = read_json_object(source)
    if config.get("model_type") != MODEL_TYPE:
        raise CheckpointError(f"{source}: model_type is {config.get('model_type')!r}, not {MODEL_TYPE!r}")
    dims = dims_of(config, source)
    audio_token = config.get("audio_token_id", AUDIO_TOKEN_ID)
    tokenizer = ChatTokenizer.from_folder(path)
    if not isinstance(audio_token, int) or tokenizer.special("<|audio_pad|>") != audio_token:
        raise CheckpointError(f"{source}: audio_token_id {audio_token!r} is not the tokenizer's <|audio_pad|>")
    expected = expected_shapes(dims)
    found = weight_files(path)
    if pins:
        verify([source, *found.files, *(f for f in tokenizer_files(path) if f.is_file())], pins)
    weights: dict[str, mx.array] = {}
    for file, tensors in found.read():
        for name, tensor in tensors.items():
            mine = ours(name)
            if mine == "language_model.lm_head.weight" and dims.text.tied:
                continue  # the original release stores the tied head as its own copy
            if mine is None or mine not in expected:
                raise CheckpointError(f"{file}: tensor {name} is not part of MOSS-Transcribe-Diarize")
            array = tensor.astype(mx.float32)
            if mine.endswith((".conv1.weight", ".conv2.weight")) and array.ndim == 3 and \
                    array.shape[1] != 3 and array.shape[2] == 3:
                array = array.transpose(0, 2, 1)  # PyTorch (out, in, k) -> MLX (out, k, in)
            if tuple(array.shape) != expected[mine]:
                raise CheckpointError(f"{file}: tensor {name} has shape {tuple(array.shape)}, expected "
                                      f"{expected[mine]} from {source.name}")
            weights[mine] = array
    missing = sorted(set(expected) - set(weights))
    if missing:
        raise CheckpointError(f"{path}: tensor {missing[0]} is missing ({len(missing)} in all)")
    if not all(bool(mx.isfinite(a).all()) for a in weights.values()):
        bad = next(k for k, a in weights.items() if not bool(mx.isfinite(a).all()))
        raise CheckpointError(f"{path}: tensor {bad} holds values that are not finite")
    files = [source, *found.files, *(f for f in tokenizer_files(path) if f.is_file())]
    return Checkpoint(path, dims, audio_token, tokenizer, list(weights.items()), files)
