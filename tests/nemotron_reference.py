"""mlx-audio 0.6.2's Nemotron streaming ASR (``mlx_audio.stt.models.nemotron_asr``: the reference server's stream
rule in Python), loaded without ``mlx_audio.stt.models``' package imports (they pull in transformers through
mlx-audio's model registry)."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any


def stt_models_package() -> None:
    """``mlx_audio.stt.models`` as a bare package: its modules import one by one, not the whole registry."""
    spec = importlib.util.find_spec("mlx_audio")
    if spec is None or spec.origin is None:
        raise RuntimeError("mlx-audio is not installed: scripts/setup.sh installs mlx-audio==0.6.2 --no-deps")
    name = "mlx_audio.stt.models"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(Path(spec.origin).parent / "stt" / "models")]
        sys.modules[name] = package


def load(folder: Path) -> Any:
    """mlx-audio's model from an mlx-community folder, every tensor required (strict)."""
    stt_models_package()
    from mlx_audio.stt import load as load_model

    return load_model(str(folder), strict=True)


class _TorchTensor:
    """What mlx-audio's Nemotron converter asks of a torch tensor (``.detach().to("cpu").float().numpy()``)."""

    def __init__(self, array: Any):
        self.array = array

    def detach(self) -> _TorchTensor:
        return self

    def to(self, _device: str) -> _TorchTensor:
        return self

    def float(self) -> _TorchTensor:
        return _TorchTensor(self.array.astype("float32"))

    def numpy(self) -> Any:
        return self.array


def convert(nemo: Path, out: Path, **options: Any) -> Path:
    """mlx-audio 0.6.2's own converter (``python -m mlx_audio.stt.models.nemotron_asr.convert --nemo-path NEMO
    --mlx-path OUT [--dtype D] [-q --q-bits B --q-group-size G]``), run whole. It reads the weights with
    ``torch.load``, which this environment does not install: for that one call a stand-in ``torch`` module reads the
    pickle with omnid's restricted reader (the same tensors) and hands them over as the converter uses them."""
    import contextlib
    import io

    from omnid.engine.nemo.torch_zip import read_state_dict

    stt_models_package()
    from mlx_audio.stt.models.nemotron_asr.convert import convert as run

    def load(path: str, **_: Any) -> dict[str, _TorchTensor]:
        with open(path, "rb") as f:
            return {k: _TorchTensor(v) for k, v in read_state_dict(f).items()}

    torch = types.ModuleType("torch")
    torch.load = load  # type: ignore[attr-defined]
    saved = sys.modules.get("torch")
    sys.modules["torch"] = torch
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            run(str(nemo), str(out), **options)
    finally:
        if saved is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = saved
    return out
