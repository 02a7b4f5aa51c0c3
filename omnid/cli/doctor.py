"""``omnid doctor``: what this installation runs on, printed for bug reports."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from pathlib import Path

from omnid import blas
from omnid.config import Config, ConfigError, config_dir, load_pins, model_folder
from omnid.engine import kinds
from omnid.engine.errors import CheckpointError
from omnid.engine.pins import sha256


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
            fmt = kinds.named(model.kind).layout(folder)  # as its loader tells it
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

