"""SenseVoice Small checkpoints, in two layouts:

- **FunASR's** (FunAudioLLM/SenseVoiceSmall on Hugging Face, iic/SenseVoiceSmall on ModelScope): ``config.yaml``
  (``model: SenseVoiceSmall``, ``encoder_conf``, ``frontend_conf``), ``model.pt`` (a plain state dict saved by
  ``torch.save``, read here without torch: engine/nemo/torch_zip.py), ``am.mvn`` and the SentencePiece model
  ``chn_jpn_yue_eng_ko_spectok.bpe.model``. Where ``configuration.json`` is present its ``file_path_metas`` name
  the files (as funasr's AutoModel reads them); without it, the fixed names above (``tokens.json``, a list of
  pieces, stands in for the SentencePiece model).
- **mlx-community's** (``mlx-community/SenseVoiceSmall``, as mlx-audio 0.6.2 reads it): ``config.json``
  (``model_type: sensevoice``, ``vocab_size``, ``input_size``, ``encoder_conf`` and ``frontend_conf`` with
  funasr's keys), ``*.safetensors`` under funasr's tensor names (the CTC head as ``ctc.ctc_lo.*`` or, renamed by
  mlx-audio's ``sanitize``, ``ctc_lo.*``; the FSMN kernels as PyTorch's (d, 1, k) or MLX's (d, k, 1)), ``am.mvn``
  (or its values in config.json's ``cmvn_means`` / ``cmvn_istd``, as mlx-audio reads them) and the SentencePiece
  model or ``tokens.json``; ``sanm_shift``, mlx-audio's spelling, for funasr's ``sanm_shfit``.

The vocabulary's size is the tokenizer's (as funasr takes it), and every tensor is checked against the shapes the
config and the tokenizer imply, naming the file and the tensor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.funasr.frontend import FrontEnd, read_cmvn
from omnid.engine.funasr.sanm import SanmDims, mlx_weights, shapes
from omnid.engine.json_file import read_json_object
from omnid.engine.nemo.tokenizer import Vocabulary
from omnid.engine.nemo.torch_zip import read_state_dict
from omnid.engine.pins import verify
from omnid.engine.sensevoice.model import QUERY_ROWS, SenseVoiceDims
from omnid.engine.tensor_file import check_shapes, read_tensors
from omnid.engine.yaml_file import read_yaml_file

MODEL = "SenseVoiceSmall"  # config.yaml's `model`
MODEL_TYPE = "sensevoice"  # mlx-community's config.json `model_type`
ENCODER = "SenseVoiceEncoderSmall"
BPE = "chn_jpn_yue_eng_ko_spectok.bpe.model"
# The front end every released SenseVoice uses, which omnid's FunASR front end computes (engine/funasr/frontend.py).
FRONTEND = {"fs": 16000, "window": "hamming", "n_mels": 80, "frame_length": 25, "frame_shift": 10, "lfr_m": 7,
            "lfr_n": 6}
# A SenseVoice state dict's size bounds what model.pt may make us read (the real one is 936 MB).
MAX_WEIGHT_BYTES = 4 << 30


@dataclass
class Checkpoint:
    path: Path
    layout: str  # "funasr" or "mlx"
    dims: SenseVoiceDims
    vocabulary: Vocabulary
    front: FrontEnd  # the front end with am.mvn's normalisation
    weights: list[tuple[str, mx.array]]  # the model's names (engine/sensevoice/model.py), MLX layouts, float32
    files: list[Path] = field(default_factory=list)


def is_sensevoice(path: Path) -> bool:
    """Told by the config alone: config.yaml naming SenseVoiceSmall, or config.json of model_type sensevoice."""
    try:
        if (path / "config.json").is_file():
            return read_json_object(path / "config.json").get("model_type") == MODEL_TYPE
        if (path / "config.yaml").is_file():
            return read_yaml_file(path / "config.yaml").get("model") == MODEL
    except CheckpointError:
        return False
    return False


def layout(path: Path) -> str:
    return "mlx" if (path / "config.json").is_file() else "funasr"


def _named(folder: Path, name: Any, key: str, source: Path) -> Path:
    """A file a config names: a plain file name in the folder (never a path out of it)."""
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        raise CheckpointError(f"{source}: {key} must name a file in the folder, not {name!r}")
    return folder / name


def _sections(config: dict[str, Any], source: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    encoder, frontend = config.get("encoder_conf"), config.get("frontend_conf") or {}
    if not isinstance(encoder, dict):
        raise CheckpointError(f"{source}: encoder_conf must be a mapping")
    if not isinstance(frontend, dict):
        raise CheckpointError(f"{source}: frontend_conf must be a mapping")
    for key, want in FRONTEND.items():
        got = frontend.get(key, want)
        if got != want:
            raise CheckpointError(f"{source}: frontend_conf.{key} is {got!r}; SenseVoice's front end has {want!r}")
    return encoder, frontend


def _dims(encoder: dict[str, Any], input_size: int, vocabulary: int, source: Path) -> SenseVoiceDims:
    def number(key: str, default: int) -> int:
        value = encoder.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise CheckpointError(f"{source}: encoder_conf.{key} must be a non-negative integer, not {value!r}")
        return value

    d = SanmDims(input_size=input_size, d_model=number("output_size", 512), heads=number("attention_heads", 4),
                 ffn=number("linear_units", 2048), blocks=number("num_blocks", 50), tp_blocks=number("tp_blocks", 20),
                 kernel=number("kernel_size", 11),
                 # funasr's own spelling, or mlx-audio's corrected one
                 shift=number("sanm_shfit", 0) if "sanm_shfit" in encoder else number("sanm_shift", 0))
    if d.blocks < 1 or d.heads < 1 or d.d_model % d.heads or d.kernel < 1:
        raise CheckpointError(f"{source}: encoder_conf holds no encoder SenseVoice can run (num_blocks "
                              f"{d.blocks}, output_size {d.d_model}, attention_heads {d.heads}, kernel_size {d.kernel})")
    return SenseVoiceDims(d, vocabulary)


def _vocabulary(folder: Path, bpe: Path | None, source: Path) -> tuple[Vocabulary, Path]:
    if bpe is not None and bpe.is_file():
        return Vocabulary.from_sentencepiece(_read(bpe), str(bpe)), bpe
    tokens = folder / "tokens.json"
    if tokens.is_file():
        try:
            pieces = json.loads(tokens.read_text())
        except (ValueError, OSError) as exc:
            raise CheckpointError(f"{tokens}: not valid JSON: {exc}") from exc
        if not isinstance(pieces, list) or not pieces or not all(isinstance(p, str) for p in pieces):
            raise CheckpointError(f"{tokens}: expected a JSON list of pieces")
        return Vocabulary.from_pieces(pieces), tokens
    named = f" ({bpe.name})" if bpe is not None else ""
    raise CheckpointError(f"{source.parent}: no tokenizer: the SentencePiece model{named} or tokens.json is missing")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _funasr_files(path: Path) -> tuple[Path, Path, Path | None, Path]:
    """(config.yaml, model.pt, the SentencePiece model, am.mvn) as funasr's AutoModel finds them."""
    meta_file = path / "configuration.json"
    config, weights, cmvn = path / "config.yaml", path / "model.pt", path / "am.mvn"
    bpe: Path | None = path / BPE
    if meta_file.is_file():
        metas = read_json_object(meta_file).get("file_path_metas", {})
        if not isinstance(metas, dict):
            raise CheckpointError(f"{meta_file}: file_path_metas must be an object")
        if "config" in metas:
            config = _named(path, metas["config"], "file_path_metas.config", meta_file)
        if "init_param" in metas:
            weights = _named(path, metas["init_param"], "file_path_metas.init_param", meta_file)
        tok = metas.get("tokenizer_conf", {})
        if isinstance(tok, dict) and "bpemodel" in tok:
            bpe = _named(path, tok["bpemodel"], "file_path_metas.tokenizer_conf.bpemodel", meta_file)
        front = metas.get("frontend_conf", {})
        if isinstance(front, dict) and "cmvn_file" in front:
            cmvn = _named(path, front["cmvn_file"], "file_path_metas.frontend_conf.cmvn_file", meta_file)
    elif bpe is not None and not bpe.is_file():
        found = sorted(path.glob("*.bpe.model"))
        bpe = found[0] if len(found) == 1 else None
    return config, weights, bpe, cmvn


