"""A realtime session's settings: what each dialect's session update may say (wire.md 3a, 3b), validated into
one typed value, and the effective configuration each dialect echoes back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal

from omnid.audio import SAMPLE_RATE
from omnid.echo import shown
from omnid.engine.interface import Capabilities as EngineCapabilities
from omnid.runtime import request_rules
from omnid.runtime.catalog import ModelCatalog, NotTranscription, UnknownModel
from omnid.runtime.request_rules import TURN_MS, VAD_THRESHOLD, Count, Range, RuleError

OPENAI_RATE = 24000


class SettingsError(ValueError):
    """A session update the server cannot take. ``code`` is invalid_event (malformed) or unsupported_session
    (well formed, but not something this engine can honour); ``param`` names the field."""

    def __init__(self, code: str, param: str, message: str):
        super().__init__(message)
        self.code, self.param, self.message = code, param, message


@dataclass(frozen=True)
class ServerVad:
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500


@dataclass(frozen=True)
class Settings:
    model: str
    rate: int
    language: str | None = None
    prompt: str | None = None
    turns: ServerVad | None = None  # None: manual commits
    chunk_ms: int | None = None  # a cache-aware model's chunk, snapped to one it has (None: its native chunk)
    chunk_asked: float | None = None  # chunk_ms as the client asked for it (snapped again if the model changes)
    punctuation: bool | None = None  # a model with the switch: as asked (None: the model's default)
    itn: bool | None = None  # use_itn, for a model with inverse text normalisation: as asked (None: its default)
    speakers: bool = False  # each final names its speaker (a diarization model's live stream of the session)

    @property
    def manual(self) -> bool:
        return self.turns is None


@dataclass(frozen=True)
class Capabilities:
    """What the daemon can honour, for validating updates: model ids with their languages, and rate bounds."""

    catalog: ModelCatalog
    engines: dict[str, EngineCapabilities]  # of every model that is ready
    min_rate: int
    max_rate: int
    max_prompt_chars: int = 4096
    speakers: bool = False  # a diarization model is ready: sessions may ask for speakers

    def initial(self, dialect: Literal["voxt", "openai"]) -> Settings:
        """The default model's session, in its configured language where it has one (a model that detects none)."""
        engine = self.engines.get(self.catalog.default)
        language = engine.default_language if engine is not None else None
        if dialect == "voxt":
            return Settings(self.catalog.default, SAMPLE_RATE, language)  # Voxt: 16 kHz, manual turns unless asked
        return Settings(self.catalog.default, OPENAI_RATE, language, turns=ServerVad())


