"""mlx-community's folder of a NeMo model (the layout parakeet-mlx and mlx-audio read): the state dict under NeMo's
names in MLX's layouts (convolutions channels-last, each LSTM layer as ``Wx``, ``Wh`` and one bias, NeMo's two
summed) in ``model.safetensors``, without the front end's buffers; read into omnid's names, and written by the
converters of the kinds that store one (Parakeet, Nemotron)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.fastconformer import encoder_name, mlx_layout
from omnid.engine.tensor_file import read_tensors

_LSTM = re.compile(r"^(decoder\.prediction\.dec_rnn\.lstm)\.(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)$")


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
