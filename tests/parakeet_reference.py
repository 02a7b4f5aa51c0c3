"""parakeet-mlx 0.7.0, the second reference for Parakeet (installed without its dependencies, lock/no-deps.in): its
model code only. Its audio module imports librosa at the top for its own front end, which the tests never use (they
feed it NeMo's log-mel, as its own front end differs from NeMo's): a stand-in module is given for that import alone,
then removed."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map


def load(folder: Path):
    """parakeet-mlx's model from an mlx-community folder, strictly (every tensor used, none missing), in float32."""
    stand_in = "librosa" not in sys.modules
    if stand_in:
        librosa = types.ModuleType("librosa")
        librosa.filters = types.SimpleNamespace(  # type: ignore[attr-defined]
            mel=lambda sr, n_fft, n_mels, **_: np.zeros((n_mels, n_fft // 2 + 1), np.float32))
        sys.modules["librosa"] = librosa
    try:
        from parakeet_mlx.utils import from_config
    finally:
        if stand_in:
            del sys.modules["librosa"]
    model = from_config(json.loads((folder / "config.json").read_text()))
    model.load_weights(str(folder / "model.safetensors"), strict=True)
    model.update(tree_map(lambda a: a.astype(mx.float32), model.parameters()))
    return model


def greedy(model, mel: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Its encoder output and greedy (token id, frame) pairs on a given log-mel (a transducer's decode returns its
    tokens and states, ParakeetCTC's the tokens alone; a CTC token's start is its run's first frame)."""
    features, lengths = model.encoder(mx.array(mel)[None])
    decoded = model.decode(features, lengths)
    tokens = decoded[0] if isinstance(decoded, tuple) else decoded
    return np.array(features[0]), [(t.id, round(t.start / 0.08)) for t in tokens[0]]
