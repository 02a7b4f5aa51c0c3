"""mlx-audio 0.6.2's own Qwen3-ASR / Qwen3-ForcedAligner code: its converter (``mlx_audio.convert.convert``, the
``mlx_audio.convert`` command line, quantization recipes and modes included) and its model, loaded as its
``load_model`` loads a folder (config, sanitize, ``apply_quantization``, strict weights) without the
``post_load_hook`` (that reads the tokenizer through transformers, which this environment does not install) and
without ``mlx_audio.stt.models``' package imports (they pull in every model of the registry)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from tests.nemotron_reference import stt_models_package


def convert(source: Path, dest: Path, *, quantize: bool = False, recipe: str | None = None, mode: str = "affine",
            bits: int | None = None, group_size: int | None = None) -> Path:
    """``python -m mlx_audio.convert --hf-path SOURCE --mlx-path DEST [-q] [--quant-predicate RECIPE] [--q-mode MODE]``
    (the domain given, as detection would find it, so that detection does not import every model it knows)."""
    stt_models_package()
    from mlx_audio.convert import convert as run

    with contextlib.redirect_stdout(io.StringIO()):
        run(str(source), str(dest), quantize=quantize, quant_predicate=recipe, q_mode=mode, q_bits=bits,
            q_group_size=group_size, model_domain="stt")
    return dest


def load(folder: Path) -> Any:
    """mlx-audio's model for a folder, every tensor required (strict)."""
    stt_models_package()
    from mlx_audio.stt.models.qwen3_asr import Model, ModelConfig
    from mlx_audio.utils import apply_quantization

    config = json.loads((folder / "config.json").read_text())
    model = Model(ModelConfig.from_dict(config))
    weights: dict[str, mx.array] = {}
    for path in sorted(folder.glob("*.safetensors")):
        loaded = mx.load(str(path))
        assert isinstance(loaded, dict)
        weights.update(loaded)
    weights = model.sanitize(weights)
    apply_quantization(model, config, weights, getattr(model, "model_quant_predicate", None))
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return model


def logits(model: Any, ids: list[int], mel: np.ndarray) -> np.ndarray:
    """(positions, vocabulary or classes) logits of a prompt over (frames, n_mels) log-mel, as mlx-audio computes
    them (its encoder reads (batch, n_mels, frames))."""
    features = mx.array(np.ascontiguousarray(mel.T))[None]
    out = model(mx.array([ids]), input_features=features)
    return np.array(out[0].astype(mx.float32))


def greedy(model: Any, ids: list[int], mel: np.ndarray, budget: int, eos: set[int]) -> tuple[list[int], list[float]]:
    """Greedy tokens after the prompt with mlx-audio's model and KV cache, and each choice's top1-top2 margin."""
    cache = model.make_cache()
    features = mx.array(np.ascontiguousarray(mel.T))[None]
    out = model(mx.array([ids]), input_features=features, cache=cache)
    tokens: list[int] = []
    margins: list[float] = []
    for _ in range(budget):
        row = np.array(out[0, -1].astype(mx.float32))
        top = np.sort(row)[-2:]
        token = int(row.argmax())
        tokens.append(token)
        margins.append(float(top[1] - top[0]))
        if token in eos:
            break
        out = model(mx.array([[token]]), cache=cache)
    return tokens, margins
