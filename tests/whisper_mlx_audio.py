"""mlx-audio 0.6.2's own Whisper code: its converter (``mlx_audio.convert.convert``, as ``python -m mlx_audio.convert``
runs it) and its model (``mlx_audio.stt.models.whisper``), loaded as its ``load_model`` loads a folder (config,
``sanitize``, ``apply_quantization``, strict weights) without the ``post_load_hook`` (it reads transformers'
WhisperProcessor, which this environment does not install) and without ``mlx_audio.stt.models``' package imports
(they pull in every model of the registry).

What its converter reads: a transformers folder (``model.``-prefixed names, which its ``sanitize`` maps onto the
mlx-examples names). It refuses mlx-examples' ``convert.py`` folders: their ``alignment_heads`` tensor is no
parameter of its model ("Received 1 parameters not in model: alignment_heads"), so the source here is a
transformers folder as transformers saves Whisper (its config.json from tests/goldens/sharded/whisper, which
transformers wrote, at tiny widths that MLX's groups divide; ``model.safetensors`` under transformers' names, torch's
(out, in, kernel) convolutions, no ``proj_out``: transformers ties it to the token embedding and does not save it).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import mlx.core as mx
import numpy as np

from omnid.engine.whisper.model import ModelDims
from tests.helpers import random_weights
from tests.nemotron_reference import stt_models_package
from tests.test_checkpoint import to_hf

TRANSFORMERS_CONFIG = Path(__file__).parent / "goldens" / "sharded" / "whisper" / "config.json"
# Every Linear's and the embedding's input width (64, 256) a multiple of each mode's group (16, 32, 64).
DIMS = ModelDims(n_mels=80, n_audio_ctx=24, n_audio_state=64, n_audio_head=2, n_audio_layer=2, n_vocab=51864,
                 n_text_ctx=32, n_text_state=64, n_text_head=2, n_text_layer=2)


def transformers_source(folder: Path, dims: ModelDims = DIMS, seed: int = 0) -> Path:
    """A random Whisper in transformers' layout (the source mlx-audio's converter takes)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads(TRANSFORMERS_CONFIG.read_text())
    n = dims.n_audio_state
    config.update(d_model=n, encoder_ffn_dim=4 * n, decoder_ffn_dim=4 * n, encoder_attention_heads=dims.n_audio_head,
                  decoder_attention_heads=dims.n_text_head, encoder_layers=dims.n_audio_layer,
                  decoder_layers=dims.n_text_layer, max_source_positions=dims.n_audio_ctx,
                  max_target_positions=dims.n_text_ctx, num_mel_bins=dims.n_mels, vocab_size=dims.n_vocab)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    arrays = {}
    for name, value in random_weights(dims, seed).items():
        if name.endswith(("conv1.weight", "conv2.weight")):
            value = value.transpose(0, 2, 1)  # torch's (out, in, kernel)
        arrays[to_hf(name)] = mx.array(value)
    mx.save_safetensors(str(folder / "model.safetensors"), arrays, metadata={"format": "pt"})
    return folder


def whisper_mixed(bits: tuple[int, int] = (4, 6), group_size: int = 64) -> Callable[[str, Any], dict[str, Any]]:
    """mlx-audio's mixed recipes' rule (``mixed_quant_predicate_builder``: the value and down projections of the
    first and last eighth of the layers and of every third layer between at the high bits, every other module at the
    low) under Whisper's names (value, mlp2), since the recipe itself looks for ``down_proj`` and refuses Whisper."""
    low, high = bits

    def predicate(path: str, module: Any) -> dict[str, Any]:
        del module
        parts = path.split(".")
        layers = DIMS.n_audio_layer if parts[0] == "encoder" else DIMS.n_text_layer
        index = int(parts[2]) if len(parts) > 2 and parts[1] == "blocks" else 0
        high_precision = index < layers // 8 or index >= 7 * layers // 8 or (index - layers // 8) % 3 == 2
        wide = path.endswith((".value", ".mlp2"))
        return {"group_size": group_size, "bits": high if wide and high_precision else low, "mode": "affine"}

    return predicate


def convert(source: Path, dest: Path, *, quantize: bool = False, mode: str = "affine", bits: int | None = None,
            group_size: int | None = None, dtype: str | None = None, recipe: str | None = None,
            per_module: Callable[[str, Any], Any] | None = None) -> Path:
    """``python -m mlx_audio.convert --hf-path SOURCE --mlx-path DEST [-q --q-bits B --q-group-size G --q-mode M]
    [--quant-predicate RECIPE] [--dtype D]`` (the domain given, as detection would find it, so that detection does
    not import every model it knows). ``per_module``: the converter run with that predicate in place of a recipe's
    (its own ``quantize_model`` then writes each module's entry, as for a recipe)."""
    stt_models_package()
    import mlx_audio.convert as converter

    run = converter.convert
    if per_module is not None:
        base = converter.build_quant_predicate

        def build(model: Any, name: str | None = None) -> Callable[[str, Any], Any]:
            required = base(model, None)
            return lambda path, module: required(path, module) and per_module(path, module)

        patch: Any = mock.patch.object(converter, "build_quant_predicate", build)
        recipe = recipe or "mixed_4_6"
    else:
        patch = contextlib.nullcontext()
    with patch, contextlib.redirect_stdout(io.StringIO()):
        run(str(source), str(dest), quantize=quantize or per_module is not None, q_mode=mode, q_bits=bits,
            q_group_size=group_size, dtype=dtype, quant_predicate=recipe, model_domain="stt")
    return dest


def load(folder: Path, dtype: mx.Dtype = mx.float32) -> Any:
    """mlx-audio's Whisper for a folder, every tensor required (strict). ``dtype``: the model's own parameter
    (mlx-audio's loader takes its default, float16; float32 here, so that the comparison is not float16's rounding).
    The floating-point modes' uint8 scales are kept as the file has them: mlx-audio's ``sanitize`` casts every
    non-uint32 tensor to the model's dtype, after which its own quantized layers refuse them ("Scale type must be
    uint8"), so mlx-audio 0.6.2 cannot load its own mxfp4/nvfp4/mxfp8 Whisper output as it stands."""
    stt_models_package()
    from mlx_audio.stt.models.whisper.whisper import Model, ModelConfig
    from mlx_audio.utils import apply_quantization, load_weights

    config = json.loads((folder / "config.json").read_text())
    model = Model(ModelConfig.from_dict(config), dtype)
    raw = load_weights(folder)
    weights = model.sanitize(raw)
    weights.update({k: v for k, v in raw.items() if v.dtype == mx.uint8})
    apply_quantization(model, config, weights, getattr(model, "model_quant_predicate", None))
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return model


def logits(model: Any, ids: list[int], mel: np.ndarray) -> np.ndarray:
    """(positions, vocabulary) float32 logits of a prompt over (1, frames, n_mels) log-mel, as mlx-audio computes
    them."""
    out = model(mx.array(mel).astype(model.dtype), mx.array([ids]))
    return np.array(out[0].astype(mx.float32))
