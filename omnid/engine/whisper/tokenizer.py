"""Whisper's byte-level BPE tokenizer and its special tokens.

A checkpoint folder's own tokenizer, ``tokenizer.json`` or ``vocab.json`` + ``merges.txt`` (+ ``added_tokens.json``),
is read with the ``tokenizers`` library. A folder without one (mlx-examples' ``convert.py`` writes none: every
mlx-community Whisper folder) is tokenized as mlx-whisper and openai-whisper tokenize it: their own rank files,
shipped in ``assets/`` (MIT, ``assets/LICENSE``), read with tiktoken, the GPT-2 ranks for an English-only model and
the multilingual ones for the others, chosen by the model's vocabulary size, with the special tokens they append.
Special-token ids are looked up by name rather than assumed, because English-only and multilingual vocabularies
put them at different ids.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from omnid.engine.errors import CheckpointError
from omnid.engine.languages import LANGUAGES

# Symbols Whisper suppresses so that it does not caption sound effects; as openai/whisper defines them.
_NON_SPEECH_SYMBOLS = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split()
)
_MUSIC_SYMBOLS = set("♩♪♫♬♭♮♯")


ASSETS = Path(__file__).parent / "assets"


@dataclass(frozen=True)
class Ranks:
    """One of openai-whisper's rank files and the special tokens appended after its ranks."""

    name: str  # assets/<name>.tiktoken
    sha256: str
    size: int  # its ranks: 0..size-1
    languages: int  # how many of LANGUAGES get a <|xx|> token

    @property
    def path(self) -> Path:
        return ASSETS / f"{self.name}.tiktoken"


_GPT2 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_MULTILINGUAL = "b34b360dbb493e781e479794586d661700670d65564001f23024971d1f2fa126"
# By n_vocab, as mlx-whisper and openai-whisper choose: English-only models (51864) tokenize with GPT-2's ranks,
# multilingual ones with the multilingual ranks, and large-v3's vocabulary (51866) has a 100th language (yue).
# Either way the vocabulary is the ranks, <|endoftext|>, <|startoftranscript|>, the languages, six task and
# control tokens and 1501 timestamps.
RANKS: dict[int, Ranks] = {
    51864: Ranks("gpt2", _GPT2, 50256, 99),
    51865: Ranks("multilingual", _MULTILINGUAL, 50257, 99),
    51866: Ranks("multilingual", _MULTILINGUAL, 50257, 100),
}
# openai-whisper's pre-tokenization pattern (GPT-2's).
_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def tokenizer_files(folder: Path) -> list[Path]:
    """The folder's own tokenizer files; none when it has no tokenizer (the shipped ranks then serve)."""
    if (folder / "tokenizer.json").exists():
        return [folder / "tokenizer.json"]
    pair = [folder / "vocab.json", folder / "merges.txt"]
    if all(p.exists() for p in pair):
        added = folder / "added_tokens.json"
        return pair + ([added] if added.exists() else [])
    return []


def shipped_ranks(n_vocab: int, config: Path, key: str = "n_vocab") -> Ranks:
    """The rank file a tokenizer-less folder's model uses, by its vocabulary size (``config``'s ``key``, named in
    errors)."""
    ranks = RANKS.get(n_vocab)
    if ranks is None:
        known = ", ".join(f"{n} ({r.name}, {r.languages} languages)" for n, r in RANKS.items())
        raise CheckpointError(
            f"{config}: {key} {n_vocab} matches no Whisper vocabulary omnid ships ({known}) and the folder has no "
            "tokenizer (expected tokenizer.json, or vocab.json and merges.txt)"
        )
    return ranks


class _Backend(Protocol):
    def token_to_id(self, token: str) -> int | None: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


class _HfBackend:
    """A folder's own tokenizer, on the ``tokenizers`` library."""

    def __init__(self, tokenizer: Tokenizer):
        self._tok = tokenizer

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


class _TiktokenBackend:
    """openai-whisper's encoding: a shipped rank file and the specials after it, exactly as its get_encoding builds
    them. Text is encoded as text: a ``<|...|>`` string in a prompt stays characters, never a control token."""

    def __init__(self, ranks: Ranks):
        import tiktoken

        data = ranks.path.read_bytes()
        if hashlib.sha256(data).hexdigest() != ranks.sha256:
            raise CheckpointError(f"{ranks.path}: SHA-256 does not match the rank file omnid shipped")
        mergeable = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in data.splitlines() if line)}
        if len(mergeable) != ranks.size:
            raise CheckpointError(f"{ranks.path}: {len(mergeable)} ranks, expected {ranks.size}")
        names = [
            "<|endoftext|>",
            "<|startoftranscript|>",
            *[f"<|{code}|>" for code in list(LANGUAGES)[: ranks.languages]],
            "<|translate|>",
            "<|transcribe|>",
            "<|startoflm|>",
            "<|startofprev|>",
            "<|nospeech|>",
            "<|notimestamps|>",
            *[f"<|{i * 0.02:.2f}|>" for i in range(1501)],
        ]
        self._specials = {name: ranks.size + i for i, name in enumerate(names)}
        self._enc = tiktoken.Encoding(
            name=ranks.path.name,
            explicit_n_vocab=ranks.size + len(names),
            pat_str=_PATTERN,
            mergeable_ranks=mergeable,
            special_tokens=self._specials,
        )

    def token_to_id(self, token: str) -> int | None:
        return self._specials.get(token)

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)


def _load(folder: Path) -> Tokenizer:
    files = tokenizer_files(folder)
    if not files:
        raise CheckpointError(f"{folder}: no tokenizer (expected tokenizer.json, or vocab.json and merges.txt)")
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
    def __init__(self, tokenizer: _Backend, source: Path, multilingual: bool):
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
        """The folder's own tokenizer (an error when it has none)."""
        return cls(_HfBackend(_load(folder)), tokenizer_files(folder)[0], multilingual)

    @classmethod
    def from_ranks(cls, ranks: Ranks) -> "WhisperTokenizer":
        """openai-whisper's tokenizer on a shipped rank file."""
        return cls(_TiktokenBackend(ranks), ranks.path, multilingual=ranks.name == "multilingual")

    @classmethod
    def for_model(cls, folder: Path, n_vocab: int, config: Path, key: str = "n_vocab") -> "WhisperTokenizer":
        """The folder's own tokenizer, or else the shipped ranks that the model's vocabulary size names."""
        if tokenizer_files(folder):
            return cls.from_folder(folder, multilingual=n_vocab >= 51865)
        return cls.from_ranks(shipped_ranks(n_vocab, config, key))

    def _special(self, names: list[str]) -> int:
        for name in names:
            tid = self._tok.token_to_id(name)
            if tid is not None:
                return tid
        raise CheckpointError(f"{self.source}: special token {names[0]} is missing")

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text)

    def decode(self, tokens: list[int]) -> str:
        """Text tokens only: specials and timestamps are dropped."""
        return self._tok.decode([t for t in tokens if t < self.eot])

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