def _obj(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SettingsError("invalid_event", param, f"{param} must be an object")
    return value


def _str(value: Any, param: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise SettingsError("invalid_event", param, f"{param} must be a string")
    return value.strip() or None


def _number(value: Any, param: str, rule: Range | Count) -> Any:
    """A JSON number within the rule's bounds; for a whole-number rule a float must be whole."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(rule, Count) and isinstance(value, float) and not value.is_integer()):
        raise SettingsError("invalid_event", param, f"{param} must be {'an integer' if isinstance(rule, Count) else 'a number'}")
    with _unsupported():
        return rule.check(param, value)


@contextmanager
def _unsupported() -> Iterator[None]:
    """What the request rules refuse is a setting the server cannot take."""
    try:
        yield
    except RuleError as exc:
        raise SettingsError("unsupported_session", exc.param, exc.message) from None


def turn_detection(value: Any, current: ServerVad | None, param: str = "session.turn_detection") -> ServerVad | None:
    if value is None:
        return None
    spec = _obj(value, param)
    kind = spec.get("type", "server_vad")
    if kind != "server_vad":
        raise SettingsError("unsupported_session", f"{param}.type",
                            f"turn detection {shown(kind)} is not supported; use server_vad or null")
    base = current or ServerVad()
    out = base
    if "threshold" in spec:
        out = replace(out, threshold=_number(spec["threshold"], f"{param}.threshold", VAD_THRESHOLD))
    if "prefix_padding_ms" in spec:
        out = replace(out, prefix_padding_ms=_number(spec["prefix_padding_ms"], f"{param}.prefix_padding_ms", TURN_MS))
    if "silence_duration_ms" in spec:
        out = replace(out, silence_duration_ms=_number(spec["silence_duration_ms"], f"{param}.silence_duration_ms", TURN_MS))
    return out


def _transcription(settings: Settings, spec: Any, caps: Capabilities, param: str) -> Settings:
    t = _obj(spec, param)
    model = settings.model
    if "model" in t:
        asked = _str(t["model"], f"{param}.model")
        try:
            model = caps.catalog.resolve(asked)
        except NotTranscription as exc:
            raise SettingsError("unsupported_session", f"{param}.model", str(exc)) from None
        except UnknownModel:
            raise SettingsError("unsupported_session", f"{param}.model",
                                f"model {shown(asked)} is not served here (models: {', '.join(caps.catalog.kinds)})") from None
        if model not in caps.engines:
            raise SettingsError("unsupported_session", f"{param}.model", f"model {model} is still loading")
    out = replace(settings, model=model)
    if "language" in t:
        out = replace(out, language=_language(t["language"], f"{param}.language"))
    if "prompt" in t:
        out = replace(out, prompt=_prompt(t["prompt"], f"{param}.prompt", caps, out.model))
    return _check_language(out, caps)


def _prompt(value: Any, param: str, caps: Capabilities, model: str) -> str | None:
    with _unsupported():
        return request_rules.prompt(_str(value, param), caps.engines.get(model), model, caps.max_prompt_chars, param)


def _language(value: Any, param: str) -> str | None:
    language = _str(value, param)
    with _unsupported():
        request_rules.language_length(language, param)
    return language


def _check_language(settings: Settings, caps: Capabilities) -> Settings:
    """The settings held to the session's model, whichever came first in the update: the language it decodes in,
    by the request rules (a language the model does not know is detected, as on HTTP; a model that must have it,
    Nemotron, refuses it; a name the model has for one, a prompt key, is kept as it is; none, for a model that
    detects none and has no configured language, is refused), a prompt only for a model that takes one, punctuation
    only for a model with the switch, and a cache-aware model's chunk snapped to its own sizes."""
    engine = caps.engines.get(settings.model)
    if engine is None:
        return replace(settings, language=None)
    with _unsupported():
        language = request_rules.language(settings.language, engine, settings.model, "session.language")
        request_rules.prompt(settings.prompt, engine, settings.model, caps.max_prompt_chars, "session.prompt")
        request_rules.punctuation(settings.punctuation, engine, settings.model, "session.punctuation")
        request_rules.itn(settings.itn, engine, settings.model, "session.use_itn")
    return replace(settings, language=language.code, chunk_ms=snap_chunk(settings.chunk_asked, engine.chunk_ms))


def chunk(value: Any) -> float | None:
    """chunk_ms as asked: a positive JSON number, or null for the model's native chunk."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise SettingsError("invalid_chunk", "session.chunk_ms", "chunk_ms must be a positive number.")
    return float(value)


def snap_chunk(asked: float | None, sizes: tuple[int, ...]) -> int | None:
    """The nearest of a model's chunk sizes (a tie: the shorter, as the reference server snaps); None where the
    client asked for none or the model has none."""
    if asked is None or not sizes:
        return None
    return min(sizes, key=lambda ms: (abs(ms - asked), ms))


def switch(value: Any, name: str) -> bool | None:
    """A model's switch as asked (omnid extensions in both dialects: punctuation, use_itn): true, false, or null
    for the model's default."""
    if value is not None and not isinstance(value, bool):
        raise SettingsError("invalid_event", f"session.{name}", f"session.{name} must be true, false or null")
    return value


def _switches(out: Settings, s: dict[str, Any], caps: Capabilities, audio_started: bool) -> Settings:
    """omnid's switches a session update sets, the same in both dialects (the rest of the session is the
    dialect's): the model's punctuation and use_itn, and speakers."""
    if "punctuation" in s:
        out = replace(out, punctuation=switch(s["punctuation"], "punctuation"))
    if "use_itn" in s:
        out = replace(out, itn=switch(s["use_itn"], "use_itn"))
    if "speakers" in s:
        out = replace(out, speakers=speakers(s["speakers"], out.speakers, caps, audio_started))
    return out


def speakers(value: Any, current: bool, caps: Capabilities, audio_started: bool) -> bool:
    """session.speakers: true, false or null (off). On only with a diarization model, and fixed by the first
    audio (the speaker stream follows the session's audio from its start)."""
    param = "session.speakers"
    asked = bool(switch(value, "speakers"))
    if asked and not caps.speakers:
        raise SettingsError("unsupported_session", param, "speakers need a speaker diarization model (a [[models]] "
                            "entry with kind = \"sortformer\"); none is configured")
    if asked != current and audio_started:
        raise SettingsError("unsupported_session", param, "speakers can be turned on or off only before the first audio")
    return asked


def _pcm16(value: Any, param: str) -> None:
    if value is not None and value != "pcm16":
        raise SettingsError("unsupported_session", param, f"audio format {shown(value)} is not supported; use pcm16")


def voxt_update(settings: Settings, session: Any, caps: Capabilities, audio_started: bool = False) -> Settings:
    """Voxt's flat session: turn_detection, language, prompt, input_audio_format (16 kHz PCM16 only)."""
    s = _obj(session, "session")
    _pcm16(s.get("input_audio_format"), "session.input_audio_format")
    out = settings
    if "turn_detection" in s:
        out = replace(out, turns=turn_detection(s["turn_detection"], settings.turns))
    if "language" in s:
        out = replace(out, language=_language(s["language"], "session.language"))
    if "prompt" in s:
        out = replace(out, prompt=_prompt(s["prompt"], "session.prompt", caps, out.model))
    if "chunk_ms" in s:
        out = replace(out, chunk_asked=chunk(s["chunk_ms"]))
    out = _switches(out, s, caps, audio_started)
    if "model" in s:
        out = _transcription(out, {"model": s["model"]}, caps, "session")
    return _check_language(out, caps)


def openai_update(settings: Settings, session: Any, caps: Capabilities, audio_started: bool) -> Settings:
    """GA shape (session.type / session.audio.input...) or beta shape (input_audio_format,
    input_audio_transcription, turn_detection)."""
    s = _obj(session, "session")
    out = settings
    if "chunk_ms" in s:  # an omnid extension, as in the Voxt dialect: a cache-aware model's chunk
        out = replace(out, chunk_asked=chunk(s["chunk_ms"]))
    out = _switches(out, s, caps, audio_started)  # omnid extensions too: punctuation, use_itn, speakers
    if "type" in s and s["type"] != "transcription":
        raise SettingsError("unsupported_session", "session.type", f"session type {shown(s['type'])} is not supported; use transcription")
    if "audio" in s:
        audio_in = _obj(_obj(s["audio"], "session.audio").get("input", {}), "session.audio.input")
        if "format" in audio_in:
            out = replace(out, rate=_format(audio_in["format"], caps))
        if "transcription" in audio_in:
            out = _transcription(out, audio_in["transcription"] or {}, caps, "session.audio.input.transcription")
        if "turn_detection" in audio_in:
            out = replace(out, turns=turn_detection(audio_in["turn_detection"], settings.turns,
                                                    "session.audio.input.turn_detection"))
    else:
        if "input_audio_format" in s:
            _pcm16(s["input_audio_format"], "session.input_audio_format")
            out = replace(out, rate=OPENAI_RATE)
        if "input_audio_transcription" in s:
            out = _transcription(out, s["input_audio_transcription"] or {}, caps, "session.input_audio_transcription")
        if "turn_detection" in s:
            out = replace(out, turns=turn_detection(s["turn_detection"], settings.turns))
    if audio_started and out.rate != settings.rate:
        raise SettingsError("unsupported_session", "session.audio.input.format.rate",
                            "the sample rate cannot change once audio has been sent")
    changed = (out.chunk_asked, out.punctuation, out.itn) != (settings.chunk_asked, settings.punctuation, settings.itn)
    return _check_language(out, caps) if changed else out


def _format(value: Any, caps: Capabilities) -> int:
    param = "session.audio.input.format"
    fmt = _obj(value, param)
    kind = fmt.get("type", "audio/pcm")
    if kind != "audio/pcm":
        raise SettingsError("unsupported_session", f"{param}.type", f"audio format {shown(kind)} is not supported; use audio/pcm")
    return _number(fmt.get("rate", OPENAI_RATE), f"{param}.rate", Count(caps.min_rate, caps.max_rate))


# --- what the server echoes ------------------------------------------------------------------------------------


def _turns(t: ServerVad | None) -> dict[str, Any] | None:
    if t is None:
        return None
    return {"type": "server_vad", "threshold": t.threshold, "prefix_padding_ms": t.prefix_padding_ms,
            "silence_duration_ms": t.silence_duration_ms}


def voxt_view(s: Settings) -> dict[str, Any]:
    view: dict[str, Any] = {"model": s.model, "input_audio_format": "pcm16", "language": s.language, "prompt": s.prompt,
            "turn_detection": _turns(s.turns)}
    if s.chunk_ms is not None:
        view["chunk_ms"] = s.chunk_ms
    return _extensions(s, view)


def openai_view(s: Settings, session_id: str) -> dict[str, Any]:
    """The GA shape (session.created, session.updated), with omnid's punctuation where the session asked for it."""
    return _extensions(s, {
        "type": "transcription",
        "id": session_id,
        "object": "realtime.transcription_session",
        "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": s.rate},
            "transcription": {"model": s.model, "language": s.language, "prompt": s.prompt},
            "turn_detection": _turns(s.turns),
            "noise_reduction": None,
        }},
        "include": [],
    })


def openai_beta_view(s: Settings, session_id: str) -> dict[str, Any]:
    return _extensions(s, {
        "id": session_id,
        "object": "realtime.transcription_session",
        "input_audio_format": "pcm16",
        "input_audio_transcription": {"model": s.model, "language": s.language, "prompt": s.prompt},
        "turn_detection": _turns(s.turns),
    })


def _extensions(s: Settings, view: dict[str, Any]) -> dict[str, Any]:
    """omnid's own settings in a view, only where the session set them (an OpenAI client never sees one)."""
    if s.punctuation is not None:
        view["punctuation"] = s.punctuation
    if s.itn is not None:
        view["use_itn"] = s.itn
    if s.speakers:
        view["speakers"] = True
    return view
