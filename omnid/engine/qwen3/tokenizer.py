"""Qwen2's byte-level BPE, assembled with Hugging Face `tokenizers` from a checkpoint's own files: ``vocab.json`` +
``merges.txt`` (Qwen3-ASR ships no tokenizer.json) and the added tokens of ``tokenizer_config.json``.

The added tokens keep the ids the file gives them. `tokenizers` numbers added tokens consecutively, so any id the
file leaves out is filled with a placeholder (otherwise every later token would silently shift by one).
``<asr_text>`` is an added token that is *not* special: it survives decoding with specials skipped, and that is how
the output's language header is found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from omnid.engine.errors import CheckpointError

# Qwen2's pre-tokenizer split (as in its tokenizer.json).
SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")
FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")


def tokenizer_files(folder: Path) -> list[Path]:
    return [Path(folder) / name for name in FILES]


@dataclass(frozen=True)
class SpecialIds:
    endoftext: int
    im_start: int
    im_end: int
    audio_start: int
    audio_end: int
    audio_pad: int
    asr_text: int


class ChatTokenizer:
    """A Qwen chat model's tokenizer (text in, ids out and back), its chat tokens checked: Fun-ASR-Nano's Qwen3."""

    def __init__(self, tokenizer: Tokenizer, added: dict[int, str], size: int):
        self._tok = tokenizer
        self.added = added
        self.size = size  # ids at or past this have no token (the embedding may have more rows)
        self.by_content = {content: i for i, content in added.items()}
        for needed in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
            self.special(needed)

    def special(self, content: str) -> int:
        try:
            return self.by_content[content]
        except KeyError:
            raise CheckpointError(f"tokenizer_config.json: added token {content!r} missing") from None

    @classmethod
    def from_folder(cls, folder: Path) -> ChatTokenizer:
        return cls(*assemble(folder))

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self._tok.decode([i for i in ids if 0 <= i < self.size], skip_special_tokens=skip_special)


class QwenTokenizer(ChatTokenizer):
    """Qwen3-ASR's: the chat tokens and its audio and ``<asr_text>`` tokens."""

    def __init__(self, tokenizer: Tokenizer, added: dict[int, str], size: int):
        super().__init__(tokenizer, added, size)
        s = self.special
        self.ids = SpecialIds(
            endoftext=s("<|endoftext|>"), im_start=s("<|im_start|>"), im_end=s("<|im_end|>"),
            audio_start=s("<|audio_start|>"), audio_end=s("<|audio_end|>"), audio_pad=s("<|audio_pad|>"),
            asr_text=s("<asr_text>"),
        )

    @classmethod
    def from_folder(cls, folder: Path) -> QwenTokenizer:
        return cls(*assemble(folder))


def added_in_tokenizer_json(folder: Path) -> dict[str, dict[str, Any]]:
    """The added tokens of a folder's tokenizer.json, as tokenizer_config.json's added_tokens_decoder lists them
    (transformers 5 saves them there only); none without the file."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text(encoding="utf-8")).get("added_tokens") or []
        return {str(int(e["id"])): {"content": str(e["content"]), "special": bool(e.get("special", True))}
                for e in entries}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CheckpointError(f"{path}: unreadable added tokens ({exc})") from exc


def assemble(folder: Path) -> tuple[Tokenizer, dict[int, str], int]:
    """The byte-level BPE of a folder's vocab.json, merges.txt and tokenizer_config.json's added tokens: the
    tokenizer, the added tokens by id, and the first id past them."""
    vocab_path, merges_path, config_path = tokenizer_files(folder)
    try:
        vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
        lines = merges_path.read_text(encoding="utf-8").splitlines()
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CheckpointError(f"{exc.filename}: missing (a Qwen tokenizer is vocab.json, merges.txt and "
                              "tokenizer_config.json)") from None
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{folder}: unreadable tokenizer file ({exc})") from exc
    pairs = [line.split(" ") for line in lines if line and not line.startswith("#version")]
    if any(len(p) != 2 for p in pairs):
        raise CheckpointError(f"{merges_path}: a merge line is not two tokens")
    merges = [(a, b) for a, b in pairs]
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False)
    tok = Tokenizer(bpe)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    decoder = config.get("added_tokens_decoder") or added_in_tokenizer_json(folder)
    added = {int(i): entry["content"] for i, entry in decoder.items()}
    special = {int(i) for i, entry in decoder.items() if entry.get("special", True)}
    if not added or min(added) < len(vocab):
        raise CheckpointError(f"{config_path}: added_tokens_decoder must number its tokens after vocab.json's "
                              f"{len(vocab)}")
    for i in range(len(vocab), max(added) + 1):
        content = added.get(i, f"<|omnid_unused_{i}|>")
        token = AddedToken(content, special=i in special or i not in added, normalized=False)
        if token.special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        if tok.token_to_id(content) != i:
            raise CheckpointError(f"{config_path}: added token {content!r} did not get id {i}")
    return tok, added, max(added) + 1
