"""NVIDIA's Nemotron streaming ``.nemo`` to the mlx-community folder a Mac user has (the layout mlx-audio's
``nemotron_asr`` and the reference's native server read): ``config.json`` in mlx-audio's shape (its converter's
keys, with ``"pad_mode": "constant"``: NeMo's STFT pads with zeros, where mlx-audio's default is to reflect),
``model.safetensors`` (NeMo's names, MLX's layouts, float32), ``tokenizer.model`` and ``vocab.txt``.
"""

from __future__ import annotations

from pathlib import Path

from omnid.engine.nemo.mlx_folder import mlx_tensors, save_folder
from omnid.engine.nemotron.checkpoint import Streaming, read_nemo


def to_mlx_folder(path: Path, out: Path) -> Path:
    """Writes the folder ``out`` from the .nemo at ``path`` (refused as omnid's loader refuses it); returns it."""
    nemo, dims, front, streaming, vocabulary = read_nemo(Path(path))
    cfg = nemo.config
    pre, enc, dec, joint = cfg["preprocessor"], cfg["encoder"], cfg["decoder"], cfg["joint"]
    jointnet = joint["jointnet"]
    config = {
        "model_type": "nemotron_asr",
        "preprocessor": {**{k: pre[k] for k in ("sample_rate", "features", "n_fft", "window_size", "window_stride",
                                                "window") if k in pre},
                         "preemph": front.preemph, "dither": pre.get("dither", 1e-5), "normalize": front.normalize,
                         "log_zero_guard_value": 2.0**-24, "pad_to": 0, "pad_value": 0.0, "pad_mode": "constant"},
        "encoder": {k: enc[k] for k in (
            "feat_in", "n_layers", "d_model", "n_heads", "ff_expansion_factor", "subsampling_factor",
            "subsampling_conv_channels", "conv_kernel_size", "causal_downsampling", "conv_context_size",
            "conv_norm_type", "self_attention_model", "att_context_style", "att_context_size", "pos_emb_max_len",
            "use_bias", "xscaling") if k in enc},
        "prompt": {"num_prompts": streaming.num_prompts, "prompt_hidden": 2 * dims.conformer.d_model,
                   "prompt_dictionary": dict(streaming.prompts)},
        "decoder": {"pred_hidden": dims.pred_hidden, "pred_rnn_layers": dims.pred_layers,
                    "vocab_size": dims.vocabulary, "blank_as_pad": bool(dec.get("blank_as_pad", True))},
        "joint": {"joint_hidden": dims.joint_hidden, "activation": jointnet.get("activation", "relu"),
                  "encoder_hidden": dims.conformer.d_model, "pred_hidden": dims.pred_hidden,
                  "num_classes": dims.vocabulary},
        "vocabulary": list(vocabulary.pieces),
        "default_language": _default_language(streaming),
        "default_att_context_size": list(streaming.contexts[0]),
        "max_symbols": dims.max_symbols,
    }
    save_folder(out, config, mlx_tensors(nemo.state))
    (out / "tokenizer.model").write_bytes(nemo.artifacts["tokenizer.model"])
    (out / "vocab.txt").write_text("".join(p + "\n" for p in vocabulary.pieces))
    return out


def _default_language(streaming: Streaming) -> str:
    """The checkpoint's default prompt, else "auto" (what mlx-audio's converter writes)."""
    return streaming.default_language or "auto"
