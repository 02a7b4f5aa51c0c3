"""Parakeet in the Hugging Face transformers layout (the one the reference's Python server reads): the tiny NeMo
checkpoints of test_parakeet.py written as ``ParakeetForTDT``, ``ParakeetForRNNT`` and ``ParakeetForCTC`` folders by
transformers 5.25.0's own classes (scripts/parakeet_hf_goldens.py), read through the production loader: the same
weights as the .nemo, NeMo's tokens and texts, and transformers' own greedy ids wherever its rules are NeMo's."""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from omnid.cli.transcribe import folder_model
from omnid.engine.errors import CheckpointError
from omnid.engine.parakeet.checkpoint import load
from omnid.engine.parakeet.engine import ParakeetEngine
from omnid.engine.parakeet.model import Parakeet
from tests.test_parakeet import CLIPS, GOLDENS, arrays, audio, meta

SOURCES = {"tdt": "tdt", "rnnt": "rnnt", "ctc": "hybrid"}  # each folder and the .nemo it was made from


@cache
def hf_meta() -> dict:
    return json.loads((GOLDENS / "hf_goldens.json").read_text())


@cache
def model(kind: str) -> Parakeet:
    return Parakeet(load(GOLDENS / f"hf_{kind}"))


def nemo_golden(kind: str, clip: str) -> dict:
    golden = meta()["models"][SOURCES[kind]][clip]
    return golden["ctc"] if kind == "ctc" else golden


@pytest.mark.parametrize("kind", SOURCES)
def test_a_transformers_folder_holds_the_nemo_files_weights(kind: str) -> None:
    """Every tensor renamed back to NeMo's and laid out as from the .nemo, bit for bit (the CTC model: the hybrid's
    encoder and CTC head); the vocabulary from tokenizer.json is the SentencePiece model's."""
    ours, nemo = load(GOLDENS / f"hf_{kind}"), load(GOLDENS / f"{SOURCES[kind]}.nemo")
    assert ours.layout == "transformers"
    want = {k: v for k, v in nemo.weights.items() if kind != "ctc" or not k.startswith(("decoder.", "joint."))}
    assert sorted(ours.weights) == sorted(want)
    for name, array in want.items():
        assert np.array_equal(np.asarray(ours.weights[name]), np.asarray(array)), name
    assert ours.vocabulary == nemo.vocabulary
    assert ours.front == nemo.front
    assert (ours.dims.durations, ours.dims.max_symbols, ours.dims.transducer, ours.dims.ctc) == (
        () if kind == "ctc" else nemo.dims.durations, nemo.dims.max_symbols, kind != "ctc", kind == "ctc")


@pytest.mark.parametrize("kind", SOURCES)
def test_transformers_folders_decode_as_nemo_does(kind: str) -> None:
    p = model(kind)
    for clip in CLIPS:
        want = nemo_golden(kind, clip)
        tokens = p.decode(p.encode(arrays()[f"mel/{clip}"]), ctc=kind == "ctc")
        assert [t.id for t in tokens] == want["ids"]
        if kind != "ctc":
            assert [t.frame for t in tokens] == want["frames"]
            assert [t.duration for t in tokens] == (want["durations"] or [None] * len(tokens))
        assert p.vocabulary.text([t.id for t in tokens]) == want["text"]


def test_the_feature_extractors_values_give_nemos_log_mel() -> None:
    p = model("tdt")
    assert np.abs(p.features(audio("ljspeech")) - arrays()["mel/ljspeech"]).max() <= 1e-3


@pytest.mark.parametrize("kind", ("rnnt", "ctc"))
def test_transformers_own_greedy_ids_are_omnids_for_rnnt_and_ctc(kind: str) -> None:
    """transformers' ParakeetForRNNT.generate and ParakeetForCTC's argmax give NeMo's ids, and so omnid's."""
    p = model(kind)
    for clip in CLIPS:
        tokens = p.decode(p.encode(arrays()[f"mel/{clip}"]), ctc=kind == "ctc")
        assert [t.id for t in tokens] == hf_meta()[kind][clip]["ids"]


