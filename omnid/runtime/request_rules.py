"""The rules a transcription request is held to, whichever way it comes: ``omnid transcribe``'s options, the form
fields of the HTTP routes, and a realtime session's settings all call these, so a value one of them refuses the
others refuse with the same message, and one they take they all read the same way.

Each rule takes a value as its caller has it (the text of a form field or a command-line option, or a JSON
number), the model's capabilities where it depends on them, and the name the caller's wire gives the value
(``temperature``, ``session.turn_detection.threshold``); it returns the value to use or raises ``RuleError``
naming it. Callers turn a ``RuleError`` into their own error: an HTTP 400, a session error event, the command
line's message and exit status 2.

Languages: an ISO-639-1 code or an English name, any case, with or without a region (``fr-FR``), or one of the
model's own language keys (Nemotron's prompt keys, ``en-US``) as it is. A language the model does not know, or a
value that is no language at all, means "detect", on every route and on the command line, as the reference
servers Voxt was written against do; only a model that must have one (``refuses_unknown_language``: the language
picks Nemotron's prompt) refuses it, everywhere alike. No language at all means the model's configured default
(``default_language``), else "detect"; a model that detects none (``requires_language``) refuses the request,
naming the field (``missing_required_parameter``), before any model work."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, TypeVar

from omnid.echo import ECHO_CHARS, shown
from omnid.engine.interface import Capabilities
from omnid.engine.languages import language_code

# A language tag or name is a few characters (BCP 47 tags rarely pass 35); a longer value is refused, not detected.
MAX_LANGUAGE_CHARS = 64
# Subtitles need segment times fit to show text by; verbose_json carries whatever segments the engine has.
TIMED_FORMATS = ("srt", "vtt")


class RuleError(ValueError):
    """A value a request may not have. ``param`` names it as the caller's wire does; ``code`` is the HTTP error
    code: ``invalid_value`` (malformed, or out of its range), ``too_long``, or ``unsupported_value`` (well formed,
    but this model cannot do it)."""

    def __init__(self, param: str, message: str, code: str = "invalid_value"):
        super().__init__(message)
        self.param, self.message, self.code = param, message, code


N = TypeVar("N", int, float)


@dataclass(frozen=True)
class _Bounds(ABC, Generic[N]):
    """The values a numeric field takes, ends included."""

    low: N
    high: N

    def check(self, param: str, value: float, written: str | None = None) -> N:
        """A number as it came, compared as it is (JSON may carry NaN or infinity: both fail here; a 400-digit
        integer is simply out of range, where converting it to a float would overflow). ``written``: the value as
        the client wrote it, for the message."""
        if not self.low <= value <= self.high:
            ends = (str(end) if isinstance(end, int) else f"{end:g}" for end in (self.low, self.high))
            raise RuleError(param, f"{param} must be between {next(ends)} and {next(ends)}, got {written or shown(value)}")
        return self._typed(value)

    def parse(self, param: str, raw: str | None) -> N | None:
        """A value written as text (a form field, a command-line option); blank: None."""
        if raw is None or not raw.strip():
            return None
        return self.check(param, self._read(param, raw.strip(), shown(raw)), shown(raw))

    @abstractmethod
    def _typed(self, value: float) -> N:
        """The value as its field's type."""

    @abstractmethod
    def _read(self, param: str, text: str, written: str) -> N:
        """The text as a number of its field's type, or RuleError naming ``param``."""


class Range(_Bounds[float]):
    """Any finite number between the ends."""

    def _typed(self, value: float) -> float:
        return float(value)

    def _read(self, param: str, text: str, written: str) -> float:
        if len(text) > ECHO_CHARS:
            raise RuleError(param, f"{param} must be a number of at most {ECHO_CHARS} characters, got {written}")
        try:
            value = float(text)
        except ValueError:
            raise RuleError(param, f"{param} must be a number, got {written}") from None
        if not math.isfinite(value):
            raise RuleError(param, f"{param} must be a finite number, got {written}")
        return value


class Count(_Bounds[int]):
    """A whole number between the ends."""

    def _typed(self, value: float) -> int:
        return int(value)

    def _read(self, param: str, text: str, written: str) -> int:
        try:
            if len(text) > 20:  # past any bound: no need to parse a 400-digit number to refuse it
                raise ValueError
            return int(text)
        except ValueError:
            if text.lstrip("+-").isdigit():  # out of range, whatever its digits
                return self.low - 1 if text.startswith("-") else self.high + 1
            raise RuleError(param, f"{param} must be an integer, got {written}") from None


# --- ranges ----------------------------------------------------------------------------------------------------