def _expected(dims: SenseVoiceDims) -> dict[str, tuple[int, ...]]:
    d = dims.encoder
    return {"embed.weight": (QUERY_ROWS, d.input_size), **shapes(d, "encoder."),
            "ctc.ctc_lo.weight": (dims.vocabulary, d.d_model), "ctc.ctc_lo.bias": (dims.vocabulary,)}


def _config_cmvn(config: dict[str, Any], source: Path) -> tuple[np.ndarray, np.ndarray]:
    """mlx-audio's config.json copy of am.mvn: cmvn_means (the <AddShift> values, negated means) and cmvn_istd."""
    try:
        shift = np.asarray(config["cmvn_means"], np.float32)
        scale = np.asarray(config["cmvn_istd"], np.float32)
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"{source}: cmvn_means and cmvn_istd must be lists of numbers") from exc
    if shift.ndim != 1 or shift.shape != scale.shape:
        raise CheckpointError(f"{source}: cmvn_means and cmvn_istd must be two lists of one length")
    return shift, scale


def _mlx_names(tensors: dict[str, Any], dims: SenseVoiceDims) -> dict[str, np.ndarray]:
    """mlx-community's names and layouts back to funasr's (what _expected checks)."""
    out = {}
    kernel = dims.encoder.kernel
    for name, t in tensors.items():
        a = np.asarray(t.astype(mx.float32) if isinstance(t, mx.array) else t)
        if name.startswith("ctc_lo."):
            name = "ctc." + name
        if name.endswith("fsmn_block.weight") and a.ndim == 3 and a.shape[1:] == (kernel, 1) and kernel != 1:
            a = a.transpose(0, 2, 1)
        out[name] = a
    return out


