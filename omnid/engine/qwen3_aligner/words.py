"""The units Qwen3-ForcedAligner times, cut from a transcript as the official package (qwen-asr 0.0.6,
``Qwen3ForceAlignProcessor.encode_timestamp``) cuts them, each with where it lies in the transcript.

* Japanese: nagisa's words (nagisa 0.2.11, the package the official one pins; an optional dependency here);
* Korean: whitespace-separated words, each cut in two where soynlp's L-tokenizer cuts it, scored by the official
  word list (``korean_words.txt``);
* every other language, those the aligner was trained on and those it was not alike: whitespace-separated words,
  with every CJK ideograph a unit of its own.

Every unit keeps only letters, digits and apostrophes (``clean_token``); units left empty are dropped.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from omnid.engine.errors import EngineError

KOREAN_WORDS = Path(__file__).with_name("korean_words.txt")
_WORD = re.compile(r"\S+")  # str.split()'s words: re's \s is str.isspace, as split's separators


@dataclass(frozen=True)
class Unit:
    text: str  # the unit as the aligner sees it (cleaned)
    start: int  # its first and one past its last character in the transcript
    end: int


def units(text: str, language: str) -> list[Unit]:
    """The aligner's units of ``text`` in ``language`` (an English language name as Qwen3-ASR writes it)."""
    language = language.lower()
    if language == "japanese":
        return _japanese(text)
    if language == "korean":
        return _korean(text)
    return _spaced(text)


def _kept(ch: str) -> bool:
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0x20000 <= code <= 0x2A6DF
            or 0x2A700 <= code <= 0x2B73F or 0x2B740 <= code <= 0x2B81F or 0x2B820 <= code <= 0x2CEAF
            or 0xF900 <= code <= 0xFAFF)


def _cleaned(text: str, start: int, stop: int) -> list[int]:
    """Positions of the kept characters of text[start:stop]."""
    return [i for i in range(start, stop) if _kept(text[i])]


def _unit(text: str, positions: list[int]) -> Unit:
    return Unit("".join(text[i] for i in positions), positions[0], positions[-1] + 1)


def _spaced(text: str) -> list[Unit]:
    out: list[Unit] = []
    for word in _WORD.finditer(text):
        kept = _cleaned(text, word.start(), word.end())
        run: list[int] = []
        for i in kept:  # split_segment_with_chinese: each ideograph alone, the rest in runs
            if _is_cjk(text[i]):
                if run:
                    out.append(_unit(text, run))
                    run = []
                out.append(_unit(text, [i]))
            else:
                run.append(i)
        if run:
            out.append(_unit(text, run))
    return out


@lru_cache(maxsize=1)
def _korean_words() -> frozenset[str]:
    lines = KOREAN_WORDS.read_text(encoding="utf-8").splitlines()
    return frozenset(w for w in lines if w and not w.startswith("#"))


def _korean(text: str) -> list[Unit]:
    """soynlp's LTokenizer with the official scores (1 for a listed word, 0 otherwise): a word of three or more
    characters splits after its longest listed prefix of two or more (the highest score, then the longest left
    part), and stays whole when none is listed."""
    scored = _korean_words()
    out: list[Unit] = []
    for word in _WORD.finditer(text):
        a, b = word.start(), word.end()
        cut = b
        if b - a > 2:
            cut = next((a + e for e in range(b - a, 1, -1) if text[a : a + e] in scored), b)
        for start, stop in ((a, cut), (cut, b)):
            kept = _cleaned(text, start, stop)
            if kept:
                out.append(_unit(text, kept))
    return out


def _japanese(text: str) -> list[Unit]:
    try:
        import nagisa
    except ImportError:
        raise EngineError("word times for Japanese need nagisa, the official aligner's word splitter: "
                          "pip install nagisa==0.2.11") from None
    out: list[Unit] = []
    cursor = 0
    for word in nagisa.tagging(text).words:
        found = text.find(word, cursor)
        start = found if found >= 0 else cursor
        kept = _cleaned(text, start, start + len(word)) if found >= 0 else []
        cleaned = "".join(ch for ch in word if _kept(ch))
        if cleaned:
            # nagisa gives substrings in order; a word it rewrote keeps its cleaned text at the cursor
            out.append(Unit(cleaned, kept[0], kept[-1] + 1) if kept else Unit(cleaned, start, start))
        if found >= 0:
            cursor = found + len(word)
    return out
