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
