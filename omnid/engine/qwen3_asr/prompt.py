"""Qwen3-ASR's chat prompt and the parsing of its answer.

The prompt is the official one, with the system turn always present (the request's ``prompt`` is its text: context
that biases names and words) and, when a language is forced, ``language {Name}<asr_text>`` already written after the
assistant header. The answer is ``language {Name}<asr_text>{text}`` (or only the text when forced);
``language None`` means no speech, so empty text.
"""

from __future__ import annotations

from dataclasses import dataclass

from omnid.engine.qwen3.tokenizer import QwenTokenizer

# The languages Qwen3-ASR names, by ISO code (the names are what the model writes and reads).
NAMES: dict[str, str] = {
    "zh": "Chinese", "en": "English", "yue": "Cantonese", "ar": "Arabic", "de": "German", "fr": "French",
    "es": "Spanish", "pt": "Portuguese", "id": "Indonesian", "it": "Italian", "ko": "Korean", "ru": "Russian",
    "th": "Thai", "vi": "Vietnamese", "ja": "Japanese", "tr": "Turkish", "hi": "Hindi", "ms": "Malay",
    "nl": "Dutch", "sv": "Swedish", "da": "Danish", "fi": "Finnish", "pl": "Polish", "cs": "Czech",
    "tl": "Filipino", "fa": "Persian", "el": "Greek", "ro": "Romanian", "hu": "Hungarian", "mk": "Macedonian",
}
CODES = {name: code for code, name in NAMES.items()}
TAG = "<asr_text>"


def header(language: str) -> str:
    """The forced start of an answer in ``language`` (an ISO code)."""
    return f"language {NAMES[language]}{TAG}"


def prompt_ids(tok: QwenTokenizer, context: str, n_audio: int, language: str | None = None,
               prefix: str = "") -> list[int]:
    """The official chat prompt, with ``n_audio`` audio slots, then (optionally) a forced language header and a
    forced prefix of the answer. The text parts are tokenized as the whole string would be: the pieces meet only
    at added tokens or at the newline that closes the assistant header, where the pre-tokenizer splits anyway."""
    i = tok.ids
    ids = [i.im_start, *tok.encode(f"system\n{context}"), i.im_end, *tok.encode("\n"), i.im_start,
           *tok.encode("user\n"), i.audio_start, *([i.audio_pad] * n_audio), i.audio_end, i.im_end,
           *tok.encode("\n"), i.im_start, *tok.encode("assistant\n")]
    answer = (header(language) if language else "") + prefix
    return ids + (tok.encode(answer) if answer else [])


@dataclass(frozen=True)
class Answer:
    language: str | None  # ISO code when the model named one it supports, else None
    text: str


def parse(raw: str, forced: str | None = None) -> Answer:
    """(language, text) of a decoded answer, as the official parse_asr_output, without its silent repetition
    fixing (the decoder's loop guard stops loops instead). ``forced``: the ISO code of a forced language, whose
    answer is only the text."""
    s = raw.strip()
    if forced:
        return Answer(forced, s)
    if TAG not in s:
        return Answer(None, s)
    meta, text = s.split(TAG, 1)
    if "language none" in meta.lower():
        return Answer(None, text.strip())
    language = None
    for line in meta.splitlines():
        line = line.strip()
        if line.lower().startswith("language "):
            name = line[len("language "):].strip()
            language = CODES.get(name[:1].upper() + name[1:].lower())
            break
    return Answer(language, text.strip())
