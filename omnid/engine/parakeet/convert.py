"""NVIDIA's ``.nemo`` to mlx-community's folder (the layout parakeet-mlx reads: neither it nor mlx-audio ships a
converter): ``config.json`` is the .nemo's config (references resolved) with the SentencePiece pieces as
``joint.vocabulary``; ``model.safetensors`` holds the state dict under NeMo's names in MLX's layouts (convolutions
channels-last, each LSTM layer as ``Wx``, ``Wh`` and one bias, NeMo's two summed), without the front end's buffers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import mlx.core as mx
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.fastconformer import mlx_layout
from omnid.engine.parakeet.checkpoint import nemo_file, read_nemo

_LSTM = re.compile(r"^(decoder\.prediction\.dec_rnn\.lstm)\.(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)$")


def to_mlx_folder(path: Path, out: Path) -> Path:
    """Writes ``out``/config.json and ``out``/model.safetensors from the .nemo at ``path``; returns ``out``."""
    nemo = nemo_file(path)
    if nemo is None:
        raise CheckpointError(f"{path}: not a .nemo file or a folder holding exactly one")
    read, _, _, vocabulary = read_nemo(nemo)  # refuses what omnid would refuse
    config = dict(read.config)
    config["joint"] = {**config["joint"], "vocabulary": list(vocabulary.pieces)}
    save_folder(out, config, mlx_tensors(read.state))
    return out


def mlx_tensors(state: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A NeMo state dict in the mlx-community layout: NeMo's names, convolutions channels-last, each LSTM layer as
    Wx, Wh and one bias; no front-end buffers."""
    tensors: dict[str, np.ndarray] = {}
    lstm: dict[tuple[str, str], dict[str, np.ndarray]] = {}
    for name, t in state.items():
        if name.startswith("preprocessor.") or name.endswith("num_batches_tracked"):
            continue
        t = t.astype(np.float32)
        match = _LSTM.match(name)
        if match:
            lstm.setdefault((match.group(1), match.group(3)), {})[match.group(2)] = t
        else:
            tensors[name] = mlx_layout(name, t)
    for (prefix, layer), parts in lstm.items():
        tensors[f"{prefix}.{layer}.Wx"] = parts["weight_ih"]
        tensors[f"{prefix}.{layer}.Wh"] = parts["weight_hh"]
        tensors[f"{prefix}.{layer}.bias"] = parts["bias_ih"] + parts["bias_hh"]
    return tensors


def save_folder(out: Path, config: dict, tensors: dict[str, np.ndarray]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    mx.save_safetensors(str(out / "model.safetensors"), {k: mx.array(np.ascontiguousarray(v)) for k, v in tensors.items()})
