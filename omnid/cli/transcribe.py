"""``omnid transcribe``: files to transcripts on the model's runtime, as in the daemon, with progress on stderr. Its
options are held to the request rules the HTTP route applies (omnid/runtime/request_rules.py), with the same messages."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec

from omnid.audio import AudioDecodeError, decode_audio
from omnid.cli.progress import Progress
from omnid.config import Config, ConfigError, ModelConfig
from omnid.engine import hub, kinds
from omnid.engine.interface import TranscriptionEngine
from omnid.engine.options import TranscribeOptions
from omnid.formats import EXTENSIONS, render
from omnid.runtime import request_rules as rules
from omnid.runtime import transcription
from omnid.runtime.catalog import ModelCatalog, NotTranscription, UnknownModel
from omnid.runtime.models import transcribe_options, transcriber_runtime, vad_runtime
from omnid.runtime.request_rules import RuleError
from omnid.runtime.scheduler import EngineRuntime
from omnid.vad.silero import SileroVAD


def folder_model(folder: Path) -> ModelConfig:
    """A checkpoint folder (or a Parakeet or Nemotron .nemo file) given as --model: its kind told by its files."""
    kind = kinds.recognise(folder, "transcription")
    anything = kinds.recognise(folder)  # a forced aligner's folder also holds model.safetensors, as Whisper's does
    if anything is not None and anything.role != "transcription":
        raise ConfigError(f"--model: {folder} holds a {anything.title} checkpoint, which does not transcribe")
    if kind is None:
        known = kinds.spoken([k.title for k in kinds.of_role("transcription")])
        raise ConfigError(f"--model: {folder} holds no {known} checkpoint")
    return ModelConfig(id=folder.stem if folder.is_file() else folder.name, kind=kind.name, path=str(folder))


def cached_snapshot(repo_id: str, revision: str = "") -> Path:
    """A Hugging Face repo id given as --model: its `main` snapshot in the local cache, or --revision's (a branch,
    tag or commit), as a configured `path` and `revision` are read (engine/hub.py); where the cache holds neither,
    the configuration's one line naming the id, the revision and the cache."""
    try:
        return hub.snapshot(repo_id, revision)
    except hub.NotCached as exc:
        raise ConfigError(f"--model: {exc}") from None


def repo_ids_only(revision: str, model_id: str | None, is_what: str) -> None:
    """--revision given with a --model that is no Hugging Face repo id (a path on disk, a configured model, or
    none): a usage error, as a configured `revision` with a `path` on disk is."""
    if revision:
        named = f"--model {model_id} is {is_what}" if model_id else "no --model names one"
        raise ConfigError(f"--revision is for a Hugging Face repo id, and {named}")


async def start_model(config: Config, model_id: str | None, aligner: str | None = None, revision: str = ""
                      ) -> EngineRuntime[TranscriptionEngine]:
    """A configured model by id or alias, a checkpoint folder given by its path, or a Hugging Face repo id in the
    local cache (at ``revision``); with its aligner (its configured one, or ``aligner``: a configured id or a
    folder)."""
    as_path = Path(model_id).expanduser() if model_id else None
    if as_path is not None and (as_path.is_dir() or as_path.suffix == ".nemo") and model_id not in {m.id for m in config.models}:
        repo_ids_only(revision, model_id, "a path on disk")
        model = folder_model(as_path)
    else:
        try:
            model = config.model(ModelCatalog.from_config(config).resolve(model_id))
            repo_ids_only(revision, model_id, "a configured model (its [[models]] entry takes a revision)")
        except UnknownModel as exc:
            if model_id is None or not hub.is_repo_id(model_id):
                raise ConfigError(f"--model: no transcription model or checkpoint folder {model_id!r}") from exc
            model = msgspec.structs.replace(folder_model(cached_snapshot(model_id, revision)), id=model_id)
        except NotTranscription as exc:
            raise ConfigError(f"--model: no transcription model or checkpoint folder {model_id!r}") from exc
    if aligner:
        if not kinds.aligners_of(model.kind):
            timed = kinds.spoken([k.title for k in kinds.timed()])
            raise ConfigError(f"--aligner: model {model.id} is not a {timed} model (only those take an aligner)")
        timing = aligner_model(config, aligner, model.kind)
        model = msgspec.structs.replace(model, aligner=timing.id)
        if timing not in config.models:
            config = msgspec.structs.replace(config, models=[*config.models, timing])
    runtime, aligner_runtime = transcriber_runtime(model, config)
    runtimes = [r for r in (runtime, aligner_runtime) if r is not None]
    for r in runtimes:
        r.start()
    try:
        await asyncio.gather(*(r.wait_loaded() for r in runtimes))
    except BaseException:
        close(runtime)
        raise
    return runtime


def aligner_model(config: Config, value: str, timed: str) -> ModelConfig:
    """--aligner for a model of kind ``timed``: a configured forced aligner of a kind that times it, or a checkpoint
    folder (of the first such kind)."""
    aligners = kinds.aligners_of(timed)
    configured = {m.id: m for m in config.models}
    if value in configured:
        if configured[value].kind not in {k.name for k in aligners}:
            raise ConfigError(f"--aligner: model {value} is not a forced aligner")
        return configured[value]
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"--aligner: no forced aligner or checkpoint folder {value!r}")
    return ModelConfig(id=folder.name + "-aligner", kind=aligners[0].name, path=str(folder))


