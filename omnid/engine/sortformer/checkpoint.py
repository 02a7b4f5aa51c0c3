"""Streaming Sortformer checkpoints in the two layouts a user has: mlx-community's folder (``config.json`` +
``model.safetensors``, MLX conv layouts, float16 or float32) and NVIDIA's ``.nemo`` tarball (``model_config.yaml`` +
``model_weights.ckpt``, read without torch). Both become one :class:`Checkpoint`: the architecture, the front end,
the streaming constants as the checkpoint states them (never class defaults: mlx-audio's differ from NeMo's), and
float32 tensors under mlx-community's names in MLX layouts, each checked against the shape the config implies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.json_file import read_json_object
from omnid.engine.nemo import archive
from omnid.engine.nemo.fastconformer import ConformerDims, encoder_name, encoder_shapes, mlx_layout
from omnid.engine.nemo.features import FrontEnd, check_buffers
from omnid.engine.pins import verify
from omnid.engine.tensor_file import check_shapes, read_tensors


@dataclass(frozen=True)
class Dims:
    n_mels: int
    fc_d_model: int
    fc_layers: int
    fc_heads: int
    fc_ff: int
    conv_kernel: int
    subsampling_factor: int
    subsampling_channels: int
    xscaling: bool
    tf_d_model: int
    tf_layers: int
    tf_heads: int
    tf_inner: int
    n_spk: int
    k_bias: bool = True  # the Transformer's key projection has a bias (NeMo's always does)

    @property
    def conformer(self) -> ConformerDims:
        return ConformerDims(n_mels=self.n_mels, d_model=self.fc_d_model, layers=self.fc_layers, heads=self.fc_heads,
                             ff=self.fc_ff, conv_kernel=self.conv_kernel, subsampling_factor=self.subsampling_factor,
                             subsampling_channels=self.subsampling_channels, xscaling=self.xscaling)


@dataclass(frozen=True)
class Streaming:
    """NeMo's ``sortformer_modules`` streaming constants, in 80 ms frames."""

    chunk_len: int
    chunk_left_context: int
    chunk_right_context: int
    fifo_len: int
    spkcache_len: int
    spkcache_update_period: int
    spkcache_sil_frames_per_spk: int
    pred_score_threshold: float
    scores_boost_latest: float
    sil_threshold: float
    strong_boost_rate: float
    weak_boost_rate: float
    min_pos_scores_rate: float
    max_index: int


STREAMING_KEYS = tuple(Streaming.__dataclass_fields__)


@dataclass
class Checkpoint:
    path: Path
    layout: str  # "mlx" or "nemo"
    front: FrontEnd
    dims: Dims
    streaming: Streaming
    # float32, mlx-community names and layouts: MLX arrays from a safetensors file (never copied through numpy),
    # numpy arrays from a .nemo; the model takes them over one by one (Sortformer.from_checkpoint).
    weights: dict[str, Any]
    files: list[Path] = field(default_factory=list)

    @property
    def embed_positions(self) -> np.ndarray | None:
        pos = self.weights.get(EMBED_POSITIONS)
        return None if pos is None else np.asarray(pos)


EMBED_POSITIONS = "tf_encoder.embed_positions.weight"


def expected_shapes(d: Dims) -> dict[str, tuple[int, ...]]:
    """Every tensor the model needs, with its shape in MLX layouts (``embed_positions`` is optional)."""
    m, f = d.fc_d_model, d.tf_d_model
    shapes = encoder_shapes(d.conformer, "fc_encoder")

    def linear(name: str, out: int, inp: int, bias: bool = True) -> None:
        shapes[f"{name}.weight"] = (out, inp)
        if bias:
            shapes[f"{name}.bias"] = (out,)

    for i in range(d.tf_layers):
        p = f"tf_encoder.layers.{i}"
        for proj in ("q_proj", "v_proj", "out_proj"):
            linear(f"{p}.self_attn.{proj}", f, f)
        linear(f"{p}.self_attn.k_proj", f, f, bias=d.k_bias)
        shapes[f"{p}.self_attn_layer_norm.weight"] = shapes[f"{p}.self_attn_layer_norm.bias"] = (f,)
        linear(f"{p}.fc1", d.tf_inner, f)
        linear(f"{p}.fc2", f, d.tf_inner)
        shapes[f"{p}.final_layer_norm.weight"] = shapes[f"{p}.final_layer_norm.bias"] = (f,)
    linear("sortformer_modules.encoder_proj", f, m)
    linear("sortformer_modules.first_hidden_to_hidden", f, f)
    linear("sortformer_modules.single_hidden_to_spks", d.n_spk, f)
    linear("sortformer_modules.hidden_to_spks", d.n_spk, 2 * f)  # stored, unused by inference
    return shapes


