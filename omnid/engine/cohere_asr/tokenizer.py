"""Cohere Transcribe's vocabulary: a SentencePiece BPE of 16384 pieces (any size the checkpoint has), ``<unk>`` 0,
then 254 special pieces (control tokens, ``<|en|>``-style language tokens, speaker and split tokens), byte pieces,
then merges.

Text is what the official processor's ``decode`` gives: transformers loads ``tokenizer.json`` into a ``tokenizers``
model (``cohere_asr`` is one of its models with an incorrect hub tokenizer class) and decodes the prompt and the
generated ids with ``skip_special_tokens=True``. Its decoder replaces ``▁`` with a space, turns runs of byte pieces
into UTF-8 (a run that is no valid UTF-8 into one U+FFFD per byte), joins the pieces and strips one leading space.
The prompt's first token is the plain ``▁`` piece, which is not special: its space survives to eat the strip, so the
official text of a transcription starts with a space (``" Yesterday it was..."``). Here the folder's
``tokenizer.json`` is decoded by the ``tokenizers`` package itself; a folder with only ``tokenizer.model`` (a
converted folder may carry just it) is decoded by the same rules from its pieces (engine/nemo/tokenizer.py reads
them), special pieces (user-defined, control and ``<unk>``) skipped as the official tokenizer's special tokens are.

The prompt's tokens are looked up by name, never by number.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omnid.engine.cohere_asr.options import LANGUAGES
from omnid.engine.errors import CheckpointError
from omnid.engine.nemo.tokenizer import BYTE, NORMAL, SPACE, Vocabulary

# LANGUAGES: the 14 of the official processor (processing_cohere_asr.py): anything else is refused, even a language
# whose token the vocabulary has (``<|sv|>``); a language is always given, never detected.
# Languages whose long-audio chunk texts join without a space (the official processor's rule, by the language asked).
UNSPACED = ("ja", "zh")
EOS_PIECE = "<|endoftext|>"


def prompt_pieces(language: str, punctuation: bool = True) -> tuple[str, ...]:
    """The official decoder prompt: ``▁``, context and transcript starts, no emotion, the language twice,
    punctuation on or off, no inverse text normalisation, no timestamps, no diarization."""
    return (SPACE, "<|startofcontext|>", "<|startoftranscript|>", "<|emo:undefined|>", f"<|{language}|>",
            f"<|{language}|>", "<|pnc|>" if punctuation else "<|nopnc|>", "<|noitn|>", "<|notimestamp|>",
            "<|nodiarize|>")


class CohereTokenizer:
    """Ids by name and the official text of ids, from ``tokenizer.json`` (preferred) or ``tokenizer.model``."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        json_path, model_path = folder / "tokenizer.json", folder / "tokenizer.model"
        self._fast = None
        self._vocabulary: Vocabulary | None = None
        if json_path.is_file():
            from tokenizers import Tokenizer

            try:
                self._fast = Tokenizer.from_file(str(json_path))
            except Exception as exc:  # noqa: BLE001  (the Rust parser raises its own Exception type)
                raise CheckpointError(f"{json_path}: not a tokenizers model: {exc}") from exc
            self.path = json_path
            self.size = self._fast.get_vocab_size(with_added_tokens=True)
        elif model_path.is_file():
            try:
                data = model_path.read_bytes()
            except OSError as exc:
                raise CheckpointError(f"{model_path}: cannot read: {exc.strerror or exc}") from exc
            self._vocabulary = Vocabulary.from_sentencepiece(data, str(model_path))
            self._ids = {p: i for i, p in enumerate(self._vocabulary.pieces)}
            self.path = model_path
            self.size = len(self._vocabulary)
        else:
            raise CheckpointError(f"{folder}: no tokenizer (tokenizer.json or tokenizer.model)")

    def id(self, piece: str) -> int | None:
        if self._fast is not None:
            return self._fast.token_to_id(piece)
        return self._ids.get(piece)

    def require(self, piece: str) -> int:
        found = self.id(piece)
        if found is None:
            raise CheckpointError(f"{self.path}: has no token {piece}")
        return found

    def languages(self) -> tuple[str, ...]:
        """The official languages whose token this vocabulary has."""
        return tuple(code for code in LANGUAGES if self.id(f"<|{code}|>") is not None)

    def prompt(self, language: str, punctuation: bool = True) -> list[int]:
        return [self.require(p) for p in prompt_pieces(language, punctuation)]

    def decode(self, ids: Sequence[int]) -> str:
        """The official text of ids (the prompt's included): specials skipped, one leading space stripped."""
        if self._fast is not None:
            return self._fast.decode(list(ids), skip_special_tokens=True)
        assert self._vocabulary is not None
        return piece_text(self._vocabulary, ids)


def piece_text(vocabulary: Vocabulary, ids: Sequence[int]) -> str:
    """tokenizers' decoder of a SentencePiece BPE (Replace ``▁`` by a space, ByteFallback, Fuse, Strip one leading
    space) over the ids that are not special: normal pieces and bytes."""
    out: list[str] = []
    run = bytearray()

    def flush() -> None:
        if run:
            try:
                out.append(run.decode("utf-8"))
            except UnicodeDecodeError:
                out.append("\ufffd" * len(run))
            run.clear()

    for i in ids:
        kind = vocabulary.kinds[i]
        if kind == BYTE:
            run.append(int(vocabulary.pieces[i][3:5], 16))
            continue
        if kind != NORMAL:
            continue
        flush()
        out.append(vocabulary.pieces[i].replace(SPACE, " "))
    flush()
    text = "".join(out)
    return text[1:] if text.startswith(" ") else text
