"""Cohere Transcribe checkpoints, in two layouts:

- **the original Hugging Face repo** (``CohereLabs/cohere-transcribe-03-2026``): ``config.json`` in NeMo's keys only
  (``preprocessor``, ``encoder``, ``transf_decoder.config_dict``, ``head``; the real one carries none of
  transformers' native ``CohereAsrConfig`` keys, whose defaults equal these sizes), ``model.safetensors`` (or
  shards by their index) under the NeMo / remote-code names in PyTorch layouts, 16-bit or float32, with
  ``preprocessor.featurizer.{fb,window}`` and every ``num_batches_tracked`` present and ignored (transformers
  ignores them too), ``generation_config.json`` (the end token) and the tokenizer's files;
- **mlx-audio 0.6.2's conversion** (``mlx_audio.convert.convert(src, dst, model_domain="stt")``, float or quantized
  ``-q``): the same config.json (plus a ``quantization`` block), ``model.safetensors`` (shards past 5 GB) and its
  always-written index, under the names its ``Model.sanitize`` gives: the decoder's ``transf_decoder._embedding`` /
  ``_decoder`` as ``transf_decoder.embedding`` / ``decoder``, convolutions channels-last, no front-end buffers; the
  tokenizer's files copied.

Both are read into one set of names (the encoder's as the shared FastConformer's, the rest as mlx-audio's) in MLX
layouts, float32, every tensor checked against the shapes the config implies, naming the file and the tensor; a
quantized folder's modules are checked by engine/quantization.py's rules (engine/nemo/mlx_folder.py reads them) and
widened to float32 on MLX's CPU device or kept packed for MLX's quantized layers.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx

from omnid.engine.cohere_asr.tokenizer import EOS_PIECE, CohereTokenizer
from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.nemo import archive
from omnid.engine.nemo.encoder_config import encoder_config
from omnid.engine.nemo.fastconformer import ConformerDims, encoder_name, encoder_shapes, mlx_layout
from omnid.engine.nemo.features import FrontEnd
from omnid.engine.nemo.mlx_folder import Keep, check_folder, read_folder
from omnid.engine.pins import verify
from omnid.engine.quantization import Quantization
from omnid.engine.tensor_file import WeightFiles, weight_files

MODEL_TYPE = "cohere_asr"
ARCHITECTURE = "CohereAsrForConditionalGeneration"
# The original names of the decoder's two parts -> mlx-audio's (this package's).
_DECODER_RENAMES = (("transf_decoder._embedding.", "transf_decoder.embedding."),
                    ("transf_decoder._decoder.", "transf_decoder.decoder."))
_HEADER_LIMIT = 64 << 20  # a safetensors header is a few hundred kB


@dataclass(frozen=True)
class DecoderDims:
    vocabulary: int  # the head's classes (the tokenizer's size)
    hidden: int
    inner: int
    layers: int
    heads: int
    positions: int  # the stored position table's rows: prompt and generated tokens together


@dataclass(frozen=True)
class Dims:
    conformer: ConformerDims
    decoder: DecoderDims


@dataclass
class Checkpoint:
    path: Path
    layout: str  # "original" (the Hub repo as Cohere ships it) or "mlx" (mlx-audio's conversion)
    front: FrontEnd
    dims: Dims
    tokenizer: CohereTokenizer
    eos: int
    weights: dict[str, Any]  # this package's names, MLX layouts, float32; packed modules as their MLX arrays
    files: list[Path] = field(default_factory=list)
    quantized: dict[str, Quantization] = field(default_factory=dict)


def is_cohere(path: Path) -> bool:
    """A folder whose config.json is Cohere Transcribe's (its model type or transformers' class)."""
    try:
        config = read_json_object(Path(path) / "config.json")
    except CheckpointError:
        return False
    names = config.get("architectures")
    return config.get("model_type") == MODEL_TYPE or (isinstance(names, list) and ARCHITECTURE in names)


def layout(folder: Path) -> str:
    """Which layout a Cohere folder's weights are in, told by their names (the index's map, else the files'
    safetensors headers): "original" (``transf_decoder._embedding...``) or "mlx" (``transf_decoder.embedding...``)."""
    found = weight_files(folder, "*.safetensors")
    if not found.shards:
        raise CheckpointError(f"{folder}: no *.safetensors weights")
    names = [n for names in found.mapped.values() for n in names] if found.mapped is not None else \
        [n for path in found.shards for n in _header_names(path)]
    if any(n.startswith("transf_decoder._embedding.") for n in names):
        return "original"
    if any(n.startswith("transf_decoder.embedding.") for n in names):
        return "mlx"
    raise CheckpointError(f"{found.index or found.shards[0]}: neither the original Cohere Transcribe names "
                          "(transf_decoder._embedding...) nor mlx-audio's (transf_decoder.embedding...); other "
                          "conversions (mlx-audio-swift's decoder.core / lm_head names) are not read")


def _header_names(path: Path) -> list[str]:
    try:
        with open(path, "rb") as f:
            raw = f.read(8)
            size = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
            if not 0 < size <= _HEADER_LIMIT:
                raise CheckpointError(f"{path}: corrupt or unreadable tensor file: no safetensors header")
            header = json.loads(f.read(size))
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise CheckpointError(f"{path}: corrupt or unreadable tensor file: {exc}") from exc
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt or unreadable tensor file: its header is no object")
    return [n for n in header if n != "__metadata__"]


def model_config(config: dict, source: Path) -> Dims:
    """config.json's NeMo sections -> the sizes (every key named on error). ``preprocessor.dither`` is not read:
    omnid applies none."""
    conformer, _front = encoder_config(config, source)
    get = archive.getter(source)
    decoder = archive.section(archive.section(config, "transf_decoder", source), "config_dict", source)
    head = archive.section(config, "head", source)
    for part, key, want in ((decoder, "hidden_act", "relu"), (decoder, "pre_ln", True)):
        if part.get(key, want) not in (want,):
            raise CheckpointError(f"{source}: transf_decoder.config_dict.{key} is {part.get(key)!r}; only "
                                  f"{want!r} is supported")
    dims = DecoderDims(vocabulary=get(head, "num_classes", int), hidden=get(decoder, "hidden_size", int),
                       inner=get(decoder, "inner_size", int), layers=get(decoder, "num_layers", int),
                       heads=get(decoder, "num_attention_heads", int),
                       positions=get(decoder, "max_sequence_length", int))
    for name, value in (("head.num_classes", dims.vocabulary), ("hidden_size", dims.hidden),
                        ("inner_size", dims.inner), ("num_layers", dims.layers),
                        ("num_attention_heads", dims.heads), ("max_sequence_length", dims.positions)):
        if value < 1:
            raise CheckpointError(f"{source}: {name} must be positive, not {value}")
    if head.get("hidden_size", dims.hidden) != dims.hidden:
        raise CheckpointError(f"{source}: head.hidden_size is {head.get('hidden_size')!r}; the decoder's hidden_size "
                              f"is {dims.hidden}")
    if dims.hidden % dims.heads:
        raise CheckpointError(f"{source}: hidden_size {dims.hidden} is not a multiple of {dims.heads} heads")
    return Dims(conformer, dims)


def front_end(config: dict, source: Path) -> FrontEnd:
    return encoder_config(config, source)[1]


def expected_shapes(d: Dims, proj: bool) -> dict[str, tuple[int, ...]]:
    """Every tensor under this package's names, in MLX layouts. ``proj``: the encoder-to-decoder projection, which
    a checkpoint whose widths differ must have."""
    shapes = encoder_shapes(d.conformer, "encoder")
    m, dec = d.conformer.d_model, d.decoder
    h = dec.hidden
    if proj:
        shapes["encoder_decoder_proj.weight"], shapes["encoder_decoder_proj.bias"] = (h, m), (h,)
    emb = "transf_decoder.embedding"
    shapes[f"{emb}.token_embedding.weight"] = (dec.vocabulary, h)
    shapes[f"{emb}.position_embedding.pos_enc"] = (dec.positions, h)
    shapes[f"{emb}.layer_norm.weight"] = shapes[f"{emb}.layer_norm.bias"] = (h,)
    for i in range(dec.layers):
        p = f"transf_decoder.decoder.layers.{i}"
        for n in ("layer_norm_1", "layer_norm_2", "layer_norm_3"):
            shapes[f"{p}.{n}.weight"] = shapes[f"{p}.{n}.bias"] = (h,)
        for sub in ("first_sub_layer", "second_sub_layer"):
            for proj_name in ("query_net", "key_net", "value_net", "out_projection"):
                shapes[f"{p}.{sub}.{proj_name}.weight"], shapes[f"{p}.{sub}.{proj_name}.bias"] = (h, h), (h,)
        shapes[f"{p}.third_sub_layer.dense_in.weight"] = (dec.inner, h)
        shapes[f"{p}.third_sub_layer.dense_in.bias"] = (dec.inner,)
        shapes[f"{p}.third_sub_layer.dense_out.weight"], shapes[f"{p}.third_sub_layer.dense_out.bias"] = \
            (h, dec.inner), (h,)
    shapes["transf_decoder.decoder.final_layer_norm.weight"] = (h,)
    shapes["transf_decoder.decoder.final_layer_norm.bias"] = (h,)
    shapes["log_softmax.mlp.layer0.weight"], shapes["log_softmax.mlp.layer0.bias"] = (dec.vocabulary, h), \
        (dec.vocabulary,)
    return shapes


def package_name(name: str) -> str:
    """An original (NeMo / remote-code) tensor name -> this package's."""
    if name.startswith("encoder."):
        return "encoder." + encoder_name(name.removeprefix("encoder."))
    for old, new in _DECODER_RENAMES:
        if name.startswith(old):
            return new + name.removeprefix(old)
    return name