def check_tensors(weights: dict[str, Any], d: Dims, source: Path) -> None:
    check_shapes(weights, expected_shapes(d), source, allowed=(EMBED_POSITIONS,))
    pos = weights.get(EMBED_POSITIONS)
    if pos is not None and (pos.ndim != 2 or pos.shape[1] != d.tf_d_model):
        raise CheckpointError(f"{source}: tensor {EMBED_POSITIONS} has shape {tuple(pos.shape)}, expected (n, {d.tf_d_model})")


def load(path: Path, pins: dict[str, str] | None = None) -> Checkpoint:
    """A folder (mlx-community layout, or one holding a single ``.nemo``) or a ``.nemo`` file."""
    path = Path(path)
    if path.is_dir():
        if (path / "config.json").is_file():
            ckpt = _load_mlx(path)
        else:
            nemos = sorted(path.glob("*.nemo"))
            if len(nemos) != 1:
                raise CheckpointError(f"{path}: neither config.json + model.safetensors nor a single .nemo file")
            ckpt = _load_nemo(nemos[0])
    elif path.suffix == ".nemo" and path.is_file():
        ckpt = _load_nemo(path)
    else:
        raise CheckpointError(f"{path}: not a Sortformer checkpoint folder or .nemo file")
    if pins:
        verify(ckpt.files, pins)
    return ckpt


# --- mlx-community --------------------------------------------------------------------------------------------


def _load_mlx(folder: Path) -> Checkpoint:
    import mlx.core as mx

    config_path, weights_path = folder / "config.json", folder / "model.safetensors"
    config = read_json_object(config_path)
    if not weights_path.is_file():
        raise CheckpointError(f"{folder}: model.safetensors is missing")
    if config.get("quantization") is not None or config.get("quantization_config") is not None:
        raise CheckpointError(f"{config_path}: quantized Sortformer weights are not read (mlx-audio 0.6.2, the "
                              "converter of this layout, writes none); use a float16 or float32 folder")
    fc = archive.section(config, "fc_encoder_config", config_path)
    tf = archive.section(config, "tf_encoder_config", config_path)
    mods = archive.section(config, "modules_config", config_path)
    proc = archive.section(config, "processor_config", config_path)
    if not mods.get("use_aosc", False):
        raise CheckpointError(f"{config_path}: modules_config.use_aosc is not true: a v1 checkpoint (per-feature "
                              "normalize) or one converted without it; only v2/v2.1 streaming models are served")
    get = archive.getter(config_path)
    dims = Dims(
        n_mels=get(fc, "num_mel_bins", int), fc_d_model=get(fc, "hidden_size", int),
        fc_layers=get(fc, "num_hidden_layers", int), fc_heads=get(fc, "num_attention_heads", int),
        fc_ff=get(fc, "intermediate_size", int), conv_kernel=get(fc, "conv_kernel_size", int),
        subsampling_factor=get(fc, "subsampling_factor", int),
        subsampling_channels=get(fc, "subsampling_conv_channels", int), xscaling=bool(fc.get("scale_input", True)),
        tf_d_model=get(tf, "d_model", int), tf_layers=get(tf, "encoder_layers", int),
        tf_heads=get(tf, "encoder_attention_heads", int), tf_inner=get(tf, "encoder_ffn_dim", int),
        n_spk=get(mods, "num_speakers", int), k_bias=bool(tf.get("k_proj_bias", True)),
    )
    front = FrontEnd(sample_rate=get(proc, "sampling_rate", int), n_mels=get(proc, "feature_size", int),
                     n_fft=get(proc, "n_fft", int), win_length=get(proc, "win_length", int),
                     hop_length=get(proc, "hop_length", int), preemph=get(proc, "preemphasis", float))
    streaming = _streaming(mods, config_path)
    weights = {k: v.astype(mx.float32) for k, v in read_tensors(weights_path).items()}
    _check_front(front, dims, config_path)
    check_tensors(weights, dims, weights_path)
    return Checkpoint(folder, "mlx", front, dims, streaming, weights, [config_path, weights_path])


def _streaming(section: dict, source: Path) -> Streaming:
    """The streaming constants, every one from the checkpoint: a missing one is an error, never a default."""
    get = archive.getter(source)
    kinds = {k: (float if f.type in ("float", float) else int) for k, f in Streaming.__dataclass_fields__.items()}
    s = Streaming(**{k: get(section, k, kinds[k]) for k in STREAMING_KEYS})
    if s.spkcache_len < (1 + s.spkcache_sil_frames_per_spk) * 4 or s.chunk_len < 1 or s.spkcache_update_period < 1:
        raise CheckpointError(f"{source}: streaming constants out of range: {s}")
    return s


def _check_front(front: FrontEnd, dims: Dims, source: Path) -> None:
    if front.sample_rate != 16000 or front.n_mels != dims.n_mels or front.win_length > front.n_fft:
        raise CheckpointError(f"{source}: unsupported front end {front}")
    if dims.fc_d_model % dims.fc_heads or dims.tf_d_model % dims.tf_heads or dims.subsampling_factor != 8:
        raise CheckpointError(f"{source}: unsupported architecture {dims}")


