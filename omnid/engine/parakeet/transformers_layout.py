"""The Hugging Face transformers layout of Parakeet (``ParakeetForTDT``, ``ParakeetForRNNT``, ``ParakeetForCTC``),
the one the reference's Python server reads: ``config.json`` (the transducer's sizes, ``encoder_config``),
``*.safetensors`` under transformers' names in PyTorch layouts (sharded: the files ``model.safetensors.index.json``
names), ``tokenizer.json`` (the SentencePiece pieces as a
``tokenizers`` model), and the feature extractor's values in ``processor_config.json`` (or the older
``preprocessor_config.json``).

Names map back to NeMo's as transformers' own converter (``convert_nemo_to_hf.py``) maps them forward; the NeMo
front end computes the features (transformers' ``ParakeetFeatureExtractor`` reproduces NeMo's: per-feature
normalisation, a symmetric Hann window, pre-emphasis), so one checkpoint gives the same tokens in every layout.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.nemo.fastconformer import ConformerDims
from omnid.engine.nemo.features import FrontEnd
from omnid.engine.nemo.tokenizer import Vocabulary
from omnid.engine.nemo.transducer_checkpoint import (
    DEFAULT_MAX_SYMBOLS,
    Checkpoint,
    Dims,
    check_vocabulary,
    expected_shapes,
    package_tensor,
)
from omnid.engine.tensor_file import check_shapes, weight_files

# The transformers classes of Parakeet (a config.json's "architectures"), each a layout this module reads.
TRANSFORMERS = ("ParakeetForTDT", "ParakeetForRNNT", "ParakeetForCTC")
# transformers -> NeMo, applied in order (the inverse of transformers' converter)
_RENAMES = (
    (re.compile(r"^encoder\.subsampling\.layers\."), "encoder.pre_encode.conv."),
    (re.compile(r"^encoder\.subsampling\.linear\."), "encoder.pre_encode.out."),
    (re.compile(r"\.conv\.norm\."), ".conv.batch_norm."),
    (re.compile(r"\.self_attn\.([qkv])_proj\."), r".self_attn.linear_\1."),
    (re.compile(r"\.self_attn\.o_proj\."), ".self_attn.linear_out."),
    (re.compile(r"\.self_attn\.relative_k_proj\."), ".self_attn.linear_pos."),
    (re.compile(r"\.self_attn\.bias_([uv])$"), r".self_attn.pos_bias_\1"),
    (re.compile(r"^ctc_head\."), "ctc_decoder.decoder_layers.0."),
    (re.compile(r"^decoder\.embedding\."), "decoder.prediction.embed."),
    (re.compile(r"^decoder\.lstm\."), "decoder.prediction.dec_rnn.lstm."),
    (re.compile(r"^encoder_projector\."), "joint.enc."),
    (re.compile(r"^decoder\.decoder_projector\."), "joint.pred."),
    (re.compile(r"^joint\.head\."), "joint.joint_net.2."),
)
# What transformers' Parakeet classes compute and omnid does not: refused rather than mis-read.
_FIXED = (("hidden_act", "silu"), ("subsampling_conv_kernel_size", 3), ("subsampling_conv_stride", 2),
          ("subsampling_factor", 8))


def nemo_name(name: str) -> str:
    for pattern, replacement in _RENAMES:
        name = pattern.sub(replacement, name)
    return name


def transformers_architecture(path: Path) -> str | None:
    """The transformers Parakeet class a folder's config.json names (the layout the reference's Python server
    reads), or None."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    names = config.get("architectures") if isinstance(config, dict) else None
    found = [n for n in names if n in TRANSFORMERS] if isinstance(names, list) else []
    return found[0] if found else None


def load(folder: Path) -> Checkpoint:
    config_path = folder / "config.json"
    config = read_json_object(config_path)
    architecture = transformers_architecture(folder)
    dims = _dims(config, architecture, config_path)
    front = _front(folder, dims.conformer.n_mels)
    vocabulary = _vocabulary(folder / "tokenizer.json")
    check_vocabulary(vocabulary, dims, f"{folder / 'tokenizer.json'}")
    found = weight_files(folder, "*.safetensors")  # a sharded save by its index, else every file
    files = found.shards
    if not files:
        raise CheckpointError(f"{folder}: no *.safetensors weights")
    weights: dict[str, Any] = {}
    for path, tensors in found.read():
        for name in list(tensors):  # each freed once converted: one copy of the weights held, not two
            t = tensors.pop(name)
            if name.endswith("num_batches_tracked"):
                continue
            name, array = package_tensor(nemo_name(name), np.array(t.astype(mx.float32)))
            if name in weights:
                raise CheckpointError(f"{path}: tensor {name} is in more than one weights file")
            weights[name] = array
    check_shapes(weights, expected_shapes(dims), files[0] if len(files) == 1 else found.index or folder)
    return Checkpoint(folder, "transformers", front, dims, vocabulary, weights,
                      [config_path, folder / "tokenizer.json", *found.files])


