"""``omnid diarize FILE``: who spoke when, one ``start end speaker`` line per turn (NeMo's streaming over the
whole file, the configured latency preset)."""

from __future__ import annotations

import sys
from pathlib import Path

from omnid.audio import AudioDecodeError, decode_audio
from omnid.config import Config, ConfigError, load_pins, model_folder
from omnid.engine.errors import CheckpointError
from omnid.engine.sortformer.engine import PRESETS, SortformerEngine
from omnid.engine.sortformer.segments import turns


def diarize_command(file: Path, model: str | None, latency: str | None, config: Config) -> int:
    try:
        engine = _engine(model, config)
        audio = decode_audio(file, config.transcription.max_audio_seconds)
    except (ConfigError, CheckpointError, AudioDecodeError, OSError) as exc:
        print(f"omnid: {exc}", file=sys.stderr)
        return 2
    preset = PRESETS[latency or config.diarization.file_latency]
    total = len(audio) / 16000

    def progress(done: float, _total: float) -> None:
        print(f"\r{done * total:7.1f} / {total:.1f} s", end="", file=sys.stderr, flush=True)

    probs = engine.diarize(audio, preset, on_progress=progress if sys.stderr.isatty() else None)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    for t in turns(probs):
        print(f"{t.start:.2f} {t.end:.2f} speaker_{t.speaker}")
    return 0


def _engine(model: str | None, config: Config) -> SortformerEngine:
    """A checkpoint folder or .nemo file, or a configured model of kind sortformer (the first by default)."""
    if model and Path(model).expanduser().exists():
        return SortformerEngine(Path(model).name, Path(model).expanduser())
    models = [m for m in config.models if m.kind == "sortformer" and (model in (None, m.id) or model in m.aliases)]
    if not models:
        raise ConfigError(f"--model: {model!r} is neither a checkpoint path nor a configured sortformer model"
                          if model else "no diarization model: pass --model FOLDER|FILE.nemo or configure a "
                                        "[[models]] entry with kind = \"sortformer\"")
    return SortformerEngine(models[0].id, model_folder(models[0]), load_pins().get(models[0].id, {}))
