"""Parakeet against NVIDIA NeMo 3.0.0 (scripts/parakeet_goldens.py): three tiny random checkpoints built with NeMo's
own classes (TDT, RNN-T, hybrid TDT-CTC), loaded from their .nemo files through the production loader, on four real
clips (one over 20 s): the log-mel, the encoder output, and the greedy tokens with their frames, durations and
texts exactly as NeMo's transcribe() gives them."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo import timestamps
from omnid.engine.parakeet.checkpoint import load
from omnid.engine.parakeet.model import Parakeet
from tests.helpers import nemo_goldens, nemo_with, nemo_with_value

GOLDENS = Path(__file__).parent / "goldens" / "parakeet_tiny"
KINDS = ("tdt", "rnnt", "hybrid")


meta, arrays, audio = nemo_goldens(GOLDENS)


@cache
def model(kind: str) -> Parakeet:
    return Parakeet(load(GOLDENS / f"{kind}.nemo"))


CLIPS = ("short", "ljspeech", "librispeech", "long")


def test_the_long_clip_is_over_20_seconds() -> None:
    assert len(audio("long")) > 20 * 16000


@pytest.mark.parametrize("clip", CLIPS)
def test_log_mel_is_nemos_per_feature_normalised_one(clip: str) -> None:
    mel = model("tdt").features(audio(clip))
    want = arrays()[f"mel/{clip}"]
    assert mel.shape == want.shape
    assert np.abs(mel - want).max() <= 1e-3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("clip", CLIPS)
def test_the_bias_free_encoder_is_nemos(kind: str, clip: str) -> None:
    """On NeMo's own log-mel: the numpy layers (one sequence on the CPU) and MLX's (Metal's; here a batch of two)."""
    mel, want = arrays()[f"mel/{clip}"], arrays()[f"encoder/{kind}/{clip}"]
    p = model(kind)
    assert p.dims.conformer.bias is False and p.dims.conformer.xscaling is False
    got = p.encode(mel)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-4
    x = p.encoder.subsampling(mx.array(np.stack([mel, mel])))
    both = np.array(p.encoder.encode(x))
    assert np.abs(both - want[None]).max() <= 1e-4


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("clip", CLIPS)
def test_greedy_tokens_frames_durations_and_text_are_nemos(kind: str, clip: str) -> None:
    """From the audio: NeMo's label-looping greedy_batch (TDT durations, a zero-duration blank taken as one, labels
    emitted on one frame up to max_symbols), the hybrid decoding with TDT by default."""
    p, want = model(kind), meta()["models"][kind][clip]
    tokens = p.decode(p.encode(p.features(audio(clip))))
    assert [t.id for t in tokens] == want["ids"]
    assert [t.frame for t in tokens] == want["frames"]
    assert [t.duration for t in tokens] == (want["durations"] or [None] * len(tokens))
    assert p.vocabulary.text([t.id for t in tokens]) == want["text"]


def test_the_goldens_exercise_what_they_test() -> None:
    """Every duration, zero-duration runs and max_symbols runs, words and sentences: the rules are not idle."""
    tdt = [r for r in meta()["models"]["tdt"].values()]
    assert {d for r in tdt for d in r["durations"]} == {0, 1, 2, 3, 4}
    rnnt = meta()["models"]["rnnt"]["long"]["frames"]
    assert max(rnnt.count(f) for f in set(rnnt)) == 10  # a frame that hit max_symbols
    assert max(len(r["word"]) for r in tdt) > 10 and max(len(r["segment"]) for r in tdt) > 1


@pytest.mark.parametrize("clip", CLIPS)
def test_the_hybrids_ctc_head_is_nemos(clip: str) -> None:
    p, want = model("hybrid"), meta()["models"]["hybrid"][clip]["ctc"]
    encoded = p.encode(p.features(audio(clip)))
    tokens = p.decode(encoded, ctc=True)
    assert [t.id for t in tokens] == want["ids"]
    assert p.vocabulary.text([t.id for t in tokens]) == want["text"]
    assert p.ctc is not None
    best = p.ctc.frame_labels(encoded)  # NeMo's timestep: every frame whose best class is not the blank
    assert [i for i, b in enumerate(best) if b != p.dims.vocabulary] == want["frames"]


def test_a_checkpoint_without_ctc_refuses_a_ctc_decode() -> None:
    with pytest.raises(ValueError, match="no CTC head"):
        model("tdt").decode(np.zeros((3, 64), np.float32), ctc=True)


def _with(tmp_path: Path, *path: str, value: object) -> Path:
    """The TDT checkpoint with one config value changed (``path``: its keys, outermost first)."""
    return nemo_with_value(GOLDENS / "tdt.nemo", tmp_path, *path, value=value)


def test_a_config_that_disagrees_with_the_weights_fails_at_load_naming_the_tensor(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"edited\.nemo: missing tensor encoder\.layers\.2\."):
        load(_with(tmp_path, "encoder", "n_layers", value=3))


def test_weights_of_another_model_fail_naming_the_extra_tensor(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"unexpected tensor encoder\.layers\.1\."):
        load(_with(tmp_path, "encoder", "n_layers", value=1))


def test_a_tokenizer_that_is_not_sentencepiece_fails_at_load(tmp_path: Path) -> None:
    bad = nemo_with(GOLDENS / "tdt.nemo", tmp_path,
                    member_edit=lambda name, data: b"\xff" * 40 if name.endswith("tokenizer.model") else data)
    with pytest.raises(CheckpointError, match="tokenizer.model: not a SentencePiece model"):
        load(bad)


def test_a_tokenizer_whose_size_disagrees_with_the_joint_fails_at_load(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="64 pieces; the joint's vocabulary has 63"):
        load(_with(tmp_path, "decoder", "vocab_size", value=63))


def test_a_streaming_encoder_is_refused_naming_its_context(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="att_context_size"):
        load(_with(tmp_path, "encoder", "att_context_size", value=[70, 13]))


def test_a_config_without_a_symbol_limit_is_refused(tmp_path: Path) -> None:
    """Without max_symbols a transducer may emit on one frame for ever: refused at load, never a hung request."""
    with pytest.raises(CheckpointError, match="max_symbols must be a positive integer"):
        load(_with(tmp_path, "decoding", "greedy", "max_symbols", value=None))


def _char_text(entry: dict) -> str:
    return entry["char"][0] if isinstance(entry["char"], list) else entry["char"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("clip", CLIPS)
def test_token_word_and_segment_times_are_nemos(kind: str, clip: str) -> None:
    """transcribe(timestamps=True): token spans (TDT: their durations, punctuation at the previous token's end),
    words from word-start pieces with punctuation joined to them, segments ended by . ? !, and the seconds."""
    p, want = model(kind), meta()["models"][kind][clip]
    tokens = p.decode(arrays()[f"encoder/{kind}/{clip}"])
    chars = timestamps.token_spans(tokens, p.vocabulary)
    assert [(c.text, c.start, c.end) for c in chars] == [(_char_text(c), c["start_offset"], c["end_offset"])
                                                          for c in want["char"]]
    words = timestamps.words(chars, p.vocabulary)
    assert [(w.text, w.start_offset, w.end_offset) for w in words] == [
        (w["word"], w["start_offset"], w["end_offset"]) for w in want["word"]]
    assert [w.seconds(0.01, 8) for w in words] == [(w["start"], w["end"]) for w in want["word"]]
    segments = timestamps.segments(words)
    assert [(s.text, s.start_offset, s.end_offset, s.seconds(0.01, 8)) for s in segments] == [
        (s["segment"], s["start_offset"], s["end_offset"], (s["start"], s["end"])) for s in want["segment"]]


def test_the_times_exercise_their_rules() -> None:
    """Punctuation after a TDT token takes its end as both its times; words run past the audio's end unclipped."""
    tdt = meta()["models"]["tdt"]
    moved = [c for r in tdt.values() for c in r["char"] if _char_text(c) in (".", ",") and c["start_offset"] == c["end_offset"]]
    assert moved
    frames = {clip: len(arrays()[f"encoder/tdt/{clip}"]) for clip in CLIPS}
    assert any(r["word"] and r["word"][-1]["end_offset"] > frames[clip] for clip, r in tdt.items())


def test_long_audio_is_cut_at_quiet_points_each_chunk_decoded_alone_times_on_the_files_timeline() -> None:
    """At an 8 s chunk length: the long clip then 9 s under -60 dBFS is cut where the reference's rule cuts it
    (the quietest 100 ms before each boundary), the silent last chunk is not decoded, each other chunk gives NeMo's
    own transcription of it, and their words and segments sit on the file's timeline."""
    from omnid.engine.parakeet.engine import ParakeetEngine, ParakeetOptions

    golden = meta()["chunked"]
    quiet = np.random.default_rng(3).uniform(-5e-4, 5e-4, golden["quiet_s"] * 16000).astype(np.float32)
    clip = np.concatenate([audio(golden["clip"]), quiet])
    engine = ParakeetEngine("parakeet-tiny", GOLDENS / "tdt.nemo",
                            options=ParakeetOptions(max_chunk_s=golden["chunk_s"], split_search_s=2.0))
    progress: list[float] = []
    out = engine.transcribe(clip, on_progress=lambda done, total: progress.append(done))
    spans = [tuple(s) for s in golden["spans"]]
    assert progress == [end / 16000 for _, end in spans]
    decoded = [spans[int(name.removeprefix("chunk"))] for name in golden["decoded"]]
    assert len(decoded) == len(spans) - 1  # the quiet tail is skipped
    want_words, want_segments, texts = [], [], []
    for name, (start, _end) in zip(golden["decoded"], decoded):
        r = golden["results"][name]
        texts.append(r["text"])
        want_words += [(w["word"], round(start / 16000 + w["start"], 3), round(start / 16000 + w["end"], 3))
                       for w in r["word"]]
        want_segments += [(s["segment"], round(start / 16000 + s["start"], 3), round(start / 16000 + s["end"], 3))
                          for s in r["segment"]]
    assert out.text == " ".join(t for t in texts if t)
    assert [(s.text, s.start, s.end) for s in out.segments] == want_segments
    assert [(w.word, w.start, w.end) for s in out.segments for w in (s.words or [])] == want_words
    assert out.duration == len(clip) / 16000


def test_audio_past_the_limit_is_refused_before_any_decode() -> None:
    from omnid.engine.errors import EngineError
    from omnid.engine.parakeet.engine import ParakeetEngine, ParakeetOptions

    engine = ParakeetEngine("parakeet-tiny", GOLDENS / "tdt.nemo", options=ParakeetOptions(max_audio_s=2.0))
    with pytest.raises(EngineError, match="at most 2 s"):
        engine.transcribe(np.zeros(3 * 16000, np.float32))


@pytest.mark.parametrize("clip", CLIPS)
def test_ctc_times_are_nemos(clip: str) -> None:
    """CTC's token spans (from the previous token's first frame), punctuation at its start, words and segments."""
    p, want = model("hybrid"), meta()["models"]["hybrid"][clip]["ctc"]
    tokens = p.decode(arrays()[f"encoder/hybrid/{clip}"], ctc=True)
    chars = timestamps.token_spans(tokens, p.vocabulary, ctc=True)
    assert [(c.text, c.start, c.end) for c in chars] == [(_char_text(c), c["start_offset"], c["end_offset"])
                                                          for c in want["char"]]
    words = timestamps.words(chars, p.vocabulary)
    assert [(w.text, w.start_offset, w.end_offset, w.seconds(0.01, 8)) for w in words] == [
        (w["word"], w["start_offset"], w["end_offset"], (w["start"], w["end"])) for w in want["word"]]
    assert [(s.text, s.start_offset, s.end_offset) for s in timestamps.segments(words)] == [
        (s["segment"], s["start_offset"], s["end_offset"]) for s in want["segment"]]



@pytest.mark.parametrize("kind", KINDS)
def test_the_converted_mlx_community_folder_loads_and_parakeet_mlx_agrees(tmp_path: Path, kind: str) -> None:
    """The .nemo converted to mlx-community's layout (scripts/parakeet_to_mlx.py): omnid reads it and decodes as from
    the .nemo; parakeet-mlx (the second reference) loads it strictly and, fed NeMo's log-mel, gives NeMo's encoder
    output and greedy tokens on every clip (its greedy rules agree with NeMo's on these inputs)."""
    from omnid.engine.parakeet.convert import to_mlx_folder
    from tests import parakeet_reference

    folder = to_mlx_folder(GOLDENS / f"{kind}.nemo", tmp_path / kind)
    ours = Parakeet(load(folder))
    assert ours.vocabulary == model(kind).vocabulary
    reference = parakeet_reference.load(folder)
    for clip in CLIPS:
        mel, want = arrays()[f"mel/{clip}"], meta()["models"][kind][clip]
        tokens = ours.decode(ours.encode(mel))
        assert [(t.id, t.frame) for t in tokens] == list(zip(want["ids"], want["frames"]))
        encoded, theirs = parakeet_reference.greedy(reference, mel)
        assert np.abs(encoded - arrays()[f"encoder/{kind}/{clip}"]).max() <= 1e-4
        assert theirs == list(zip(want["ids"], want["frames"]))


def test_an_mlx_folder_whose_vocabulary_disagrees_with_the_joint_fails_at_load(tmp_path: Path) -> None:
    from omnid.engine.parakeet.convert import to_mlx_folder

    folder = to_mlx_folder(GOLDENS / "tdt.nemo", tmp_path / "tdt")
    config = json.loads((folder / "config.json").read_text())
    config["joint"]["vocabulary"] = config["joint"]["vocabulary"][:-1]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="joint.vocabulary has 63 pieces; the joint's vocabulary has 64"):
        load(folder)


@pytest.mark.parametrize("block", [1, 5, 128])
def test_long_input_is_subsampled_in_blocks_as_in_one(monkeypatch, block: int) -> None:
    """The CPU subsampling takes a long input a block of output frames at a time (bounded memory): the same frames
    as the whole input in one pass, at every block edge."""
    from omnid.engine.nemo import fastconformer

    sub = model("tdt").encoder.subsampling
    mel = audio("long")[: 16000 * 6]
    mel = model("tdt").features(mel)
    whole = sub._cpu_block(mel)
    monkeypatch.setattr(fastconformer, "SUBSAMPLING_BLOCK", block)
    blocked = sub._cpu(mel)
    assert blocked.shape == whole.shape and len(whole) > 3 * block + 4 or block == 128
    assert np.abs(blocked - whole).max() <= 1e-6 * max(1.0, float(np.abs(whole).max()))


def test_tdt_decodes_whole_sequences_only() -> None:
    """A TDT duration can reach past a chunk's end: decoding chunk by chunk is refused, where RNN-T's carries over
    (tests/test_nemotron.py)."""
    transducer = model("tdt").transducer
    assert transducer is not None
    with pytest.raises(ValueError, match="whole sequences"):
        transducer.continue_greedy(np.zeros((3, 64), np.float32), transducer.start())