def end_token(folder: Path, tokenizer: CohereTokenizer) -> int:
    """The end of a decode: generation_config.json's ``eos_token_id`` (3 in the real repo), else the vocabulary's
    ``<|endoftext|>``."""
    path = folder / "generation_config.json"
    if path.is_file():
        value = read_json_object(path).get("eos_token_id")
        if isinstance(value, list) and value:
            value = value[0]
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < tokenizer.size:
                raise CheckpointError(f"{path}: eos_token_id must be a token id, not {value!r}")
            return value
    return tokenizer.require(EOS_PIECE)


def load(path: Path, pins: dict[str, str] | None = None, keep_quantized: bool | Keep = False) -> Checkpoint:
    folder = Path(path)
    if not folder.is_dir() or not is_cohere(folder):
        raise CheckpointError(f"{folder}: not a Cohere Transcribe folder (config.json with model_type "
                              f"\"{MODEL_TYPE}\", safetensors weights, the tokenizer)")
    config_path = folder / "config.json"
    config = read_json_object(config_path)
    dims = model_config(config, config_path)
    front = front_end(config, config_path)
    tokenizer = CohereTokenizer(folder)
    if tokenizer.size != dims.decoder.vocabulary:
        raise CheckpointError(f"{tokenizer.path} has {tokenizer.size} tokens; the head (head.num_classes in "
                              f"{config_path.name}) has {dims.decoder.vocabulary}")
    eos = end_token(folder, tokenizer)
    found = weight_files(folder, "*.safetensors")
    kind = layout(folder)
    quantized: dict[str, Quantization] = {}
    if kind == "original":
        weights = _read_original(found)
    else:
        weights, quantized = _read_mlx(found, config, config_path, dims, keep_quantized)
    proj = dims.conformer.d_model != dims.decoder.hidden or "encoder_decoder_proj.weight" in weights
    source = found.shards[0] if len(found.shards) == 1 and found.index is None else found.index or folder
    check_folder(weights, quantized, expected_shapes(dims, proj), source)
    files = [config_path, tokenizer.path, *found.files]
    ckpt = Checkpoint(folder, kind, front, dims, tokenizer, eos, weights, files, quantized)
    if pins:
        verify(ckpt.files, pins)
    return ckpt


