"""Whisper's byte-level BPE tokenizer and its special tokens, on the ``tokenizers`` library.

Loads ``tokenizer.json`` or ``vocab.json`` + ``merges.txt`` (+ ``added_tokens.json``) from a checkpoint folder.
Special-token ids are looked up by name rather than assumed, because English-only and multilingual
vocabularies put them at different ids.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from omnid.engine.errors import CheckpointError
from omnid.engine.languages import LANGUAGES

# Symbols Whisper suppresses so that it does not caption sound effects; as openai/whisper defines them.
_NON_SPEECH_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
_MUSIC_SYMBOLS = set("♩♪♫♬♭♮♯")


def tokenizer_files(folder: Path) -> list[Path]:
    if (folder / "tokenizer.json").exists():
        return [folder / "tokenizer.json"]
    pair = [folder / "vocab.json", folder / "merges.txt"]
    if all(p.exists() for p in pair):
        added = folder / "added_tokens.json"
        return pair + ([added] if added.exists() else [])
    raise CheckpointError(f"{folder}: no tokenizer (expected tokenizer.json, or vocab.json and merges.txt)")


def _load(folder: Path) -> Tokenizer:
    files = tokenizer_files(folder)
    try:
        if files[0].name == "tokenizer.json":
            return Tokenizer.from_file(str(files[0]))
        tok = Tokenizer(models.BPE.from_file(str(files[0]), str(files[1])))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        if len(files) == 3:
            added = json.loads(files[2].read_text())
            for content, idx in sorted(added.items(), key=lambda kv: kv[1]):
                tok.add_special_tokens([content])
                if tok.token_to_id(content) != idx:
                    raise CheckpointError(f"{files[2]}: token {content} expected at id {idx}")
        return tok
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(f"{files[0]}: cannot load tokenizer: {exc}") from exc


class WhisperTokenizer:
    def __init__(self, tokenizer: Tokenizer, source: Path, multilingual: bool):
        self._tok = tokenizer
        self.source = source
        self.multilingual = multilingual
        self.eot = self._special(["<|endoftext|>"])
        self.sot = self._special(["<|startoftranscript|>"])
        self.translate = self._special(["<|translate|>"])
        self.transcribe = self._special(["<|transcribe|>"])
        self.sot_lm = self._special(["<|startoflm|>"])
        self.sot_prev = self._special(["<|startofprev|>"])
        self.no_speech = self._special(["<|nospeech|>", "<|nocaptions|>"])
        self.no_timestamps = self._special(["<|notimestamps|>"])
        # Timestamp tokens <|0.00|>..<|30.00|> follow <|notimestamps|>, whether or not the file lists them.
        self.timestamp_begin = self.no_timestamps + 1
        self.language_tokens: dict[str, int] = {
            code: tid for code in LANGUAGES if (tid := tokenizer.token_to_id(f"<|{code}|>")) is not None
        }

    @classmethod
    def from_folder(cls, folder: Path, multilingual: bool) -> "WhisperTokenizer":
        files = tokenizer_files(folder)
        return cls(_load(folder), files[0], multilingual)

    def _special(self, names: list[str]) -> int:
        for name in names:
            tid = self._tok.token_to_id(name)
            if tid is not None:
                return tid
        raise CheckpointError(f"{self.source}: special token {names[0]} is missing")

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, tokens: list[int]) -> str:
        """Text tokens only: specials and timestamps are dropped."""
        return self._tok.decode([t for t in tokens if t < self.eot], skip_special_tokens=False)

    def sot_sequence(self, language: str | None, task: str = "transcribe") -> list[int]:
        seq = [self.sot]
        # English-only checkpoints were trained on <|startoftranscript|> alone.
        if self.multilingual and language is not None:
            seq.append(self.language_tokens[language])
            seq.append(self.translate if task == "translate" else self.transcribe)
        return seq

    @cached_property
    def non_speech_tokens(self) -> tuple[int, ...]:
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in _NON_SPEECH_SYMBOLS + sorted(_MUSIC_SYMBOLS):
            for ids in (self.encode(symbol), self.encode(" " + symbol)):
                if len(ids) == 1 or (ids and symbol in _MUSIC_SYMBOLS):
                    result.add(ids[0])
        return tuple(sorted(result))