def _dims(config: dict, architecture: str | None, source: Path) -> Dims:
    encoder = config.get("encoder_config")
    if not isinstance(encoder, dict):
        raise CheckpointError(f"{source}: encoder_config must be an object")

    def integer(section: dict, key: str, where: str = "") -> int:
        value = section.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CheckpointError(f"{source}: {where}{key} must be a positive integer, not {value!r}")
        return value

    for key, want in _FIXED:
        if encoder.get(key, want) != want:
            raise CheckpointError(f"{source}: encoder_config.{key} is {encoder.get(key)!r}; only {want!r} is "
                                  "supported")
    if encoder.get("attention_bias", True) != encoder.get("convolution_bias", True):
        raise CheckpointError(f"{source}: encoder_config.attention_bias and convolution_bias differ; NeMo's "
                              "FastConformer has one use_bias")
    d_model = integer(encoder, "hidden_size", "encoder_config.")
    conformer = ConformerDims(
        n_mels=integer(encoder, "num_mel_bins", "encoder_config."), d_model=d_model,
        layers=integer(encoder, "num_hidden_layers", "encoder_config."),
        heads=integer(encoder, "num_attention_heads", "encoder_config."),
        ff=integer(encoder, "intermediate_size", "encoder_config."),
        conv_kernel=integer(encoder, "conv_kernel_size", "encoder_config."), subsampling_factor=8,
        subsampling_channels=integer(encoder, "subsampling_conv_channels", "encoder_config."),
        xscaling=bool(encoder.get("scale_input", True)), bias=bool(encoder.get("attention_bias", True)))
    if d_model % conformer.heads:
        raise CheckpointError(f"{source}: hidden_size {d_model} is not a multiple of {conformer.heads} heads")
    vocab_size = integer(config, "vocab_size")
    pieces = vocab_size - 1  # the blank is the last id, in every head
    if architecture == "ParakeetForCTC":
        if config.get("pad_token_id", pieces) != pieces:  # transformers' CTC blank is its pad token
            raise CheckpointError(f"{source}: pad_token_id (the CTC blank) must be the last id, {pieces}")
        return Dims(conformer=conformer, vocabulary=pieces, pred_hidden=0, pred_layers=0, joint_hidden=0,
                    durations=(), max_symbols=DEFAULT_MAX_SYMBOLS, ctc=True, transducer=False)
    if config.get("blank_token_id") != pieces:
        raise CheckpointError(f"{source}: blank_token_id must be the last id, {pieces}, not "
                              f"{config.get('blank_token_id')!r}")
    if config.get("hidden_act", "relu") != "relu":
        raise CheckpointError(f"{source}: joint activation {config.get('hidden_act')!r}; only relu is supported")
    durations: tuple[int, ...] = ()
    if architecture == "ParakeetForTDT":
        raw = config.get("durations")
        if not isinstance(raw, list) or not raw or not all(isinstance(x, int) and not isinstance(x, bool)
                                                           and x >= 0 for x in raw):
            raise CheckpointError(f"{source}: a ParakeetForTDT config needs durations, a list of frame counts")
        durations = tuple(raw)
    hidden = integer(config, "decoder_hidden_size")
    return Dims(conformer=conformer, vocabulary=pieces, pred_hidden=hidden,
                pred_layers=integer(config, "num_decoder_layers"), joint_hidden=hidden, durations=durations,
                max_symbols=integer(config, "max_symbols_per_step") if "max_symbols_per_step" in config
                else DEFAULT_MAX_SYMBOLS, ctc=False)


def _front(folder: Path, n_mels: int) -> FrontEnd:
    """The feature extractor's values (transformers' defaults where a value or the file is absent)."""
    path = next((p for p in (folder / "processor_config.json", folder / "preprocessor_config.json") if p.is_file()),
                folder / "processor_config.json")
    data = read_json_object(path) if path.is_file() else {}
    nested = data.get("feature_extractor")  # a processor's file nests it; a feature extractor's own file is it
    values = nested if isinstance(nested, dict) else data
    front = FrontEnd(sample_rate=values.get("sampling_rate", 16000), n_mels=values.get("feature_size", n_mels),
                     n_fft=values.get("n_fft", 512), win_length=values.get("win_length", 400),
                     hop_length=values.get("hop_length", 160), preemph=float(values.get("preemphasis", 0.97)),
                     normalize="per_feature")
    if (front.sample_rate, front.n_mels, front.hop_length) != (16000, n_mels, 160) \
            or not 0 < front.win_length <= front.n_fft:
        raise CheckpointError(f"{path}: unsupported feature extractor ({front}); the encoder takes {n_mels} mels "
                              "of 16 kHz audio at a 160-sample hop")
    return front


def _vocabulary(path: Path) -> Vocabulary:
    """The pieces of a tokenizers model (BPE's piece -> id map, or Unigram's list of [piece, score]), ids 0..n-1;
    added tokens past them (``<blank>``, ``<pad>``) are the joint's, not text."""
    data = read_json_object(path)
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if isinstance(vocab, dict) and all(isinstance(i, int) for i in vocab.values()):
        by_id = {i: p for p, i in vocab.items()}
    elif isinstance(vocab, list) and all(isinstance(e, list) and e and isinstance(e[0], str) for e in vocab):
        by_id = {i: e[0] for i, e in enumerate(vocab)}
    else:
        raise CheckpointError(f"{path}: model.vocab must be a BPE map of piece to id or a Unigram list")
    if sorted(by_id) != list(range(len(by_id))):
        raise CheckpointError(f"{path}: model.vocab's ids are not 0..{len(by_id) - 1}")
    return Vocabulary.from_pieces([by_id[i] for i in range(len(by_id))])
