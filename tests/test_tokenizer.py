"""The tokenizer from either file layout or, for a folder without one, from the rank files omnid ships, and a
multilingual checkpoint's language handling."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.options import TranscribeOptions
from omnid.engine.whisper import tokenizer as tokenizer_module
from omnid.engine.whisper.engine import WhisperEngine
from omnid.engine.whisper.kind import KIND
from omnid.engine.whisper.model import ModelDims
from omnid.engine.whisper.options import WhisperOptions
from omnid.engine.whisper.tokenizer import RANKS, WhisperTokenizer
from tests.helpers import ROOT, manifest, random_weights, reference, write_mlx

TEXT = " And so, my fellow Americans: ask not what your country can do for you — ¿qué? 東京"


def test_vocab_and_merges_give_the_same_tokens_as_tokenizer_json(tiny_folder, tmp_path):
    spec = json.loads((tiny_folder / "tokenizer.json").read_text())
    (tmp_path / "vocab.json").write_text(json.dumps(spec["model"]["vocab"]))
    merges = spec["model"]["merges"]
    lines = [m if isinstance(m, str) else " ".join(m) for m in merges]
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "\n".join(lines) + "\n")
    added = {t["content"]: t["id"] for t in spec["added_tokens"] if t["id"] > 50256}
    (tmp_path / "added_tokens.json").write_text(json.dumps(added))
    a = WhisperTokenizer.from_folder(tiny_folder, multilingual=False)
    b = WhisperTokenizer.from_folder(tmp_path, multilingual=False)
    assert a.encode(TEXT) == b.encode(TEXT)
    assert b.decode(b.encode(TEXT)) == TEXT
    for name in ("eot", "sot", "transcribe", "no_speech", "no_timestamps", "timestamp_begin"):
        assert getattr(a, name) == getattr(b, name)
    assert (a.eot, a.sot, a.no_timestamps, a.timestamp_begin) == (50256, 50257, 50362, 50363)
    assert a.decode([50363, *a.encode(" hi"), 50256, 50400]) == " hi"


def test_multilingual_checkpoint_detects_a_language_and_prompts_with_it(tiny_folder, tmp_path):
    dims = ModelDims(80, 24, 32, 4, 2, 51865, 64, 32, 4, 2)
    folder = write_mlx(tmp_path / "multi", dims, random_weights(dims))
    shutil.copy(tiny_folder / "tokenizer.json", folder)
    engine = WhisperEngine("random-multi", folder, options=WhisperOptions(content_padding_s=0, content_min_window_s=0))
    assert engine.dims.is_multilingual and "de" in engine.languages
    tok = engine.tokenizer
    assert tok.sot_sequence("de") == [tok.sot, tok.language_tokens["de"], tok.transcribe]
    audio = np.random.default_rng(0).normal(0, 0.1, 16000).astype(np.float32)
    # The random encoder accepts up to 48 frames (24 positions): a 0.4 s clip fits one content window.
    result = engine.transcribe(audio[:6400], TranscribeOptions(window="content", max_new_tokens=4, fallback=False))
    assert result.language in engine.languages


# --- folders without a tokenizer file (mlx-community's): openai-whisper's ranks, shipped with omnid ----------------

MLX_GOLDENS = ROOT / "tests" / "goldens" / "whisper_mlx_tiny"  # scripts/whisper_mlx_goldens.py


@pytest.mark.parametrize("n_vocab", [51864, 51865, 51866])
def test_shipped_ranks_give_mlx_whispers_ids(n_vocab):
    """Every id mlx-whisper 0.4.3's tokenizer gave (tokens.json), for each vocabulary size it tells apart."""
    want = json.loads((MLX_GOLDENS / "tokens.json").read_text())[str(n_vocab)]
    tok = WhisperTokenizer.from_ranks(RANKS[n_vocab])
    assert tok.source.name == want["encoding"]
    assert tok.timestamp_begin + 1501 == want["n_vocab"] == n_vocab
    assert {name: getattr(tok, name) for name in want["specials"]} == want["specials"]
    assert tok.language_tokens == want["languages"]
    assert len(tok.language_tokens) == (100 if n_vocab == 51866 else 99)
    assert list(tok.non_speech_tokens) == want["non_speech_tokens"]
    assert len(want["texts"]) > 20
    for case in want["texts"]:
        assert tok.encode(case["text"]) == case["ids"], case["text"]
        assert tok.decode(case["ids"]) == case["decoded"], case["text"]
    for case in want["ordinary"]:  # special tokens written in text stay text
        assert tok.encode(case["text"]) == case["ids"], case["text"]
    ts = tok.timestamp_begin
    # mlx-whisper's decode drops timestamps and keeps the other specials; omnid's keeps text tokens only.
    assert want["decode_with_timestamps"] == " hi there<|endoftext|>"
    assert tok.decode([ts, *tok.encode(" hi there"), tok.eot, ts + 50]) == " hi there"
    for key, seq in want.get("sot_sequences", {}).items():
        language, task = key.split("/")
        assert tok.sot_sequence(language, task) == seq, key
    assert tok.multilingual == (n_vocab >= 51865)


