"""What a NeMo transducer checkpoint is, whatever the model (Parakeet's; Nemotron's, with a cache-aware encoder and
a language prompt) and whatever its layout: its sizes, read from its config with every switch omnid does not compute
refused; the tensors those sizes imply; its weights under omnid's names in MLX layouts, and the prediction network
and joint built from them; the ``.nemo`` a path names. Both kinds' folders read their checkpoints through it
(neither imports the other).
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo import archive
from omnid.engine.nemo.encoder_config import encoder_config
from omnid.engine.nemo.fastconformer import ConformerDims, encoder_name, encoder_shapes, mlx_layout
from omnid.engine.nemo.features import FrontEnd, check_buffers
from omnid.engine.nemo.tokenizer import Vocabulary
from omnid.engine.nemo.transducer import Joint, LstmLayer, PredictionNetwork, Transducer
from omnid.engine.quantization import Quantization

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
    """A transducer checkpoint as loaded from any of its layouts (Parakeet's: Nemotron's carries its streaming
    settings too, and is its own)."""

    path: Path
    layout: str  # "nemo", "mlx" or "transformers"
    front: FrontEnd
    dims: Dims
    vocabulary: Vocabulary
    weights: dict[str, Any]  # float32, this package's names, MLX layouts; packed modules as their MLX arrays
    files: list[Path] = field(default_factory=list)
    # The modules kept packed (an mlx-community folder quantized by mlx-audio, loaded with keep_quantized): MLX's
    # quantized layers compute them. Empty when every weight is float (widened at load, on MLX's CPU device).
    quantized: dict[str, Quantization] = field(default_factory=dict)


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


def transducer(w: dict, d: Dims) -> Transducer:
    """The prediction network and joint, their tensors popped from the weights."""
    rnn = "decoder.prediction.dec_rnn.lstm"
    prediction = PredictionNetwork(
        w.pop("decoder.prediction.embed.weight"),
        tuple(LstmLayer(w.pop(f"{rnn}.weight_ih_l{i}"), w.pop(f"{rnn}.weight_hh_l{i}"), w.pop(f"{rnn}.bias_ih_l{i}"),
                        w.pop(f"{rnn}.bias_hh_l{i}")) for i in range(d.pred_layers)))
    joint = Joint(w.pop("joint.enc.weight"), w.pop("joint.enc.bias"), w.pop("joint.pred.weight"),
                  w.pop("joint.pred.bias"), w.pop("joint.joint_net.2.weight"), w.pop("joint.joint_net.2.bias"))
    return Transducer(prediction, joint, d.vocabulary, d.durations, d.max_symbols)


def nemo_file(path: Path) -> Path | None:
    """The ``.nemo`` a path names: the file itself, or the single one in a folder."""
    path = Path(path)
    if path.is_dir():
        nemos = sorted(path.glob("*.nemo"))
        return nemos[0] if len(nemos) == 1 else None
    return path if path.suffix == ".nemo" and path.is_file() else None


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


def ctc_model(config: dict) -> bool:
    """A CTC model's config (NeMo's EncDecCTCModelBPE, parakeet-mlx's ParakeetCTC): its ``decoder`` is the CTC head
    (a ConvASRDecoder), and there is no joint."""
    decoder = config.get("decoder")
    return not isinstance(config.get("joint"), dict) and isinstance(decoder, dict) \
        and str(decoder.get("_target_", "")).endswith("ConvASRDecoder") and "prednet" not in decoder


def prompted(config: dict) -> bool:
    """A prompt model's config (Nemotron's): a prompt dictionary in its model defaults."""
    defaults = config.get("model_defaults")
    return isinstance(defaults, dict) and isinstance(defaults.get("prompt_dictionary"), dict)


def check_vocabulary(vocabulary: Vocabulary, dims: Dims, source: str) -> None:
    if len(vocabulary) != dims.vocabulary:
        head = "the joint's" if dims.transducer else "the CTC head's"
        raise CheckpointError(f"{source} has {len(vocabulary)} pieces; {head} vocabulary has {dims.vocabulary}")


def package_tensor(name: str, t: np.ndarray) -> tuple[str, np.ndarray]:
    """A tensor under NeMo's name and in PyTorch's layout -> this package's name and MLX's layout."""
    if name.startswith("encoder."):
        name = "encoder." + encoder_name(name.removeprefix("encoder."))
    elif name.startswith("ctc_decoder.") and t.ndim == 3:
        t = t[..., 0]  # the 1x1 convolution as a linear map
    return name, mlx_layout(name, t)


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


def model_config(cfg: dict, source: Path, streaming: bool = False) -> tuple[Dims, FrontEnd]:
    """A NeMo transducer's config (Parakeet's; with ``streaming``, a cache-aware encoder's) -> its sizes and front
    end, every switch omnid does not compute refused naming the file and the key."""
    conformer, front = encoder_config(cfg, source, streaming)
    dec = archive.section(cfg, "decoder", source)
    ctc_only = not streaming and ctc_model(cfg)  # the decoder is the CTC head: no prediction network, no joint
    joint = {} if ctc_only else archive.section(cfg, "joint", source)
    decoding = cfg["decoding"] if isinstance(cfg.get("decoding"), dict) else {}
    get = archive.getter(source)
    if dec.get("blank_as_pad", True) not in (True,):  # as NeMo compares it (1 is True)
        raise CheckpointError(f"{source}: blank_as_pad is {dec.get('blank_as_pad')!r}; only True is supported")
    activation = "relu" if ctc_only else archive.section(joint, "jointnet", source).get("activation", "relu")
    if activation != "relu":
        raise CheckpointError(f"{source}: joint activation {activation!r}; only relu is supported")
    if ctc_only:
        return _ctc_dims(dec, conformer, source), front
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
    return dims, front


def _ctc_dims(dec: dict, conformer: ConformerDims, source: Path) -> Dims:
    """A CTC model's sizes: its head's classes (``num_classes``, or the vocabulary's length where it is not set, as
    NeMo's ConvASRDecoder takes them) over the encoder's width."""
    get = archive.getter(source)
    classes = dec.get("num_classes", -1)
    if isinstance(classes, bool) or not isinstance(classes, int):
        raise CheckpointError(f"{source}: decoder.num_classes must be an integer, not {classes!r}")
    if classes <= 0:
        pieces = dec.get("vocabulary")
        classes = len(pieces) if isinstance(pieces, list) else 0
    if classes <= 0:
        raise CheckpointError(f"{source}: decoder.num_classes is not set and decoder.vocabulary is empty")
    if get(dec, "feat_in", int) != conformer.d_model:
        raise CheckpointError(f"{source}: decoder.feat_in is {dec.get('feat_in')!r}; the encoder's d_model is "
                              f"{conformer.d_model}")
    return Dims(conformer=conformer, vocabulary=classes, pred_hidden=0, pred_layers=0, joint_hidden=0, durations=(),
                max_symbols=DEFAULT_MAX_SYMBOLS, ctc=True, transducer=False)
