"""mlx-audio 0.6.2's Sortformer, the reference server's feed algorithm in Python (its C++ port is what
``/v1/diarization/stream`` answers with), loaded without ``mlx_audio.vad``'s package imports (they pull in
transformers through mlx-audio's model registry). Also its converter's rules, to turn the NeMo golden checkpoint
into the mlx-community layout a Mac user downloads."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from omnid.engine.nemo.archive import resolve_interpolations
from omnid.engine.nemo.torch_zip import read_state_dict


def modules() -> tuple[Any, Any, Any]:
    """(sortformer, config, convert) modules of mlx_audio.vad.models.sortformer."""
    spec = importlib.util.find_spec("mlx_audio")
    if spec is None or spec.origin is None:
        raise RuntimeError("mlx-audio is not installed: scripts/setup.sh installs mlx-audio==0.6.2 --no-deps")
    root = Path(spec.origin).parent
    for name, path in (("mlx_audio.vad", root / "vad"), ("mlx_audio.vad.models", root / "vad" / "models")):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package
    from mlx_audio.vad.models.sortformer import config, convert, sortformer

    return sortformer, config, convert


class _Tensor:
    """What mlx-audio's converter expects of a torch tensor: .cpu().numpy()."""

    def __init__(self, a: np.ndarray):
        self.a = a

    def cpu(self) -> _Tensor:
        return self

    def numpy(self) -> np.ndarray:
        return self.a


def convert(nemo: Path, out: Path, positions: str) -> Path:
    """The .nemo through mlx-audio's convert_weights/build_config into ``out`` (config.json, model.safetensors),
    with ``embed_positions`` zero (as Hugging Face's export) or sinusoidal (as mlx-audio's converter writes)."""
    import tarfile

    import yaml

    _, _, conv = modules()
    with tarfile.open(nemo) as tar:
        files = {m.name.rsplit("/", 1)[-1]: m for m in tar.getmembers() if m.isfile()}
        cfg = yaml.safe_load(tar.extractfile(files["model_config.yaml"]).read())  # type: ignore[union-attr]
        state = read_state_dict(tar.extractfile(files["model_weights.ckpt"]))  # type: ignore[arg-type]
    config = conv.build_config(resolve_interpolations(cfg))
    weights, warnings = conv.convert_weights({k: _Tensor(v) for k, v in state.items()})
    assert not warnings, warnings
    tf = config["tf_encoder_config"]
    table = conv._sinusoidal_embeddings(tf["max_source_positions"], tf["d_model"])
    weights["tf_encoder.embed_positions.weight"] = table if positions == "sinusoid" else np.zeros_like(table)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    mx.save_safetensors(str(out / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()})
    return out


def load_model(folder: Path) -> Any:
    """mlx-audio's Model on a converted folder, as its own loader builds it."""
    sortformer, config, _ = modules()
    model = sortformer.Model(config.ModelConfig.from_dict(json.loads((folder / "config.json").read_text())))
    weights = sortformer.Model.sanitize(dict(mx.load(str(folder / "model.safetensors"))))
    model.load_weights(list(weights.items()))
    model.eval()
    return model
