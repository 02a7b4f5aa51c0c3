"""mlx-community's folder of a NeMo model (the layout parakeet-mlx and mlx-audio read): the state dict under NeMo's
names in MLX's layouts (convolutions channels-last, each LSTM layer as ``Wx``, ``Wh`` and one bias, NeMo's two
summed) in ``model.safetensors``, without the front end's buffers; read into omnid's names, and written by the
converters of the kinds that store one (Parakeet, Nemotron).

A folder quantized by mlx-audio 0.6.2 (``mlx_audio.convert -q``, or Nemotron's own converter with ``--quantize``)
holds each quantized Linear and Embedding as a packed uint32 ``weight`` with its ``scales`` (and ``biases`` in affine
mode), described by config.json's ``quantization`` block: each is checked against the block and its own shapes by
omnid/engine/quantization.py's rules, then kept packed for MLX's quantized layers (``keep_quantized``, for the
modules the kind computes in MLX) or widened to float32 at load (the numpy paths, and the transducer everywhere).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.fastconformer import encoder_name, mlx_layout
from omnid.engine.quantization import Quantization, packed, read_block, widen
from omnid.engine.tensor_file import WeightFiles, check_shapes, read_tensors

_LSTM = re.compile(r"^(decoder\.prediction\.dec_rnn\.lstm)\.(weight_ih|weight_hh|bias_ih|bias_hh)_l(\d+)$")
RNN = "decoder.prediction.dec_rnn.lstm."


# Whether a quantized folder's module stays packed: (this package's module name, its packing) -> kept.
Keep = Callable[[str, Quantization], bool]


def keep_packed(wanted: bool | None = None, on_cpu: Keep = lambda _module, _q: False) -> bool | Keep:
    """Which packed modules an engine keeps packed: on Metal all (MLX's quantized layers compute them); on MLX's
    CPU device those ``on_cpu`` names (the kind's numpy layers multiply them packed), the rest widened to float32
    at load; ``wanted`` forces all or none."""
    if wanted is not None:
        return wanted
    return True if mx.default_device() != mx.cpu else on_cpu


def omnid_name(name: str) -> str:
    """A folder tensor's name (NeMo's) -> this package's, for the tensors that are renamed one to one."""
    return "encoder." + encoder_name(name.removeprefix("encoder.")) if name.startswith("encoder.") else name


def read_folder(weights_path: Path | WeightFiles, config: Mapping[str, Any], config_path: Path,
                shapes: Mapping[str, tuple[int, ...]],
                keep_quantized: bool | Keep = False, packable: Callable[[str], bool] = lambda _module: False,
                ) -> tuple[dict[str, Any], dict[str, Quantization]]:
    """An mlx-community ``model.safetensors`` (NeMo's names, MLX's convolution layouts, each LSTM layer as Wx, Wh and
    one bias: NeMo's two summed) under this package's names: float32 numpy arrays, each tensor freed once
    converted, and the modules ``packable`` names (this package's module names) kept packed as MLX arrays with
    ``keep_quantized`` (all of them, or those it names: :func:`keep_packed`) -> (weights, those modules'
    packing). ``shapes``: the kind's tensors (this package's names), against which each packed matrix is checked;
    :func:`check_folder` checks the rest. ``weights_path`` may be a folder's sharded weights
    (``tensor_file.weight_files``: mlx-audio's converter shards past 5 GB), errors then naming the index."""
    if isinstance(weights_path, WeightFiles):
        tensors = weights_path.tensors()
        weights_path = weights_path.index or weights_path.shards[0]
    else:
        tensors = read_tensors(weights_path)
    block = read_block(dict(config), config_path, lambda module: module)  # errors name the folder's tensors
    keep = keep_quantized if callable(keep_quantized) else (lambda _module, _q: keep_quantized)
    weights: dict[str, Any] = {}
    quantized: dict[str, Quantization] = {}
    modules = sorted(n.removesuffix(".scales") for n in tensors if n.endswith(".scales"))
    if block is not None and not modules:
        raise CheckpointError(f"{config_path}: has a quantization block, but {weights_path.name} holds no quantized "
                              "tensor (no .scales)")
    for module in modules:
        ours = omnid_name(module + ".weight").removesuffix(".weight")
        weight, scales = tensors.pop(module + ".weight", None), tensors.pop(module + ".scales")
        biases = tensors.pop(module + ".biases", None)
        want = shapes.get(ours + ".weight")
        if weight is None or want is None or len(want) != 2:
            raise CheckpointError(f"{weights_path}: tensor {module}.scales is not the scales of a quantizable matrix "
                                  f"(no {module}.weight of a Linear or Embedding)")
        q = packed(module, want, weight, scales, biases, block, weights_path)
        if q.mode == "affine":  # its float scales and biases in float32 (a bfloat16 folder's too): computed in
            scales = scales.astype(mx.float32)  # float32 either way; the other modes' scales are uint8 exponents
        if biases is not None:
            biases = biases.astype(mx.float32)
        if packable(ours) and keep(ours, q):
            weights[ours + ".weight"], weights[ours + ".scales"] = weight, scales
            if biases is not None:
                weights[ours + ".biases"] = biases
            quantized[ours] = q
        else:
            weights[ours + ".weight"] = np.array(widen(weight, scales, biases, q))
    for name in list(tensors):
        value = tensors.pop(name)
        module = name.rsplit(".", 1)[0]
        if value.dtype == mx.uint32:
            raise CheckpointError(f"{weights_path}: tensor {name} is packed (uint32), but its {module}.scales is "
                                  "missing")
        entry = block.modules.get(module) if block is not None else None
        if entry is not None and entry.quantized and name.endswith(".weight") and value.ndim == 2:
            raise CheckpointError(f"{weights_path}: tensor {name} is a float matrix without {module}.scales, but "
                                  f"{config_path.name}'s {entry.key} says it is quantized")
        _put(weights, name, np.array(value.astype(mx.float32)), weights_path)
    return weights, quantized


def _put(weights: dict[str, Any], name: str, array: np.ndarray, weights_path: Path) -> None:
    """One float tensor of the folder under this package's name(s)."""
    if name.startswith(RNN) and name.count(".") == 5:
        layer, kind = name.removeprefix(RNN).split(".")
        torch_name = {"Wx": "weight_ih_l", "Wh": "weight_hh_l", "bias": "bias_ih_l"}.get(kind)
        if torch_name is None:
            raise CheckpointError(f"{weights_path}: unexpected tensor {name}")
        weights[f"{RNN}{torch_name}{layer}"] = array
        if kind == "bias":  # NeMo's two biases arrive summed: the second is zero
            weights[f"{RNN}bias_hh_l{layer}"] = np.zeros_like(array)
    elif name.startswith("ctc_decoder.") and array.ndim == 3:
        weights[name] = array[:, 0, :]  # the 1x1 convolution (O, 1, I) as a linear map
    else:
        weights[omnid_name(name)] = array


def check_folder(weights: Mapping[str, Any], quantized: Mapping[str, Quantization],
                 shapes: Mapping[str, tuple[int, ...]], source: Path, allowed: Iterable[str] = ()) -> None:
    """``check_shapes`` with each module kept packed as its packed tensors (already checked against its matrix)."""
    want = dict(shapes)
    for module in quantized:
        for part in ("weight", "scales", "biases"):
            if f"{module}.{part}" in weights:
                want[f"{module}.{part}"] = tuple(weights[f"{module}.{part}"].shape)
    check_shapes(weights, want, source, allowed)


def load_module(module: nn.Module, weights: dict[str, Any], prefix: str, quantized: Mapping[str, Quantization],
                to_module: Callable[[str], str] = lambda name: name) -> None:
    """The weights under ``prefix`` popped into ``module`` (their names without it, through ``to_module``), the
    modules kept packed made MLX's QuantizedLinear / QuantizedEmbedding first, each at its own bits, group size and
    mode (as mlx-audio's loader builds them)."""
    names = {to_module(n.removeprefix(prefix)): n for n in list(weights) if n.startswith(prefix)}
    ours = {k.rsplit(".", 1)[0]: v.rsplit(".", 1)[0] for k, v in names.items()}  # module path -> this package's
    if any(m in quantized for m in ours.values()):
        nn.quantize(module, class_predicate=lambda path, _m: q.params() if (
            q := quantized.get(ours.get(path, ""))) else False)
    # MLX arrays as they are (a lazy widening is computed once, here, into the module's own arrays: no copy).
    module.load_weights([(k, w if isinstance(w := weights.pop(v), mx.array) else mx.array(w))
                         for k, v in names.items()])
    mx.eval(module.parameters())


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
