"""A NeMo config's ``preprocessor`` and ``encoder`` sections -> the FastConformer's sizes and the front end, every
switch omnid does not compute refused naming the file and the key: what every NeMo kind's config shares (the
transducers', Parakeet's and Nemotron's, read by transducer_checkpoint.py; Cohere Transcribe's, whose config.json
carries the same sections in NeMo's keys)."""

from __future__ import annotations

from pathlib import Path

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo import archive
from omnid.engine.nemo.fastconformer import ConformerDims
from omnid.engine.nemo.features import FrontEnd

# A cache-aware streaming encoder's switches (Nemotron's), where the offline ones are NeMo's defaults.
STREAMING = {"conv_norm_type": "layer_norm", "causal_downsampling": True, "conv_context_size": "causal",
             "att_context_style": "chunked_limited"}
OFFLINE = {"conv_norm_type": "batch_norm", "causal_downsampling": False}


def encoder_config(cfg: dict, source: Path, streaming: bool = False) -> tuple[ConformerDims, FrontEnd]:
    """The encoder's sizes and the front end (``streaming``: a cache-aware encoder's switches). The preprocessor's
    ``dither`` is not read: omnid applies none (inference)."""
    pre = archive.section(cfg, "preprocessor", source)
    enc = archive.section(cfg, "encoder", source)
    get = archive.getter(source)
    switches = [(enc, key, want) for key, want in (STREAMING if streaming else OFFLINE).items()]
    for part, key, want in ((enc, "subsampling", "dw_striding"), (enc, "self_attention_model", "rel_pos"),
                            *switches, (pre, "window", "hann"), (pre, "pad_to", 0), (pre, "frame_splicing", 1),
                            (pre, "log", True)):
        if part.get(key, want) != want:
            raise CheckpointError(f"{source}: {key} is {part.get(key)!r}; only {want!r} is supported")
    if not streaming and list(enc.get("att_context_size", [-1, -1])) != [-1, -1]:
        raise CheckpointError(f"{source}: att_context_size is {enc.get('att_context_size')!r}: limited-context "
                              "(streaming) encoders are not offline ones; only [-1, -1] is supported")
    normalize = pre.get("normalize", "per_feature")
    if normalize not in ("per_feature", "NA"):
        raise CheckpointError(f"{source}: preprocessor.normalize is {normalize!r}; per_feature or NA are supported")
    if float(pre.get("log_zero_guard_value", 2**-24)) != 2**-24:
        raise CheckpointError(f"{source}: unsupported preprocessor log guard")
    d_model = get(enc, "d_model", int)
    n_mels = get(pre, "features", int)
    conformer = ConformerDims(
        n_mels=n_mels, d_model=d_model, layers=get(enc, "n_layers", int), heads=get(enc, "n_heads", int),
        ff=d_model * get(enc, "ff_expansion_factor", int), conv_kernel=get(enc, "conv_kernel_size", int),
        subsampling_factor=get(enc, "subsampling_factor", int),
        subsampling_channels=get(enc, "subsampling_conv_channels", int), xscaling=bool(enc.get("xscaling", True)),
        bias=bool(enc.get("use_bias", True)), causal=streaming,
        conv_norm="layer_norm" if streaming else "batch_norm")
    rate = get(pre, "sample_rate", int)
    front = FrontEnd(sample_rate=rate, n_mels=n_mels, n_fft=get(pre, "n_fft", int),
                     win_length=round(get(pre, "window_size", float) * rate),
                     hop_length=round(get(pre, "window_stride", float) * rate),
                     preemph=float(pre.get("preemph", 0.97)), normalize=normalize)
    if front.sample_rate != 16000 or front.win_length > front.n_fft or conformer.subsampling_factor != 8 \
            or d_model % conformer.heads or get(enc, "feat_in", int) != n_mels:
        raise CheckpointError(f"{source}: unsupported front end or encoder ({front}, {conformer})")
    return conformer, front
