"""A NeMo model's SentencePiece vocabulary (Parakeet's): pieces by id, and text from ids as NeMo's BPE decoding
makes it.

A ``.nemo`` holds the SentencePiece model (``tokenizer.model``, a protobuf); mlx-community's folder holds only the
pieces (``joint.vocabulary`` in its config). Decoding needs nothing but the pieces and their kinds, so the model
file is read for those alone (its ``pieces`` field; the normaliser is for encoding, which omnid never does).

Text, as SentencePiece decodes pieces: ``▁`` becomes a space, a byte piece ``<0xNN>`` a byte (runs of them
decoded as UTF-8), the unknown piece `` ⁇ ``, control pieces nothing, and spaces at the very start are dropped.
Then NeMo removes one whitespace before each punctuation mark of the vocabulary (``supported_punctuation``: the
punctuation characters of its pieces that are not special or word-initial), as its RNN-T and CTC decoders do.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property

from omnid.engine.errors import CheckpointError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
SPACE = "\u2581"
UNKNOWN_TEXT = " \u2047 "
_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPECIAL = (re.compile(r"^\[.*\]$"), re.compile(r"^<.*>$"), re.compile(r"^##"), re.compile(f"^{SPACE}"),
            re.compile(r"^\s*$"))


@dataclass(frozen=True)
class Vocabulary:
    pieces: tuple[str, ...]
    kinds: tuple[int, ...]

    @classmethod
    def from_pieces(cls, pieces: list[str]) -> Vocabulary:
        """Pieces alone (mlx-community's ``joint.vocabulary``): their kinds as SentencePiece names them."""
        kinds = []
        for p in pieces:
            if p == "<unk>":
                kinds.append(UNKNOWN)
            elif _BYTE.match(p):
                kinds.append(BYTE)
            elif p in ("<s>", "</s>", "<pad>"):
                kinds.append(CONTROL)
            else:
                kinds.append(NORMAL)
        return cls(tuple(pieces), tuple(kinds))

    @classmethod
    def from_sentencepiece(cls, data: bytes, source: str) -> Vocabulary:
        """The pieces and kinds of a SentencePiece ``ModelProto`` (field 1, repeated ``SentencePiece``: its field 1
        the piece, 3 the kind)."""
        pieces, kinds = [], []
        try:
            for field, value in _fields(data):
                if field != 1:
                    continue
                assert isinstance(value, bytes)
                piece, kind = None, NORMAL
                for inner, v in _fields(value):
                    if inner == 1 and isinstance(v, bytes):
                        piece = v.decode("utf-8")
                    elif inner == 3 and isinstance(v, int):
                        kind = v
                if piece is None:
                    raise ValueError("a piece without its text")
                pieces.append(piece)
                kinds.append(kind)
        except (ValueError, UnicodeDecodeError, AssertionError) as exc:
            raise CheckpointError(f"{source}: not a SentencePiece model: {exc}") from exc
        if not pieces:
            raise CheckpointError(f"{source}: a SentencePiece model without pieces")
        return cls(tuple(pieces), tuple(kinds))

    def __len__(self) -> int:
        return len(self.pieces)

    @cached_property
    def punctuation(self) -> frozenset[str]:
        """NeMo's ``extract_punctuation_from_vocab``."""
        return frozenset(ch for p in self.pieces if not any(s.match(p) for s in _SPECIAL)
                         for ch in p if unicodedata.category(ch).startswith("P"))

    @cached_property
    def _before_punctuation(self) -> re.Pattern[str] | None:
        if not self.punctuation:
            return None
        return re.compile(r"(\s)(" + "|".join(re.escape(p) for p in sorted(self.punctuation)) + ")")

    def piece_text(self, ids: list[int]) -> str:
        """SentencePiece's decoding of ``ids``."""
        pieces = _PieceText(self)
        return pieces.feed(ids) + pieces.flush()

    def text(self, ids: list[int]) -> str:
        """NeMo's hypothesis text: the pieces' text with one space before each punctuation mark removed."""
        return self.punctuate(self.piece_text(ids))

    def punctuate(self, text: str) -> str:
        """NeMo's rule: the space before a punctuation mark removed."""
        pattern = self._before_punctuation
        return pattern.sub(r"\2", text) if pattern is not None else text


class _PieceText:
    """SentencePiece's decoding of ids fed in turn: byte pieces wait for the next piece that is not one (a
    character's bytes come together), and the spaces before the first character go (the dummy prefix)."""

    def __init__(self, vocabulary: Vocabulary):
        self.vocabulary = vocabulary
        self.pending = bytearray()
        self.started = False

    def feed(self, ids: list[int]) -> str:
        """The text these ids complete."""
        v, out = self.vocabulary, []
        for i in ids:
            kind = v.kinds[i]
            if kind == BYTE:
                match = _BYTE.match(v.pieces[i])
                assert match is not None
                self.pending.append(int(match.group(1), 16))
                continue
            out.append(self.flush())
            if kind in (CONTROL, UNUSED):
                continue
            piece = UNKNOWN_TEXT if kind == UNKNOWN else v.pieces[i].replace(SPACE, " ")
            if not self.started:
                piece = piece.lstrip(" ")
                self.started = bool(piece)
            out.append(piece)
        return "".join(out)

    def flush(self) -> str:
        """The waiting bytes' text (and the text has started)."""
        if not self.pending:
            return ""
        self.started = True
        text = self.pending.decode("utf-8", errors="replace")
        self.pending.clear()
        return text

    def waiting(self) -> str:
        """The waiting bytes' text, left waiting."""
        return self.pending.decode("utf-8", errors="replace")


class IncrementalText:
    """``Vocabulary.text`` of a sequence that only grows (a live stream's tokens), extended as ids come rather
    than decoded again from the start: the same text, at a cost per new id, not per id so far. The punctuation rule
    removes a space before a mark, so the text through the last character that is not a space never changes again
    and is kept done; only the spaces after it wait for what follows."""

    def __init__(self, vocabulary: Vocabulary):
        self.vocabulary = vocabulary
        self.pieces = _PieceText(vocabulary)
        self.done = ""  # final: the text of raw up to a character that is not a space
        self.tail = ""  # the raw text after it (a few characters)

    def extend(self, ids: list[int]) -> None:
        self.tail += self.pieces.feed(ids)
        cut = len(self.tail.rstrip())  # through the last character that is not a space: no mark can follow a space
        if cut:
            self.done += self.vocabulary.punctuate(self.tail[:cut])
            self.tail = self.tail[cut:]

    @property
    def text(self) -> str:
        return self.done + self.vocabulary.punctuate(self.tail + self.pieces.waiting())


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """A protobuf message's (field number, value) pairs: varints as ints, length-delimited fields as bytes; fixed
    32- and 64-bit fields are skipped (as 0)."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((field, value))
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ValueError("a field runs past the end")
            out.append((field, data[pos : pos + size]))
            pos += size
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            out.append((field, 0))
        else:
            raise ValueError(f"wire type {wire}")
    if pos != len(data):
        raise ValueError("a field runs past the end")
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a truncated number")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