def test_transformers_tdt_differs_only_where_nemos_symbol_limit_moves_on() -> None:
    """transformers' ParakeetForTDT.generate has no per-frame symbol limit: it agrees with omnid (and NeMo) token
    for token until a frame has had max_symbols zero-duration tokens, where NeMo moves to the next frame and
    transformers keeps emitting on it."""
    p = model("tdt")
    for clip in CLIPS:
        want, theirs = nemo_golden("tdt", clip), hf_meta()["tdt"][clip]["ids"]
        ours = p.decode(p.encode(arrays()[f"mel/{clip}"]))
        assert [t.id for t in ours] == want["ids"]
        k = next(i for i, (a, b) in enumerate(zip(theirs, want["ids"])) if a != b)
        assert theirs[:k] == [t.id for t in ours[:k]]
        limit = p.dims.max_symbols
        same_frame = ours[k - limit:k]
        assert len({t.frame for t in same_frame}) == 1 and all(t.duration == 0 for t in same_frame)
        assert ours[k].frame > ours[k - 1].frame  # NeMo moved on; transformers repeats the frame's last token
        assert theirs[k] == theirs[k - 1]


def test_a_ctc_model_transcribes_with_its_one_head() -> None:
    engine = ParakeetEngine("parakeet-ctc", GOLDENS / "hf_ctc")
    assert engine.ctc and engine.layout == "transformers"
    transcript = engine.transcribe(audio("ljspeech"))
    assert transcript.text == nemo_golden("ctc", "ljspeech")["text"].strip()
    golden = nemo_golden("ctc", "ljspeech")
    assert [w.word for s in transcript.segments for w in s.words] == [w["word"] for w in golden["word"]]


@pytest.mark.parametrize("folder", ("hf_tdt", "hf_ctc"))
def test_omnid_transcribe_tells_a_transformers_folder_by_its_files(folder: str, tmp_path: Path) -> None:
    assert folder_model(GOLDENS / folder).kind == "parakeet"


def _copy(tmp_path: Path, kind: str = "tdt") -> Path:
    folder = tmp_path / f"hf_{kind}"
    shutil.copytree(GOLDENS / f"hf_{kind}", folder)
    return folder


def _edit_config(folder: Path, **changes: object) -> Path:
    config = json.loads((folder / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_tokenizer_whose_size_disagrees_with_the_joint_fails_at_load(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab.pop(next(p for p, i in vocab.items() if i == len(vocab) - 1))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(CheckpointError, match=r"tokenizer\.json has 63 pieces; the joint's vocabulary has 64"):
        load(folder)


def test_a_missing_tensor_fails_naming_it(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    tensors = mx.load(str(folder / "model.safetensors"))
    assert isinstance(tensors, dict)
    del tensors["joint.head.bias"]
    mx.save_safetensors(str(folder / "model.safetensors"), tensors)
    with pytest.raises(CheckpointError, match=r"model\.safetensors.*joint\.joint_net\.2\.bias"):
        load(folder)


@pytest.mark.parametrize(("changes", "message"), [
    ({"durations": None}, "needs durations"),
    ({"blank_token_id": 3}, "blank_token_id must be the last id, 64"),
    ({"vocab_size": 80, "blank_token_id": 79}, "has 64 pieces; the joint's vocabulary has 79"),
    ({"hidden_act": "tanh"}, "only relu"),
    ({"decoder_hidden_size": "32"}, "decoder_hidden_size must be a positive integer"),
])
def test_a_config_that_is_not_parakeets_fails_at_load(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        load(_edit_config(_copy(tmp_path), **changes))


def test_an_encoder_config_omnid_does_not_compute_is_refused(tmp_path: Path) -> None:
    folder = _copy(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["encoder_config"]["hidden_act"] = "gelu"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="encoder_config.hidden_act is 'gelu'"):
        load(folder)
