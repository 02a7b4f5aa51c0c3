"""Transcript scoring: both texts NFKC-normalised and lowercased, then word error rate for English (punctuation
dropped) and character/mixed error rate over CJK characters and Latin runs for Chinese and mixed text."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_NOT_EN = re.compile(r"[^a-z0-9' ]")
# Manifest language of Chinese-English code-switched clips: scored with the Chinese tokenisation, as MER.
MIXED = ("mixed", "zh-en")
_CJK_OR_WORD = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]|[a-z0-9']+")


def tokens(text: str, language: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).lower()
    if language == "zh" or language in MIXED:
        return _CJK_OR_WORD.findall(text)
    words = (w.strip("'") for w in _NOT_EN.sub(" ", text).split())
    return [w for w in words if w]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


@dataclass
class ErrorRate:
    errors: int = 0
    words: int = 0
    clips: int = 0

    def add(self, ref: str, hyp: str, language: str) -> int:
        r, h = tokens(ref, language), tokens(hyp, language)
        errors = edit_distance(r, h)
        self.errors += errors
        self.words += len(r)
        self.clips += 1
        return errors

    @property
    def percent(self) -> float:
        return 100.0 * self.errors / self.words if self.words else 0.0


def metric_name(language: str) -> str:
    """English (and every other spaced language) WER, Chinese CER, mixed Chinese-English MER."""
    return "CER" if language == "zh" else "MER" if language in MIXED else "WER"
