"""From configuration to running engines: one EngineRuntime per configured model, and request options."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from omnid.config import (
    Config,
    ModelConfig,
    TranscriptionConfig,
    load_pins,
    model_folder,
)
from omnid.engine.errors import CheckpointError
from omnid.engine.interface import TranscriptionEngine
from omnid.engine.nemotron.engine import NemotronEngine
from omnid.engine.options import TranscribeOptions
from omnid.engine.parakeet.engine import ParakeetEngine, ParakeetOptions
from omnid.engine.qwen3_aligner.engine import Qwen3AlignerEngine
from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions
from omnid.engine.sortformer.engine import SortformerEngine
from omnid.engine.whisper.decoding import DecodeOptions
from omnid.engine.whisper.engine import WhisperEngine
from omnid.engine.whisper.options import WhisperOptions
from omnid.runtime.scheduler import EngineRuntime

E = TypeVar("E")


def named(source: Path, build: Callable[[], E]) -> Callable[[], E]:
    """The same clear error, naming the checkpoint, for every way its load can fail: a MemoryError or a
    RecursionError out of a hostile file names nothing by itself (a loader names the file and tensor it can)."""

    def load() -> E:
        try:
            return build()
        except CheckpointError:
            raise
        except MemoryError as exc:
            raise CheckpointError(f"{source}: cannot load: it claims more memory than there is") from exc
        except RecursionError as exc:
            raise CheckpointError(f"{source}: cannot load: a file in it is nested too deeply") from exc

    return load


def whisper_engine(model: ModelConfig, config: Config) -> Callable[[], TranscriptionEngine]:
    """Loads on the runtime's own thread: the folder, pins and options are resolved now, the weights there."""
    folder = model_folder(model)
    pins = load_pins().get(model.id, {})
    t = config.transcription
    options = WhisperOptions(
        temperature_increment=t.temperature_increment,
        condition_on_previous_text=t.condition_on_previous_text,
        content_padding_s=t.content_padding_s,
        content_min_window_s=t.content_min_window_s,
        decode=DecodeOptions(
            compression_ratio_threshold=t.compression_ratio_threshold,
            log_prob_threshold=t.log_prob_threshold,
            no_speech_threshold=t.no_speech_threshold,
            max_initial_timestamp=t.max_initial_timestamp,
        ),
    )
    return named(folder, lambda: WhisperEngine(model.id, folder, pins, options))


def qwen3_asr_engine(model: ModelConfig, config: Config) -> Callable[[], TranscriptionEngine]:
    folder = model_folder(model)
    pins = load_pins().get(model.id, {})
    options = QwenOptions(**{k: v for k, v in msgspec.structs.asdict(config.qwen3_asr).items()
                             if k != "timed_segment_max_s"})
    return named(folder, lambda: Qwen3AsrEngine(model.id, folder, pins, options))


def parakeet_engine(model: ModelConfig, config: Config) -> Callable[[], TranscriptionEngine]:
    path = model_folder(model)
    pins = load_pins().get(model.id, {})
    options = ParakeetOptions(**msgspec.structs.asdict(config.parakeet))
    return named(path, lambda: ParakeetEngine(model.id, path, pins, options))


def nemotron_engine(model: ModelConfig, config: Config) -> Callable[[], TranscriptionEngine]:
    path = model_folder(model)
    pins = load_pins().get(model.id, {})
    return named(path, lambda: NemotronEngine(model.id, path, pins))


# How each kind of model in the configuration becomes an engine.
ENGINES: dict[str, Callable[[ModelConfig, Config], Callable[[], TranscriptionEngine]]] = {
    "whisper": whisper_engine,
    "qwen3_asr": qwen3_asr_engine,
    "parakeet": parakeet_engine,
    "nemotron": nemotron_engine,
}


def aligner_runtime(model: ModelConfig, config: Config) -> EngineRuntime[Qwen3AlignerEngine]:
    """A forced aligner's runtime: its jobs come after their transcription's, at that job's priority."""
    folder = model_folder(model)
    pins = load_pins().get(model.id, {})
    segment_max_s = config.qwen3_asr.timed_segment_max_s
    return EngineRuntime(model.id, named(folder, lambda: Qwen3AlignerEngine(model.id, folder, pins,
                                                                            segment_max_s=segment_max_s)),
                         config.engine.max_queue, final_reserve=config.realtime.max_sessions,
                         idle_clear_s=config.engine.idle_clear_s)


def transcriber_runtime(model: ModelConfig, config: Config) -> tuple[EngineRuntime[TranscriptionEngine],
                                                                     EngineRuntime[Qwen3AlignerEngine] | None]:
    """A transcription model's runtime, and its aligner's (attached to it) when it names one."""
    runtime = model_runtime(model, config)
    if model.aligner:
        runtime.aligner = aligner_runtime(config.model(model.aligner), config)
    return runtime, runtime.aligner


def diarizer_runtime(model: ModelConfig, config: Config) -> EngineRuntime[SortformerEngine]:
    """A diarization model's runtime: socket feeds (FINAL priority, they are live) and files share its queue."""
    folder = model_folder(model)
    pins = load_pins().get(model.id, {})
    return EngineRuntime(model.id, named(folder, lambda: SortformerEngine(model.id, folder, pins)), config.diarization.max_queue,
                         final_reserve=config.diarization.max_streams,
                         idle_clear_s=config.engine.idle_clear_s)


def model_runtime(model: ModelConfig, config: Config) -> EngineRuntime[TranscriptionEngine]:
    """One runtime (worker thread, queue) for a configured model, built by its kind."""
    return EngineRuntime(model.id, ENGINES[model.kind](model, config), config.engine.max_queue,
                         final_reserve=config.realtime.max_sessions, max_batch=config.engine.max_batch,
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
    )
