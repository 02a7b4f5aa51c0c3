"""Joining pieces of transcript text: a space between two pieces only where both neighbouring characters belong to
scripts written with spaces (no space next to Chinese, Japanese, Thai, ...). Realtime sessions join their segments
with it, and Qwen3-ASR its long-audio chunks."""

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
