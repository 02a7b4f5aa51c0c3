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
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.nemo import archive
from omnid.engine.nemo.fastconformer import ConformerDims, encoder_name, encoder_shapes, mlx_layout
from omnid.engine.nemo.features import FrontEnd, check_buffers
from omnid.engine.nemo.tokenizer import Vocabulary
from omnid.engine.pins import verify
from omnid.engine.tensor_file import check_shapes, read_tensors

TRANSFORMERS = ("ParakeetForTDT", "ParakeetForRNNT", "ParakeetForCTC")
# NeMo's default when a config's greedy section names no limit (GreedyBatchedRNNTInferConfig.max_symbols_per_step).
DEFAULT_MAX_SYMBOLS = 10


@dataclass(frozen=True)
class Dims:
    conformer: ConformerDims
    vocabulary: int  # pieces; the blank's id
    pred_hidden: int
    pred_layers: int
    joint_hidden: int
    durations: tuple[int, ...]  # empty for RNN-T
    max_symbols: int
    ctc: bool  # a CTC head is there (a hybrid's, or a CTC model's only head)
    transducer: bool = True  # a prediction network and joint (not in a CTC model)


@dataclass
class Checkpoint:
    path: Path
    layout: str  # "nemo", "mlx" or "transformers"
    front: FrontEnd
    dims: Dims
    vocabulary: Vocabulary
    weights: dict[str, Any]  # float32, this package's names, MLX layouts
    files: list[Path] = field(default_factory=list)


def expected_shapes(d: Dims) -> dict[str, tuple[int, ...]]:
    m, p, j, v = d.conformer.d_model, d.pred_hidden, d.joint_hidden, d.vocabulary
    shapes = encoder_shapes(d.conformer, "encoder")
    if d.ctc:
        shapes["ctc_decoder.decoder_layers.0.weight"] = (v + 1, m)
        shapes["ctc_decoder.decoder_layers.0.bias"] = (v + 1,)
    if not d.transducer:
        return shapes
    shapes["decoder.prediction.embed.weight"] = (v + 1, p)
    for i in range(d.pred_layers):
        rnn = "decoder.prediction.dec_rnn.lstm"
        shapes[f"{rnn}.weight_ih_l{i}"], shapes[f"{rnn}.weight_hh_l{i}"] = (4 * p, p), (4 * p, p)
        shapes[f"{rnn}.bias_ih_l{i}"] = shapes[f"{rnn}.bias_hh_l{i}"] = (4 * p,)
    shapes["joint.enc.weight"], shapes["joint.enc.bias"] = (j, m), (j,)
    shapes["joint.pred.weight"], shapes["joint.pred.bias"] = (j, p), (j,)
    out = v + 1 + len(d.durations)
    shapes["joint.joint_net.2.weight"], shapes["joint.joint_net.2.bias"] = (out, j), (out,)
    return shapes


def nemo_file(path: Path) -> Path | None:
    """The ``.nemo`` a path names: the file itself, or the single one in a folder."""
    path = Path(path)
    if path.is_dir():
        nemos = sorted(path.glob("*.nemo"))
        return nemos[0] if len(nemos) == 1 else None
    return path if path.suffix == ".nemo" and path.is_file() else None


def is_parakeet(path: Path) -> bool:
    """Whether a path holds a Parakeet checkpoint in any of its layouts, for `omnid transcribe --model PATH`: a
    ``.nemo`` whose config has a transducer's decoder and joint (where a Sortformer's has its own modules), an
    mlx-community folder or a transformers folder."""
    path = Path(path)
    if path.is_dir() and (is_mlx_folder(path) or transformers_architecture(path)):
        return True
    config = nemo_config(path)
    if config is None:
        return False
    return isinstance(config.get("joint"), dict) and isinstance(config.get("decoder"), dict) and not prompted(config)


def nemo_config(path: Path) -> dict | None:
    """The config of the ``.nemo`` a path names (the file, or the one in a folder), or None where there is none."""
    nemo = nemo_file(path)
    if nemo is None:
        return None
    try:
        with tarfile.open(nemo, "r:*") as tar:
            return archive.read_yaml(tar, archive.members(tar, nemo)["model_config.yaml"], nemo)
    except (CheckpointError, tarfile.TarError, OSError, EOFError, KeyError):
        return None


def prompted(config: dict) -> bool:
    """A prompt model's config (Nemotron's): a prompt dictionary in its model defaults."""
    defaults = config.get("model_defaults")
    return isinstance(defaults, dict) and isinstance(defaults.get("prompt_dictionary"), dict)


def is_mlx_folder(path: Path) -> bool:
    """mlx-community's layout (parakeet-mlx's): a NeMo config as config.json, with its vocabulary in the joint."""
    try:
        config = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and isinstance(config.get("joint"), dict) and "vocabulary" in config["joint"]


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