def close(runtime: EngineRuntime[TranscriptionEngine]) -> None:
    """The runtime and its aligner's."""
    runtime.close()
    if runtime.aligner is not None:
        runtime.aligner.close()


@contextmanager
def option_rules() -> Iterator[None]:
    """A value the request rules refuse, as the HTTP route refuses it: its message, after the option's name
    (``--max-new-tokens: max_new_tokens must be ...``); the command exits 2."""
    try:
        yield
    except RuleError as exc:
        raise ConfigError(f"--{exc.param.replace('_', '-')}: {exc.message}") from None


@dataclass(frozen=True)
class Values:
    """The options the request rules check before the model is loaded: their ranges and lengths."""

    temperature: float | None
    max_new_tokens: int | None


def check_values(args: argparse.Namespace, config: Config) -> Values:
    with option_rules():
        rules.language_length(args.language)
        rules.prompt(args.prompt, None, "", config.transcription.max_prompt_chars)
        return Values(rules.TEMPERATURE.parse("temperature", args.temperature),
                      rules.MAX_NEW_TOKENS.parse("max_new_tokens", args.max_new_tokens))


def model_options(runtime: EngineRuntime[TranscriptionEngine], args: argparse.Namespace, values: Values,
                  config: Config) -> TranscribeOptions:
    """What this model cannot do is refused before any audio is read, naming the option; a language it does not
    know is detected, and said so."""
    model = runtime.engine.model_id
    can = transcription.capabilities(runtime)
    with option_rules():
        temperature = rules.temperature(values.temperature, can, model)
        prompt = rules.prompt(args.prompt, can, model, config.transcription.max_prompt_chars)
        if args.word_timestamps:
            rules.word_timestamps(can, model, "word_timestamps")
        rules.response_format(args.format, can, model, "format")
        language = rules.language(args.language, can, model)
        punctuation = rules.punctuation(args.punctuation, can, model)
        itn = rules.itn(args.itn, can, model, "use_itn")
    if language.instead:
        print(f"omnid: --language: {language.instead}", file=sys.stderr)
    return transcribe_options(
        config.transcription,
        language=language.code,
        prompt=prompt,
        temperature=temperature,
        max_new_tokens=rules.token_budget(values.max_new_tokens, can),
        window=args.window,
        word_timestamps=args.word_timestamps,
        timed=runtime.aligner is not None and (args.format in (*rules.TIMED_FORMATS, "verbose_json") or args.word_timestamps),
        punctuation=punctuation,
        itn=itn,
    )


async def transcribe_command(args: argparse.Namespace, config: Config) -> int:
    values = check_values(args, config)
    files = [path for path in args.files if _readable(path)]
    if not files:  # nothing to transcribe: no model is loaded for it
        return 1
    runtime = await start_model(config, args.model, args.aligner, args.revision)
    vad = LazyVad(config)
    try:
        opts = model_options(runtime, args, values, config)
    except ConfigError:
        close(runtime)
        raise
    failures = len(args.files) - len(files)
    try:
        for path in files:
            try:
                text = await _transcribe_file(runtime, vad, path, opts, args, config)
            except AudioDecodeError as exc:
                print(f"omnid: {path}: {exc}", file=sys.stderr)
                failures += 1
                continue
            if args.output_dir:
                args.output_dir.mkdir(parents=True, exist_ok=True)
                out = args.output_dir / f"{path.stem}.{EXTENSIONS[args.format]}"
                out.write_text(text)
                print(f"{path} -> {out}", file=sys.stderr)
            else:
                sys.stdout.write(text if text.endswith("\n") else text + "\n")
                sys.stdout.flush()
    finally:
        close(runtime)
        vad.close()
    return 1 if failures else 0


class LazyVad:
    """Silero VAD for a model that takes long audio only as speech clips, started when a file first needs it."""

    def __init__(self, config: Config):
        self.config = config
        self.runtime: EngineRuntime[SileroVAD] | None = None

    async def get(self) -> EngineRuntime[SileroVAD]:
        if self.runtime is None:
            self.runtime = vad_runtime(self.config)
            self.runtime.start()
            await self.runtime.wait_loaded()
        return self.runtime

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.close()


def _readable(path: Path) -> bool:
    """A file that exists, else its one line (as a file that fails to decode gets) before any model is loaded."""
    if path.is_file():
        return True
    print(f"omnid: {path}: {'is a folder, not an audio file' if path.is_dir() else f'no such file: {path}'}",
          file=sys.stderr)
    return False


async def _transcribe_file(runtime: EngineRuntime[TranscriptionEngine], vad: LazyVad,
                           path: Path, opts: TranscribeOptions, args: argparse.Namespace, config: Config) -> str:
    loop = asyncio.get_running_loop()
    audio = await loop.run_in_executor(None, decode_audio, path)
    progress = Progress(path.name, len(audio) / 16000, enabled=not args.quiet)

    def progressed(done: float, total: float) -> None:
        loop.call_soon_threadsafe(progress.update, done)

    clips = None
    if transcription.needs_clips(runtime, audio):  # long audio goes to such a model as Silero's speech clips
        clips = await transcription.model_clips(runtime, await vad.get(), audio, config.transcription.vad_filter_pad_s)
    transcript = await transcription.transcribe(runtime, audio, opts, clips=clips, on_progress=progressed)
    progress.finish()
    return render(transcript, args.format, words=args.word_timestamps)
