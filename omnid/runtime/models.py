"""From configuration to running engines: one EngineRuntime per configured model, built as its kind's descriptor
says (omnid/engine/kinds.py), and request options."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from omnid.config import (
    SECTIONS,
    Config,
    ModelConfig,
    TranscriptionConfig,
    load_pins,
    model_folder,
)
from omnid.engine import kinds
from omnid.engine.alignment import AlignerEngine
from omnid.engine.diarization import DiarizationEngine
from omnid.engine.errors import CheckpointError
from omnid.engine.interface import TranscriptionEngine
from omnid.engine.kind import Sections
from omnid.engine.options import TranscribeOptions
from omnid.runtime.scheduler import EngineRuntime
from omnid.vad.silero import SileroVAD

E = TypeVar("E")


def named(source: Path, build: Callable[[], E]) -> Callable[[], E]:
    """The same clear error, naming the checkpoint, for every way its load can fail: a MemoryError or a
    RecursionError out of a hostile file names nothing by itself (a loader names the file and tensor it can), nor
    does whatever else a library raises on a file no loader check foresaw (its traceback is kept as the cause, for
    OMNID_LOG_LEVEL=debug)."""

    def load() -> E:
        try:
            return build()
        except CheckpointError:
            raise
        except MemoryError as exc:
            raise CheckpointError(f"{source}: cannot load: it claims more memory than there is") from exc
        except RecursionError as exc:
            raise CheckpointError(f"{source}: cannot load: a file in it is nested too deeply") from exc
        except OSError as exc:
            raise CheckpointError(f"{source}: cannot load: {exc.filename or ''}{': ' if exc.filename else ''}"
                                  f"{exc.strerror or exc}") from exc
        except Exception as exc:  # noqa: BLE001  (a load that fails is a checkpoint that cannot load)
            raise CheckpointError(f"{source}: cannot load: {type(exc).__name__}: {exc}") from exc

    return load


def sections(config: Config) -> Sections:
    """Every section of the configuration as plain values, by name: what a kind builds its options from."""
    return {name: msgspec.structs.asdict(getattr(config, name)) for name in SECTIONS}


def loader(model: ModelConfig, config: Config) -> Callable[[], Any]:
    """How a configured model's engine loads, on its runtime's own thread: its folder, pins and options are
    resolved now, the weights there."""
    kind = kinds.named(model.kind)
    folder = model_folder(model)
    pins = load_pins().get(model.id, {})
    options = kind.options(sections(config))
    return named(folder, lambda: kind.load(model.id, folder, pins, options))


def aligner_runtime(model: ModelConfig, config: Config) -> EngineRuntime[AlignerEngine]:
    """A forced aligner's runtime: its jobs come after their transcription's, at that job's priority."""
    return EngineRuntime(model.id, loader(model, config), config.engine.max_queue,
                         final_reserve=config.realtime.max_sessions, idle_clear_s=config.engine.idle_clear_s)


def transcriber_runtime(model: ModelConfig, config: Config) -> tuple[EngineRuntime[TranscriptionEngine],
                                                                     EngineRuntime[AlignerEngine] | None]:
    """A transcription model's runtime, and its aligner's (attached to it) when it names one."""
    runtime = model_runtime(model, config)
    if model.aligner:
        runtime.aligner = aligner_runtime(config.model(model.aligner), config)
    return runtime, runtime.aligner


def diarizer_runtime(model: ModelConfig, config: Config) -> EngineRuntime[DiarizationEngine]:
    """A diarization model's runtime: socket feeds (FINAL priority, they are live) and files share its queue."""
    return EngineRuntime(model.id, loader(model, config), config.diarization.max_queue,
                         final_reserve=config.diarization.max_streams, idle_clear_s=config.engine.idle_clear_s)


def model_runtime(model: ModelConfig, config: Config) -> EngineRuntime[TranscriptionEngine]:
    """One runtime (worker thread, queue) for a configured model, built by its kind."""
    return EngineRuntime(model.id, loader(model, config), config.engine.max_queue,
                         final_reserve=config.realtime.max_sessions, max_batch=config.engine.max_batch,
                         idle_clear_s=config.engine.idle_clear_s)


def vad_runtime(config: Config) -> EngineRuntime[SileroVAD]:
    """Silero VAD's runtime (the configured weights, else the package's). The realtime batcher has at most one job
    queued at a time, at FINAL priority: the reserve keeps a queue full of file requests from ever refusing a live
    session's audio."""
    weights = Path(config.vad.weights).expanduser() if config.vad.weights else None
    return EngineRuntime(config.vad.id, lambda: SileroVAD.load(weights), config.vad.max_queue, final_reserve=1,
                         idle_clear_s=config.engine.idle_clear_s)


def transcribe_options(
    t: TranscriptionConfig,
    *,
    language: str | None = None,
    prompt: str | None = None,
    prompt_tokens: tuple[int, ...] | None = None,
    temperature: float = 0.0,
    fallback: bool = True,
    max_new_tokens: int | None = None,
    window: str | None = None,
    word_timestamps: bool = False,
    timed: bool = False,
    punctuation: bool | None = None,
    itn: bool | None = None,
) -> TranscribeOptions:
    """A request's options; ``window`` unset is the configuration's (how a model decodes whatever the request
    is its own options, set when its engine is built)."""
    return TranscribeOptions(
        language=language,
        prompt=prompt,
        prompt_tokens=prompt_tokens,
        temperature=temperature,
        fallback=fallback,
        max_new_tokens=max_new_tokens or None,
        word_timestamps=word_timestamps,
        timed=timed,
        window=window or t.window,
        punctuation=punctuation,
        itn=itn,
    )
