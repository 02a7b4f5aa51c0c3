"""How a Whisper engine decodes whatever the request: set from the configuration's [transcription] keys when the
engine is built (kind.py), as faster-whisper's transcribe() arguments are fixed per model in the reference server."""

from __future__ import annotations

from dataclasses import dataclass, field

from omnid.engine.whisper.decoding import DecodeOptions


@dataclass(frozen=True)
class WhisperOptions:
    # The fallback's step: a decode that looks failed is tried again this much hotter, up to 1.0 (0: no fallback).
    temperature_increment: float = 0.2
    # The previous window's text as a prompt for the next.
    condition_on_previous_text: bool = False
    # In "content" mode a short window gets this much trailing silence and at least this total length: with less,
    # Whisper rarely ends a decode and repeats itself (measured on the corpus's 1-2 s clips).
    content_padding_s: float = 2.0
    content_min_window_s: float = 10.0
    # Tokens a window may decode: base + rate x its seconds of audio (30 s -> 616, above Whisper's 448 limit).
    token_budget_base: int = 16
    tokens_per_second: float = 20.0
    # The fallback's and silence's thresholds, the first timestamp's limit, the sampling seed (a request sets the
    # language, the budget and the temperatures of each decode).
    decode: DecodeOptions = field(default_factory=DecodeOptions)

    def temperatures(self, temperature: float, fallback: bool = True) -> tuple[float, ...]:
        """The temperatures a decode starting at ``temperature`` may try, in order (one without ``fallback``)."""
        if not fallback or self.temperature_increment <= 0 or temperature >= 1.0:
            return (temperature,)
        steps = int(round((1.0 - temperature) / self.temperature_increment))
        return tuple(round(temperature + i * self.temperature_increment, 6) for i in range(steps + 1))