def test_gpt2_ranks_give_tiny_en_tokenizer_json_ids_on_the_corpus(tiny_folder):
    """The shipped GPT-2 ranks tokenize as faster-whisper's tiny.en tokenizer.json does, on every corpus text (each
    language's transcript and the references) and on the goldens' texts."""
    ranks = WhisperTokenizer.from_ranks(RANKS[51864])
    folder = WhisperTokenizer.from_folder(tiny_folder, multilingual=False)
    goldens = json.loads((MLX_GOLDENS / "tokens.json").read_text())["51864"]["texts"]
    texts = [d["text"] for d in manifest().values()] + list(reference().values()) + [g["text"] for g in goldens]
    texts = [p + t for t in texts for p in ("", " ")] + [TEXT]
    assert len(texts) > 200
    for text in texts:
        assert ranks.encode(text) == folder.encode(text), text
    for name in ("eot", "sot", "sot_prev", "no_speech", "no_timestamps", "timestamp_begin", "transcribe"):
        assert getattr(ranks, name) == getattr(folder, name)
    assert ranks.non_speech_tokens == folder.non_speech_tokens


def test_a_folder_with_a_tokenizer_file_keeps_it(tiny_folder, tmp_path):
    dims = ModelDims(80, 24, 32, 4, 2, 51864, 64, 32, 4, 2)
    folder = write_mlx(tmp_path / "with", dims, random_weights(dims))
    shutil.copy(tiny_folder / "tokenizer.json", folder)
    assert WhisperTokenizer.for_model(folder, 51864, folder / "config.json").source == folder / "tokenizer.json"
    assert KIND.layout(folder) == "mlx"
    (folder / "tokenizer.json").unlink()
    assert WhisperTokenizer.for_model(folder, 51864, folder / "config.json").source.name == "gpt2.tiktoken"


def test_a_tokenizer_less_folder_of_an_unknown_vocabulary_is_refused_naming_file_and_key(tmp_path):
    dims = ModelDims(80, 24, 16, 2, 1, 51870, 16, 16, 2, 1)
    folder = write_mlx(tmp_path / "odd", dims, random_weights(dims))
    message = rf"{folder / 'config.json'}: n_vocab 51870 matches no Whisper vocabulary"
    with pytest.raises(CheckpointError, match=message):
        WhisperEngine("odd", folder)
    with pytest.raises(CheckpointError, match=message):  # omnid doctor's layout line says why
        KIND.layout(folder)
    assert KIND.recognises(folder)  # still Whisper's: --model names the reason, not "no checkpoint"


def test_a_changed_rank_file_is_refused_naming_it(tmp_path, monkeypatch):
    changed = tmp_path / "gpt2.tiktoken"
    changed.write_bytes(RANKS[51864].path.read_bytes().replace(b"IQ== 0\n", b"Ig== 0\n", 1))
    monkeypatch.setattr(tokenizer_module, "ASSETS", tmp_path)
    with pytest.raises(CheckpointError, match=rf"{changed}: SHA-256 does not match"):
        WhisperTokenizer.from_ranks(RANKS[51864])


def test_the_rank_files_ship_with_their_licence():
    assets = RANKS[51864].path.parent
    assert {p.name for p in assets.iterdir()} >= {"gpt2.tiktoken", "multilingual.tiktoken", "LICENSE"}
    notice = (assets / "LICENSE").read_text()
    assert "MIT License" in notice and "Copyright (c) 2022 OpenAI" in notice
    for ranks in RANKS.values():
        assert ranks.sha256 in notice
