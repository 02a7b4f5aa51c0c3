"""``omnid doctor``: what this installation runs on, printed for bug reports."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from pathlib import Path

from omnid import blas
from omnid.config import Config, ConfigError, config_dir, load_pins, model_folder
from omnid.engine.errors import CheckpointError
from omnid.engine.nemotron.checkpoint import is_mlx_folder as is_nemotron_folder
from omnid.engine.parakeet.checkpoint import is_mlx_folder, nemo_file, transformers_architecture
from omnid.engine.pins import sha256
from omnid.engine.whisper.checkpoint import detect_format


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def doctor(config: Config, config_file: Path | None = None) -> int:
    import mlx.core as mx

    from omnid.cli.listen import portaudio_status

    status = blas.status()
    print(f"omnid        {_version('omnid')}")
    print(f"python       {sys.version.split()[0]} ({platform.platform()})")
    for dist in ("mlx", "numpy", "aiohttp", "msgspec", "av", "soxr", "tokenizers", "sounddevice", "prometheus-client"):
        print(f"{dist:<12} {_version(dist)}")
    print(f"mlx device   {mx.default_device()}")
    print(f"blas         {status.name}" + (f" ({status.path})" if status.path else "") + f": {status.reason}")
    print(f"config       {config_dir() / 'omnid.toml'}" + (f" + {config_file}" if config_file else ""))
    audio = portaudio_status()
    print("portaudio    " + ("usable" if audio is None else
                             f"not usable ({audio}); `omnid listen` needs it for the microphone, --file works without"))
    pins = load_pins()
    ok = True
    for model in config.models:
        try:
            folder = model_folder(model)
            fmt = _layout(model.kind, folder)
        except (ConfigError, CheckpointError) as exc:
            print(f"model        {model.id}: ERROR {exc}")
            ok = False
            continue
        print(f"model        {model.id} ({model.kind}, {fmt}) at {folder}")
        base = folder if folder.is_dir() else folder.parent  # a .nemo is pinned by its file name
        for name, want in sorted(pins.get(model.id, {}).items()):
            path = base / name
            state = "missing" if not path.exists() else ("ok" if sha256(path) == want else "MISMATCH")
            ok &= state == "ok"
            print(f"  pin        {name}: {state}")
    return 0 if ok else 1


def _layout(kind: str, path: Path) -> str:
    """The checkpoint layout a model's path holds, told by its files as its loader tells it."""
    if kind == "whisper":
        return detect_format(path)
    if kind == "parakeet":
        if path.is_dir() and is_mlx_folder(path):
            return "mlx"
        if path.is_dir() and transformers_architecture(path):
            return "transformers"
        if nemo_file(path) is not None:
            return "nemo"
        raise CheckpointError(f"{path}: no Parakeet checkpoint (a .nemo file, an mlx-community folder or a "
                              "transformers folder)")
    if kind == "nemotron":
        if path.is_dir() and is_nemotron_folder(path):
            return "mlx"
        if nemo_file(path) is not None:
            return "nemo"
        raise CheckpointError(f"{path}: no Nemotron checkpoint (a .nemo file or an mlx-community folder)")
    if not path.exists():
        raise CheckpointError(f"{path}: missing")
    return "nemo" if path.suffix == ".nemo" else "folder"

