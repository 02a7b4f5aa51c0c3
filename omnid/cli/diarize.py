"""``omnid diarize FILE``: who spoke when, one ``start end speaker`` line per turn (NeMo's streaming over the
whole file, the configured latency preset), on the model's runtime as in the daemon."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

from omnid.audio import SAMPLE_RATE, decode_audio
from omnid.cli.transcribe import cached_snapshot, repo_ids_only
from omnid.config import Config, ConfigError, ModelConfig
from omnid.engine import hub, kinds
from omnid.engine.diarization import turns
from omnid.runtime import diarization
from omnid.runtime.models import diarizer_runtime


def diarize_command(file: Path, model: str | None, latency: str | None, config: Config, revision: str = "") -> int:
    """A wrong model, checkpoint or file ends as every command's does (omnid/cli/failures.py)."""
    return asyncio.run(_diarize(file, _model(model, config, revision), latency or config.diarization.file_latency,
                                config))


async def _diarize(file: Path, model: ModelConfig, latency: str, config: Config) -> int:
    runtime = diarizer_runtime(model, config)
    runtime.start()
    try:
        await runtime.wait_loaded()  # a checkpoint that fails to load is told before the file is read
        audio = decode_audio(file, config.transcription.max_audio_seconds)
        progress = _progress(len(audio) / SAMPLE_RATE) if sys.stderr.isatty() else None
        probs = await diarization.diarize(runtime, audio, latency, on_progress=progress)
    finally:
        runtime.close()
    if progress is not None:
        print(file=sys.stderr)
    for t in turns(probs):
        print(f"{t.start:.2f} {t.end:.2f} speaker_{t.speaker}")
    return 0


def _progress(total: float) -> Callable[[float, float], None]:
    def progress(done: float, _total: float) -> None:
        print(f"\r{done * total:7.1f} / {total:.1f} s", end="", file=sys.stderr, flush=True)

    return progress


def _model(model: str | None, config: Config, revision: str = "") -> ModelConfig:
    """A checkpoint folder or .nemo file (of the first diarization kind), a configured diarization model (the first
    by default), or a Hugging Face repo id in the local cache (at ``revision``)."""
    diarizers = [k.name for k in kinds.of_role("diarization")]
    if model and Path(model).expanduser().exists():
        repo_ids_only(revision, model, "a path on disk")
        return ModelConfig(id=Path(model).name, kind=diarizers[0], path=str(Path(model).expanduser()))
    models = [m for m in config.models if m.kind in diarizers and (model in (None, m.id) or model in m.aliases)]
    if not models and model and hub.is_repo_id(model):
        return ModelConfig(id=model, kind=diarizers[0], path=str(cached_snapshot(model, revision)))
    if models:
        repo_ids_only(revision, model, "a configured model (its [[models]] entry takes a revision)")
    if not models:
        raise ConfigError(f"--model: {model!r} is neither a checkpoint path nor a configured "
                          f"{' or '.join(diarizers)} model" if model else "no diarization model: pass --model "
                          f"FOLDER|FILE.nemo or configure a [[models]] entry with kind = \"{diarizers[0]}\"")
    return models[0]