def load(path: Path, pins: dict[str, str] | None = None) -> Checkpoint:
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: not a folder (a SenseVoice checkpoint is a folder: config.yaml, model.pt, "
                              "am.mvn and the SentencePiece model)")
    form = layout(path)
    if form == "mlx":
        source = path / "config.json"
        config = read_json_object(source)
        if "quantization" in config:
            raise CheckpointError(f"{source}: quantized SenseVoice folders are not supported yet")
        weight_paths = sorted(p for p in path.glob("*.safetensors") if p.is_file())
        if not weight_paths:
            raise CheckpointError(f"{path}: no *.safetensors weights")
        bpe: Path | None = path / BPE if (path / BPE).is_file() else next(iter(sorted(path.glob("*.bpe.model"))), None)
        cmvn = path / "am.mvn"
    else:
        source, weights_path, bpe, cmvn = _funasr_files(path)
        config = read_yaml_file(source)
        if config.get("model") != MODEL:
            raise CheckpointError(f"{source}: model is {config.get('model')!r}, not {MODEL}")
        if config.get("encoder", ENCODER) != ENCODER:
            raise CheckpointError(f"{source}: encoder is {config.get('encoder')!r}, not {ENCODER}")
        weight_paths = [weights_path]
    encoder, frontend = _sections(config, source)
    input_size = frontend.get("n_mels", 80) * frontend.get("lfr_m", 7)
    vocabulary, tokenizer_file = _vocabulary(path, bpe, source)
    dims = _dims(encoder, input_size, len(vocabulary), source)
    if form == "mlx" and config.get("vocab_size", len(vocabulary)) != len(vocabulary):
        raise CheckpointError(f"{source}: vocab_size {config['vocab_size']} but the tokenizer {tokenizer_file.name} "
                              f"has {len(vocabulary)} pieces")
    if cmvn.is_file():
        shift, scale = read_cmvn(cmvn)
    elif form == "mlx" and "cmvn_means" in config and "cmvn_istd" in config:
        shift, scale = _config_cmvn(config, source)
    else:
        raise CheckpointError(f"{cmvn}: missing (the features' normalisation)")
    if len(shift) != input_size:
        raise CheckpointError(f"{cmvn}: {len(shift)} values; the stacked features have {input_size}")
    files = [source, *weight_paths, tokenizer_file, cmvn]
    if pins:
        verify(files, pins)
    for weights_path in weight_paths:
        if not weights_path.is_file():
            raise CheckpointError(f"{weights_path}: missing (the model's weights)")
    if form == "mlx":
        state: dict[str, np.ndarray] = {}
        for p in weight_paths:
            state.update(_mlx_names(read_tensors(p), dims))
        label: Path = path
    else:
        label = weight_paths[0]
        state = read_state_dict(label, max_bytes=MAX_WEIGHT_BYTES)
    check_shapes(state, _expected(dims), label)
    weights = [("embed.weight", mx.array(state["embed.weight"].astype(np.float32))),
               ("ctc.ctc_lo.weight", mx.array(state["ctc.ctc_lo.weight"].astype(np.float32))),
               ("ctc.ctc_lo.bias", mx.array(state["ctc.ctc_lo.bias"].astype(np.float32)))]
    weights += [(f"encoder.{name}", t) for name, t in mlx_weights(state)]
    return Checkpoint(path, form, dims, vocabulary, FrontEnd(shift, scale), weights, files)