# --- NeMo ----------------------------------------------------------------------------------------------------

# NeMo state-dict names -> mlx-community names (mlx-audio's converter's renames).
_RENAMES = (
    (r"^transformer_encoder\.", "tf_encoder."),
    (r"\.first_sub_layer\.query_net\.", ".self_attn.q_proj."),
    (r"\.first_sub_layer\.key_net\.", ".self_attn.k_proj."),
    (r"\.first_sub_layer\.value_net\.", ".self_attn.v_proj."),
    (r"\.first_sub_layer\.out_projection\.", ".self_attn.out_proj."),
    (r"\.second_sub_layer\.dense_in\.", ".fc1."),
    (r"\.second_sub_layer\.dense_out\.", ".fc2."),
    (r"\.layer_norm_1\.", ".self_attn_layer_norm."),
    (r"\.layer_norm_2\.", ".final_layer_norm."),
)


def nemo_name(name: str) -> str:
    if name.startswith("encoder."):
        return "fc_encoder." + encoder_name(name.removeprefix("encoder."))
    for pattern, repl in _RENAMES:
        name = re.sub(pattern, repl, name)
    return name


def _load_nemo(path: Path) -> Checkpoint:
    """The config first; then the weights, no larger than the model it describes (checked before they are read)."""
    source = Path(f"{path}:model_config.yaml")

    def limit(cfg: dict) -> int:
        dims, front, _ = _nemo_model(cfg, source)
        return archive.state_limit(expected_shapes(dims), front)

    nemo = archive.read(path, limit)
    dims, front, streaming = _nemo_model(nemo.config, source)
    state = nemo.state
    weights: dict[str, Any] = {}
    buffers = {}
    for name, t in state.items():
        if name.endswith("num_batches_tracked"):
            continue
        if name.startswith("preprocessor."):
            buffers[name] = t
            continue
        weights[nemo_name(name)] = mlx_layout(name, t.astype(np.float32))
    check_buffers(buffers, front, path)
    check_tensors(weights, dims, path)
    if EMBED_POSITIONS in weights:
        raise CheckpointError(f"{path}: a .nemo holds no {EMBED_POSITIONS}")
    return Checkpoint(path, "nemo", front, dims, streaming, weights, [path])


def _nemo_model(cfg: dict, source: Path) -> tuple[Dims, FrontEnd, Streaming]:
    pre = archive.section(cfg, "preprocessor", source)
    enc = archive.section(cfg, "encoder", source)
    tfe = archive.section(cfg, "transformer_encoder", source)
    mods = archive.section(cfg, "sortformer_modules", source)
    normalize = pre.get("normalize", "NA")
    if normalize not in ("NA", "None", None, "null", "none"):
        raise CheckpointError(f"{source}: preprocessor.normalize is {normalize!r}: a v1 (offline, per-feature "
                              "normalised) checkpoint; only v2/v2.1 streaming models (normalize NA) are served")
    for section, key, want in ((enc, "subsampling", "dw_striding"), (enc, "self_attention_model", "rel_pos"),
                               (enc, "conv_norm_type", "batch_norm"), (tfe, "hidden_act", "relu"),
                               (tfe, "pre_ln", False)):
        if section.get(key, want) != want:
            raise CheckpointError(f"{source}: {key} is {section.get(key)!r}, only {want!r} is supported")
    get = archive.getter(source)
    d_model = get(enc, "d_model", int)
    dims = Dims(
        n_mels=get(pre, "features", int), fc_d_model=d_model, fc_layers=get(enc, "n_layers", int),
        fc_heads=get(enc, "n_heads", int), fc_ff=d_model * get(enc, "ff_expansion_factor", int),
        conv_kernel=get(enc, "conv_kernel_size", int), subsampling_factor=get(enc, "subsampling_factor", int),
        subsampling_channels=get(enc, "subsampling_conv_channels", int), xscaling=bool(enc.get("xscaling", True)),
        tf_d_model=get(tfe, "hidden_size", int), tf_layers=get(tfe, "num_layers", int),
        tf_heads=get(tfe, "num_attention_heads", int), tf_inner=get(tfe, "inner_size", int),
        n_spk=get(cfg, "max_num_of_spks", int),
    )
    rate = get(pre, "sample_rate", int)
    front = FrontEnd(sample_rate=rate, n_mels=dims.n_mels, n_fft=get(pre, "n_fft", int),
                     win_length=round(get(pre, "window_size", float) * rate),
                     hop_length=round(get(pre, "window_stride", float) * rate),
                     preemph=float(pre.get("preemph", 0.97)))
    if pre.get("window", "hann") != "hann" or float(pre.get("log_zero_guard_value", 2**-24)) != 2**-24:
        raise CheckpointError(f"{source}: unsupported preprocessor window or log guard")
    streaming = _streaming(mods, source)
    _check_front(front, dims, source)
    return dims, front, streaming
