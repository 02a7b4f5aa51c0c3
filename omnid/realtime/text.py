"""Text rules of realtime sessions: joining final segment texts (wire.md 3a) and LocalAgreement, which turns
successive hypotheses of an open segment into append-only text (the OpenAI dialect's deltas)."""

from __future__ import annotations

import unicodedata

# Scripts written without spaces between words; a join never puts a space next to them.
_UNSPACED_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x2E80, 0x2FDF),  # CJK radicals
    (0x3000, 0x303F),  # CJK symbols and punctuation
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x31FF),  # Bopomofo, Katakana extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # Hangul syllables are spaced: excluded below
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF00, 0xFFEF),  # full-width and half-width forms
    (0x20000, 0x2FA1F),  # CJK extensions B-F, compatibility supplement
)


def is_unspaced(ch: str) -> bool:
    cp = ord(ch)
    if 0xAC00 <= cp <= 0xD7AF:  # Korean uses spaces between words
        return False
    if unicodedata.east_asian_width(ch) == "F":
        return True
    return any(lo <= cp <= hi for lo, hi in _UNSPACED_RANGES)


def join_segments(parts: list[str]) -> str:
    """Final segment texts joined with one space between two parts only when both neighbouring characters belong
    to spaced scripts."""
    out = ""
    for part in (p.strip() for p in parts):
        if not part:
            continue
        if out and not is_unspaced(out[-1]) and not is_unspaced(part[0]):
            out += " "
        out += part
    return out


class LocalAgreement:
    """Append-only text from revisions: a word is committed once two consecutive hypotheses agree on it and on
    everything before it. Constant in the number of revisions; reset per segment."""

    def __init__(self, hold_back: int = 0) -> None:
        # A hypothesis's last words may belong to a word still being spoken (or be the start of a sentence the model
    # has not yet punctuated): neither of the two hypotheses may commit them.
        self.hold_back = hold_back
        self.committed: list[str] = []
        self._previous: list[str] = []

    def update(self, hypothesis: str) -> str:
        """Feeds a new hypothesis; returns the newly committed text (possibly empty) to send as a delta."""
        words = hypothesis.split()
        agreed = 0
        h = self.hold_back
        for a, b in zip(self._previous[: max(0, len(self._previous) - h)], words[: max(0, len(words) - h)]):
            if a != b:
                break
            agreed += 1
        self._previous = words
        if agreed <= len(self.committed) or words[: len(self.committed)] != self.committed:
            return ""
        new = words[len(self.committed) : agreed]
        delta = (" " if self.committed else "") + " ".join(new)
        self.committed.extend(new)
        return delta

    def text(self) -> str:
        return " ".join(self.committed)
