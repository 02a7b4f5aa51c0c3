"""Parakeet CTC models (issue 44): NeMo's CTC-only ``.nemo`` (EncDecCTCModelBPE: its ``decoder`` is the CTC head, no
prediction network or joint) and mlx-community's CTC folder as parakeet-mlx 0.7.0 reads it (``parakeet-ctc-0.6b``,
``-1.1b``: NeMo's config as config.json with the vocabulary in ``decoder.vocabulary``, no joint; the head as
``decoder.decoder_layers.0``). ctc.nemo is saved by NeMo's own code from the tiny hybrid's encoder and CTC head
(scripts/parakeet_ctc_goldens.py), so the hybrid's recorded CTC decoding is NeMo's for it; parakeet-mlx ships no
converter, so its folder is omnid's .nemo conversion (scripts/parakeet_to_mlx.py), read strictly by parakeet-mlx's
own loader in the test."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.kinds import recognise
from omnid.engine.parakeet import kind as parakeet_kind
from omnid.engine.parakeet.checkpoint import load
from omnid.engine.parakeet.model import Parakeet
from tests.helpers import nemo_goldens, nemo_with_value

GOLDENS = Path(__file__).parent / "goldens" / "parakeet_tiny"
CTC = GOLDENS / "ctc.nemo"
CLIPS = ("short", "ljspeech", "librispeech", "long")

meta, arrays, audio = nemo_goldens(GOLDENS)


@cache
def model() -> Parakeet:
    return Parakeet(load(CTC))


def test_the_ctc_nemo_is_nemos_ctc_model_and_recorded_as_the_hybrids_ctc_decoding() -> None:
    recorded = json.loads((GOLDENS / "ctc.json").read_text())
    assert recorded["target"] == "nemo.collections.asr.models.ctc_bpe_models.EncDecCTCModelBPE"
    for clip in CLIPS:
        want = meta()["models"]["hybrid"][clip]["ctc"]
        assert recorded["clips"][clip]["ids"] == want["ids"] and recorded["clips"][clip]["text"] == want["text"]


def test_a_ctc_nemo_is_recognised_as_parakeet_and_has_only_the_ctc_head() -> None:
    assert parakeet_kind.recognises(CTC) and parakeet_kind.layout(CTC) == "nemo"
    assert recognise(CTC).name == "parakeet"
    p = model()
    assert p.transducer is None and p.ctc is not None and not p.dims.transducer
    assert len(p.vocabulary) == p.dims.vocabulary == 64


@pytest.mark.parametrize("clip", CLIPS)
def test_the_ctc_nemo_decodes_as_nemo(clip: str) -> None:
    """NeMo's encoder output and greedy CTC (best class per frame, repeats merged, blanks dropped) and text."""
    p, want = model(), meta()["models"]["hybrid"][clip]["ctc"]
    encoded = p.encode(arrays()[f"mel/{clip}"])
    assert np.abs(encoded - arrays()[f"encoder/hybrid/{clip}"]).max() <= 1e-4
    tokens = p.decode(encoded)  # a CTC model decodes with its one head, unasked
    assert [t.id for t in tokens] == want["ids"]
    assert p.vocabulary.text([t.id for t in tokens]) == want["text"]


def test_the_engine_transcribes_a_ctc_nemo_as_nemo() -> None:
    from omnid.engine.parakeet.engine import ParakeetEngine

    engine = ParakeetEngine("parakeet-ctc-tiny", CTC)
    assert engine.ctc
    assert engine.transcribe(audio("short")).text == meta()["models"]["hybrid"]["short"]["ctc"]["text"]


@cache
def _folder(tmp: Path) -> Path:
    from omnid.engine.parakeet.convert import to_mlx_folder

    return to_mlx_folder(CTC, tmp / "parakeet-ctc")


def test_the_mlx_community_ctc_folder_has_parakeet_mlxs_layout(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    assert "joint" not in config and config["target"].endswith("EncDecCTCModelBPE")
    assert config["decoder"]["vocabulary"] == list(model().vocabulary.pieces)
    assert parakeet_kind.recognises(folder) and parakeet_kind.layout(folder) == "mlx"
    assert recognise(folder).name == "parakeet"  # not Whisper's folder, which Parakeet shadows


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_mlx_community_ctc_folder_decodes_as_parakeet_mlx_and_nemo(tmp_path: Path, dtype: str) -> None:
    """parakeet-mlx loads the folder strictly (every tensor used, none missing) as its ParakeetCTC; fed NeMo's
    log-mel, its greedy CTC tokens and frames are omnid's on every clip, and NeMo's. In float32 exactly; the
    bfloat16 folder (as mlx-community ships) is read by both and computed in float32 by both."""
    import mlx.core as mx

    from omnid.engine.nemo.mlx_folder import save_folder
    from tests import parakeet_reference

    folder = _folder(tmp_path)
    if dtype == "bfloat16":
        tensors = {k: np.array(v.astype(mx.float32)) for k, v in mx.load(str(folder / "model.safetensors")).items()}
        half = tmp_path / "bf16"
        save_folder(half, json.loads((folder / "config.json").read_text()), tensors)
        mx.save_safetensors(str(half / "model.safetensors"),
                            {k: mx.array(v).astype(mx.bfloat16) for k, v in tensors.items()})
        folder = half
    ours = Parakeet(load(folder))
    assert ours.transducer is None and ours.vocabulary == model().vocabulary
    reference = parakeet_reference.load(folder)
    assert type(reference).__name__ == "ParakeetCTC"
    for clip in CLIPS:
        mel = arrays()[f"mel/{clip}"]
        tokens = ours.decode(ours.encode(mel))
        encoded, theirs = parakeet_reference.greedy(reference, mel)
        assert [(t.id, t.frame) for t in tokens] == theirs
        if dtype == "float32":
            assert np.abs(encoded - arrays()[f"encoder/hybrid/{clip}"]).max() <= 1e-4
            want = meta()["models"]["hybrid"][clip]["ctc"]
            assert [t.id for t in tokens] == want["ids"]
            assert ours.vocabulary.text([t.id for t in tokens]) == want["text"]


def test_a_ctc_folder_whose_vocabulary_disagrees_with_the_head_is_refused_naming_the_file_and_key(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["decoder"]["vocabulary"] = config["decoder"]["vocabulary"][:-1]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"config\.json: decoder\.vocabulary has 63 pieces; the CTC head's "
                                              r"vocabulary has 64"):
        load(folder)


def test_a_ctc_folder_whose_head_disagrees_with_its_vocabulary_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    """Without num_classes the head's size is the vocabulary's (as NeMo and parakeet-mlx take it): a head of
    another size is refused naming the weights file and the tensor."""
    folder = _folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config["decoder"]["num_classes"] = -1
    config["decoder"]["vocabulary"] = config["decoder"]["vocabulary"][:-1]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: .*decoder_layers\.0\.weight"):
        load(folder)


def test_a_ctc_nemo_whose_tokenizer_disagrees_with_the_head_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"tokenizer\.model has 64 pieces; the CTC head's vocabulary has 63"):
        load(nemo_with_value(CTC, tmp_path, "decoder", "num_classes", value=63))