TEMPERATURE = Range(0.0, 1.0)
# Any budget the reference servers take (Voxt asks 1024 of every model; a 32-bit count), held to what the model can
# produce; 0 or none: the model's own.
MAX_NEW_TOKENS = Count(0, 2**31 - 1)
VAD_THRESHOLD = Range(0.0, 1.0)  # Silero's speech probability, on the VAD route and in server-VAD turn detection
SPEECH_MS = Count(0, 3_600_000)  # the VAD route's durations: an hour; longer means nothing for speech
TURN_MS = Count(0, 10_000)  # server-VAD turn detection's padding and silence


# --- what the model can do ---------------------------------------------------------------------------------------


def temperature(value: float | None, can: Capabilities, model: str, param: str = "temperature") -> float:
    """A temperature already in TEMPERATURE's range; above 0 only for a model that samples."""
    if value and not can.temperature:
        raise RuleError(param, f"model {model} decodes greedily only: temperature must be 0", "unsupported_value")
    return value or 0.0


def token_budget(requested: int | None, can: Capabilities) -> int | None:
    """A budget already in MAX_NEW_TOKENS's range, held to what the model can produce (None: its own)."""
    return min(requested, can.max_new_tokens) if requested else None


def prompt(value: str | None, can: Capabilities | None, model: str, max_chars: int, param: str = "prompt") -> str | None:
    """A prompt of at most ``max_chars`` characters, for a model that takes one (blank: none needed).
    ``can`` None: the model is not known yet (its capabilities are checked when it is)."""
    if value is not None and len(value) > max_chars:
        raise RuleError(param, f"{param} is {len(value)} characters long; at most {max_chars} are accepted", "too_long")
    if value and value.strip() and can is not None and not can.prompt:
        raise RuleError(param, f"model {model} takes no prompt", "unsupported_value")
    return value


TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off"})


def flag(param: str, raw: str | None) -> bool | None:
    """A switch written as text (a form field): ``1/true/yes/on`` or ``0/false/no/off``, any case; blank: None (the
    default)."""
    if raw is None or not raw.strip():
        return None
    value = raw.strip().lower()
    if value in TRUE or value in FALSE:
        return value in TRUE
    raise RuleError(param, f"{param} must be true or false (1/true/yes/on or 0/false/no/off), got {shown(raw)}")


def punctuation(value: bool | None, can: Capabilities, model: str, param: str = "punctuation") -> bool | None:
    """A punctuation switch, for a model that has one (None: the model's default, asked of any model)."""
    if value is not None and not can.punctuation:
        raise RuleError(param, f"model {model} has no punctuation switch", "unsupported_value")
    return value


def itn(value: bool | None, can: Capabilities, model: str, param: str = "use_itn") -> bool | None:
    """An inverse text normalisation switch, for a model that has one (None: the model's default)."""
    if value is not None and not can.itn:
        raise RuleError(param, f"model {model} has no inverse text normalisation switch", "unsupported_value")
    return value


def word_timestamps(can: Capabilities, model: str, param: str) -> None:
    if not can.word_timestamps:
        raise RuleError(param, f"model {model} gives no word timestamps", "unsupported_value")


def response_format(fmt: str, can: Capabilities, model: str, param: str = "response_format") -> None:
    """Subtitles from a model that gives segment times fit for them."""
    if fmt in TIMED_FORMATS and not can.timestamps:
        raise RuleError(param, f"model {model} gives no timestamps for {fmt}", "unsupported_value")


# --- languages --------------------------------------------------------------------------------------------------


def language_length(raw: str | None, param: str = "language") -> None:
    """A language value's length, checked before the model is known: a longer value is no language tag."""
    if raw is not None and len(raw) > MAX_LANGUAGE_CHARS:
        raise RuleError(param, f"{param} is {len(raw)} characters long; at most {MAX_LANGUAGE_CHARS} are accepted",
                        "too_long")


@dataclass(frozen=True)
class Language:
    code: str | None  # what the model decodes in: an ISO code or one of its language keys; None: detect
    instead: str | None = None  # why a language that was asked for is detected instead (the model does not know it)


def language(raw: str | None, can: Capabilities, model: str, param: str = "language") -> Language:
    """The language a request decodes in (see the module's docstring)."""
    language_length(raw, param)
    value = (raw or "").strip()
    if not value:
        if can.default_language is not None:
            return Language(can.default_language)
        if can.requires_language:
            raise RuleError(param, f"model {model} needs a language (it detects none): {param} must be one of "
                                   f"{', '.join(can.language_keys or can.languages)}", "missing_required_parameter")
        return Language(None)
    if value in can.language_keys:
        return Language(value)
    code = language_code(value)
    if code is not None and code in can.languages:
        return Language(code)
    if can.refuses_unknown_language:
        raise RuleError(param, f"model {model} does not transcribe {shown(value)}; it takes "
                               f"{', '.join(can.language_keys or can.languages)}", "unsupported_value")
    return Language(None, f"model {model} does not transcribe {shown(value)}; the language is detected instead")
