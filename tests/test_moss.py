"""MOSS-Transcribe-Diarize against transformers 5.23 (scripts/moss_goldens.py wrote the goldens with the official
model, feature extractor and processor on a tiny random checkpoint in the HF conversion's layout): log-mel windows,
encoder output, projected audio rows, prompt ids (time markers, custom prompt and keywords), prefill logits, greedy
ids, and the parsed speaker segments; the checkpoint loader's refusals; the original release's tensor names."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from omnid.audio import decode_audio
from omnid.engine.errors import CheckpointError
from omnid.engine.moss_transcribe_diarize.checkpoint import load, ours
from omnid.engine.moss_transcribe_diarize.model import MossTranscribeDiarize, windows
from omnid.engine.moss_transcribe_diarize.prompt import audio_span, prompt_ids
from omnid.engine.moss_transcribe_diarize.tags import Said, parse
from omnid.engine.qwen3.model import greedy

GOLDEN = Path(__file__).parent / "goldens" / "moss_tiny"
CORPUS = Path(__file__).parent / "corpus" / "audio" / "en"
CASES = json.loads((GOLDEN / "goldens.json").read_text())["cases"]
ARRAYS = np.load(GOLDEN / "goldens.npz")


def clip(name: str) -> np.ndarray:
    return decode_audio((CORPUS / f"{name}.flac").read_bytes())


def audio_of(name: str) -> np.ndarray:
    """The goldens' clips, built as scripts/moss_goldens.py builds them."""
    lj, mi = clip("ljspeech_LJ001-0002"), clip("mfa_cold_corpus")
    gap = np.zeros(8000, np.float32)
    return {
        "short": lambda: lj,
        "turns": lambda: np.concatenate([lj, gap, mi[: 3 * 16000]]),
        "long": lambda: np.concatenate([clip("ljspeech_LJ001-0001"), gap, mi[: 16 * 16000], gap,
                                        clip("ljspeech_LJ001-0003")]),
        "exact": lambda: np.concatenate([mi[: 20 * 16000], gap, lj])[:480000],
    }[name]()


@pytest.fixture(scope="module")
def moss():
    ckpt = load(GOLDEN)
    model = MossTranscribeDiarize(ckpt.dims)
    model.load_weights(ckpt.weights, strict=True)
    mx.eval(model.parameters())
    return ckpt, model


@pytest.mark.parametrize("key", sorted(CASES))
def test_features_encoder_audio_rows_prompt_and_logits_match_transformers(moss, key):
    ckpt, model = moss
    case = CASES[key]
    audio = audio_of(case["audio"])
    assert len(audio) == case["samples"]
    mel, valid = windows(audio)
    assert valid == case["valid"]
    keep = ARRAYS[f"{key}/mel"].shape[1]
    np.testing.assert_allclose(mel[:, :keep], ARRAYS[f"{key}/mel"], atol=1e-4)
    encoded = np.array(model.audio_tower(mx.array(mel)))
    np.testing.assert_allclose(encoded[:, : keep // 2], ARRAYS[f"{key}/encoded"], atol=1e-4)
    rows = model.audio_rows(mx.array(mel), valid)
    edge = ARRAYS[f"{key}/rows"].shape[0] // 2  # the goldens keep the first and last rows, and the sum of all
    np.testing.assert_allclose(np.concatenate([np.array(rows)[:edge], np.array(rows)[-edge:]]), ARRAYS[f"{key}/rows"],
                               atol=1e-4)
    np.testing.assert_allclose(np.array(rows).sum(axis=0), ARRAYS[f"{key}/rows_sum"], atol=1e-4 * rows.shape[0])
    ids = prompt_ids(ckpt.tokenizer, rows.shape[0], case["prompt"], case["keywords"] or ())
    assert ids == case["prompt_ids"]
    lm = model.language_model
    x = lm.embed(ids, ckpt.audio_token_id, rows)
    hidden = lm.decoder(x, lm.new_caches())
    logits = np.array(lm.logits(hidden[:, -4:]))[0]
    np.testing.assert_allclose(logits, ARRAYS[f"{key}/logits"], atol=1e-3)
    stop = {ckpt.tokenizer.special("<|im_end|>"), ckpt.tokenizer.special("<|endoftext|>")}
    tokens, finish = greedy(lm, x, stop, 64)
    assert tokens == [t for t in case["generated"] if t not in stop] and finish == "stop"
    text = ckpt.tokenizer.decode(tokens)
    assert text == case["text"]
    said = parse(text)
    assert said is not None
    assert [{"Start": s.start, "End": s.end, "Speaker": s.speaker, "Content": s.text} for s in said] == case["parsed"]


def test_time_markers_every_five_seconds_of_slots():
    assert audio_span(92) == "<|audio_pad|>" * 62 + "5" + "<|audio_pad|>" * 30  # 7.3 s
    span = audio_span(813)  # 65 s: markers 5 ... 65, then 7 slots
    assert span.endswith("65" + "<|audio_pad|>" * 7) and span.count("<|audio_pad|>") == 813
    assert [m for m in span.split("<|audio_pad|>") if m] == [str(s) for s in range(5, 66, 5)]


def test_the_output_parser_reads_times_speakers_and_text():
    assert parse("assistant\n[0.48][S01]Hello there.[1.66] stray [1:02.5][S02] Hi\nyou [1:03:00]") == [
        Said(0.48, 1.66, 1, "Hello there."), Said(62.5, 3780.0, 2, "Hi\nyou")]
    # A bracketed aside read as a segment's end time: that segment is dropped, the others kept.
    assert parse("[0.48][S01]Hello there.[1.66][2.0][S02] Hi [laughs] [3.0]") == [Said(0.48, 1.66, 1, "Hello there.")]
    assert parse("no tags at all") is None


def test_the_original_releases_names_map_to_the_conversions():
    assert ours("model.whisper_encoder.layers.3.self_attn.k_proj.weight") == "audio_tower.blocks.3.attn.key.weight"
    assert ours("model.vq_adaptor.layers.2.bias") == "multi_modal_projector.linear_2.bias"
    assert ours("model.vq_adaptor.layers.layers.3.weight") == "multi_modal_projector.norm.weight"  # mlx-audio
    assert ours("model.language_model.layers.0.mlp.up_proj.weight") == "language_model.model.layers.0.mlp.up_proj.weight"


def test_a_broken_checkpoint_is_refused_naming_file_and_tensor(tmp_path):
    import shutil

    for f in GOLDEN.iterdir():
        if f.name not in ("goldens.json", "goldens.npz"):
            shutil.copy(f, tmp_path / f.name)
    weights = dict(mx.load(str(tmp_path / "model.safetensors")))
    name = "model.multi_modal_projector.linear_1.weight"
    weights[name] = weights[name][:, :-1]
    mx.save_safetensors(str(tmp_path / "model.safetensors"), weights)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor model\.multi_modal_projector\.linear_1\.weight has shape"):
        load(tmp_path)