def load(path: Path, pins: dict[str, str] | None = None) -> Checkpoint:
    """A ``.nemo`` file, a folder holding exactly one, mlx-community's folder (config.json + model.safetensors) or
    the transformers layout (config.json naming ParakeetForTDT/RNNT/CTC, safetensors, tokenizer.json)."""
    path = Path(path)
    if path.is_dir() and is_mlx_folder(path):
        ckpt = _load_mlx(path)
    elif path.is_dir() and transformers_architecture(path):
        from omnid.engine.parakeet import transformers_layout  # it builds on this module

        ckpt = transformers_layout.load(path)
    else:
        nemo = nemo_file(path)
        if nemo is None:
            raise CheckpointError(f"{path}: not a Parakeet .nemo file, a folder holding exactly one, or an "
                                  "mlx-community folder (config.json with joint.vocabulary, model.safetensors)")
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


def check_vocabulary(vocabulary: Vocabulary, dims: Dims, source: str) -> None:
    if len(vocabulary) != dims.vocabulary:
        raise CheckpointError(f"{source} has {len(vocabulary)} pieces; the joint's vocabulary has {dims.vocabulary}")


def package_tensor(name: str, t: np.ndarray) -> tuple[str, np.ndarray]:
    """A tensor under NeMo's name and in PyTorch's layout -> this package's name and MLX's layout."""
    if name.startswith("encoder."):
        name = "encoder." + encoder_name(name.removeprefix("encoder."))
    elif name.startswith("ctc_decoder.") and t.ndim == 3:
        t = t[..., 0]  # the 1x1 convolution as a linear map
    return name, mlx_layout(name, t)


def _load_nemo(path: Path) -> Checkpoint:
    nemo, dims, front, vocabulary = read_nemo(path)
    weights = nemo_weights(nemo, front, path)
    check_shapes(weights, expected_shapes(dims), path)
    return Checkpoint(path, "nemo", front, dims, vocabulary, weights, [path])


def nemo_weights(nemo: archive.NemoFile, front: FrontEnd, path: Path) -> dict[str, Any]:
    """A .nemo's weights as float32 under this package's names in MLX layouts (its preprocessor's buffers checked
    against the front end, not kept), each freed from the archive once converted: one copy held, not two."""
    weights: dict[str, Any] = {}
    buffers = {}
    for name in list(nemo.state):
        t = nemo.state.pop(name)
        if name.endswith("num_batches_tracked"):
            continue
        if name.startswith("preprocessor."):
            buffers[name] = t
            continue
        name, array = package_tensor(name, t.astype(np.float32, copy=False))
        weights[name] = array
    check_buffers(buffers, front, path)
    return weights


def _load_mlx(folder: Path) -> Checkpoint:
    """parakeet-mlx's layout: NeMo's names and config, MLX's convolution layouts, each LSTM layer as Wx, Wh and one
    bias (NeMo's two summed), float16, bfloat16 or float32 (computed in float32)."""
    config_path, weights_path = folder / "config.json", folder / "model.safetensors"
    config = read_json_object(config_path)
    if not weights_path.is_file():
        raise CheckpointError(f"{folder}: model.safetensors is missing")
    dims, front = model_config(config, config_path)
    pieces = config["joint"]["vocabulary"]
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces):
        raise CheckpointError(f"{config_path}: joint.vocabulary must be a list of strings")
    vocabulary = Vocabulary.from_pieces(pieces)
    check_vocabulary(vocabulary, dims, f"{config_path}: joint.vocabulary")
    weights = mlx_folder_weights(weights_path)
    check_shapes(weights, expected_shapes(dims), weights_path)
    return Checkpoint(folder, "mlx", front, dims, vocabulary, weights, [config_path, weights_path])


# A cache-aware streaming encoder's switches (Nemotron's), where Parakeet's are NeMo's offline defaults.
STREAMING = {"conv_norm_type": "layer_norm", "causal_downsampling": True, "conv_context_size": "causal",
             "att_context_style": "chunked_limited"}
OFFLINE = {"conv_norm_type": "batch_norm", "causal_downsampling": False}


def mlx_folder_weights(weights_path: Path) -> dict[str, Any]:
    """An mlx-community ``model.safetensors`` (NeMo's names, MLX's convolution layouts, each LSTM layer as Wx, Wh
    and one bias: NeMo's two summed) as float32 under this package's names, each tensor freed once converted."""
    weights: dict[str, Any] = {}
    rnn = "decoder.prediction.dec_rnn.lstm."
    tensors = read_tensors(weights_path)
    for name in list(tensors):
        array = np.array(tensors.pop(name).astype(mx.float32))
        if name.startswith("encoder."):
            weights["encoder." + encoder_name(name.removeprefix("encoder."))] = array
        elif name.startswith(rnn) and name.count(".") == 5:
            layer, kind = name.removeprefix(rnn).split(".")
            torch_name = {"Wx": "weight_ih_l", "Wh": "weight_hh_l", "bias": "bias_ih_l"}.get(kind)
            if torch_name is None:
                raise CheckpointError(f"{weights_path}: unexpected tensor {name}")
            weights[f"{rnn}{torch_name}{layer}"] = array
            if kind == "bias":  # NeMo's two biases arrive summed: the second is zero
                weights[f"{rnn}bias_hh_l{layer}"] = np.zeros_like(array)
        elif name.startswith("ctc_decoder.") and array.ndim == 3:
            weights[name] = array[:, 0, :]  # the 1x1 convolution (O, 1, I) as a linear map
        else:
            weights[name] = array
    return weights