def _read_original(found: WeightFiles) -> dict[str, Any]:
    """The original names in PyTorch layouts -> this package's in MLX layouts, float32; the front end's buffers and
    batch norms' counters skipped. The widening and the layouts stay lazy MLX operations on the file's arrays,
    computed when the model takes them (mlx_folder.load_module): each weight is read and widened once, straight into
    the array the model keeps, where a numpy copy and a copy back cost a third of a 2 B model's load."""
    weights: dict[str, Any] = {}
    for path, tensors in found.read():
        for name in list(tensors):
            t = tensors.pop(name)
            if name.endswith("num_batches_tracked") or name.startswith("preprocessor."):
                continue
            ours = package_name(name)
            if ours in weights:
                raise CheckpointError(f"{path}: tensor {name} is in more than one weights file")
            weights[ours] = mlx_layout(ours, t.astype(mx.float32))
    return weights


def _read_mlx(found: WeightFiles, config: dict, config_path: Path, dims: Dims,
              keep_quantized: bool | Keep) -> tuple[dict[str, Any], dict[str, Quantization]]:
    """mlx-audio's folder: names and layouts already this package's but the encoder's (renamed by read_folder);
    quantized modules checked, then kept packed (``keep_quantized``: MLX computes every module on Metal) or
    widened."""
    shapes = expected_shapes(dims, True)
    source: Path | WeightFiles = found if found.index is not None else found.shards[0]
    return read_folder(source, config, config_path, shapes, keep_quantized, lambda _module: True)
