"""The tokenizer from either file layout, and a multilingual checkpoint's language handling."""

from __future__ import annotations

import json
import shutil

import numpy as np

from omnid.engine.options import TranscribeOptions
from omnid.engine.whisper.engine import WhisperEngine
from omnid.engine.whisper.model import ModelDims
from omnid.engine.whisper.options import WhisperOptions
from omnid.engine.whisper.tokenizer import WhisperTokenizer
from tests.helpers import random_weights, write_mlx

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