def model_config(cfg: dict, source: Path, streaming: bool = False) -> tuple[Dims, FrontEnd]:
    """A NeMo transducer's config (Parakeet's; with ``streaming``, a cache-aware encoder's) -> its sizes and front
    end, every switch omnid does not compute refused naming the file and the key."""
    pre = archive.section(cfg, "preprocessor", source)
    enc = archive.section(cfg, "encoder", source)
    dec = archive.section(cfg, "decoder", source)
    joint = archive.section(cfg, "joint", source)
    decoding = cfg["decoding"] if isinstance(cfg.get("decoding"), dict) else {}
    get = archive.getter(source)
    switches = [(enc, key, want) for key, want in (STREAMING if streaming else OFFLINE).items()]
    for part, key, want in ((enc, "subsampling", "dw_striding"), (enc, "self_attention_model", "rel_pos"),
                            *switches, (dec, "blank_as_pad", True), (pre, "window", "hann"), (pre, "pad_to", 0),
                            (pre, "frame_splicing", 1), (pre, "log", True)):
        if part.get(key, want) != want:
            raise CheckpointError(f"{source}: {key} is {part.get(key)!r}; only {want!r} is supported")
    if not streaming and list(enc.get("att_context_size", [-1, -1])) != [-1, -1]:
        raise CheckpointError(f"{source}: att_context_size is {enc.get('att_context_size')!r}: limited-context "
                              "(streaming) encoders are not Parakeet's; only [-1, -1] is supported")
    normalize = pre.get("normalize", "per_feature")
    if normalize not in ("per_feature", "NA"):
        raise CheckpointError(f"{source}: preprocessor.normalize is {normalize!r}; per_feature or NA are supported")
    if float(pre.get("log_zero_guard_value", 2**-24)) != 2**-24:
        raise CheckpointError(f"{source}: unsupported preprocessor log guard")
    activation = archive.section(joint, "jointnet", source).get("activation", "relu")
    if activation != "relu":
        raise CheckpointError(f"{source}: joint activation {activation!r}; only relu is supported")
    d_model = get(enc, "d_model", int)
    n_mels = get(pre, "features", int)
    conformer = ConformerDims(
        n_mels=n_mels, d_model=d_model, layers=get(enc, "n_layers", int), heads=get(enc, "n_heads", int),
        ff=d_model * get(enc, "ff_expansion_factor", int), conv_kernel=get(enc, "conv_kernel_size", int),
        subsampling_factor=get(enc, "subsampling_factor", int),
        subsampling_channels=get(enc, "subsampling_conv_channels", int), xscaling=bool(enc.get("xscaling", True)),
        bias=bool(enc.get("use_bias", True)), causal=streaming,
        conv_norm="layer_norm" if streaming else "batch_norm")
    prednet = archive.section(dec, "prednet", source)
    jointnet = archive.section(joint, "jointnet", source)
    extra = int(joint.get("num_extra_outputs", 0) or 0)
    defaults = cfg["model_defaults"] if isinstance(cfg.get("model_defaults"), dict) else {}
    durations = tuple(int(x) for x in (decoding.get("durations") or defaults.get("tdt_durations") or ()))
    if extra != len(durations):
        raise CheckpointError(f"{source}: the joint has {extra} extra outputs but {len(durations)} TDT durations")
    greedy = decoding["greedy"] if isinstance(decoding.get("greedy"), dict) else {}
    max_symbols = greedy.get("max_symbols", DEFAULT_MAX_SYMBOLS)
    if isinstance(max_symbols, bool) or not isinstance(max_symbols, int) or max_symbols < 1:
        # without a limit a transducer can emit on one frame for ever (random or damaged weights do)
        raise CheckpointError(f"{source}: decoding.greedy.max_symbols must be a positive integer, not {max_symbols!r}")
    dims = Dims(conformer=conformer, vocabulary=get(dec, "vocab_size", int), pred_hidden=get(prednet, "pred_hidden", int),
                pred_layers=get(prednet, "pred_rnn_layers", int), joint_hidden=get(jointnet, "joint_hidden", int),
                durations=durations, max_symbols=max_symbols, ctc=isinstance(cfg.get("aux_ctc"), dict))
    rate = get(pre, "sample_rate", int)
    front = FrontEnd(sample_rate=rate, n_mels=n_mels, n_fft=get(pre, "n_fft", int),
                     win_length=round(get(pre, "window_size", float) * rate),
                     hop_length=round(get(pre, "window_stride", float) * rate),
                     preemph=float(pre.get("preemph", 0.97)), normalize=normalize)
    if front.sample_rate != 16000 or front.win_length > front.n_fft or conformer.subsampling_factor != 8 \
            or d_model % conformer.heads or get(enc, "feat_in", int) != n_mels:
        raise CheckpointError(f"{source}: unsupported front end or encoder ({front}, {conformer})")
    return dims, front
