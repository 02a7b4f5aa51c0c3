"""FunASR's front end (omnid/engine/funasr/frontend.py) against funasr 1.4.16's own WavFrontend: the goldens
scripts/funasr_frontend_goldens.py wrote with it (SenseVoice Small's settings, dither 0, an am.mvn laid out as the
real one) on corpus clips in three languages, 31 s of them joined, a tone and audio shorter than one 25 ms window:
the same frame count and features within 1e-4. And the pieces one by one: the stacking rule for every length, the
am.mvn reader's errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from omnid.audio import decode_audio
from omnid.engine.errors import CheckpointError
from omnid.engine.funasr.frontend import FrontEnd, fbank, read_cmvn, stack_frames
from tests.helpers import ends_within, nemo_goldens

GOLDENS = Path(__file__).parent / "goldens" / "funasr_frontend"
CORPUS = Path(__file__).parent / "corpus"


meta, arrays, _ = nemo_goldens(GOLDENS)  # goldens.json and goldens.npz, each read once


def samples(case: str) -> np.ndarray:
    c = meta()["cases"][case]
    audio = np.concatenate([decode_audio(CORPUS / p) for p in c["paths"]]) if c["paths"] else arrays()[f"{case}/audio"]
    assert len(audio) == c["samples"] and abs(float(audio.astype(np.float64).sum()) - c["audio_sum"]) < 1e-3
    return audio


@pytest.mark.parametrize("case", list(meta()["cases"]))
def test_features_are_funasrs(case: str) -> None:
    """Every frame where the goldens keep them all, else the first and last 4 and the sum of all."""
    front, c, z = FrontEnd(*read_cmvn(GOLDENS / "am.mvn")), meta()["cases"][case], arrays()
    ours = front.features(samples(case))
    assert ours.shape == (c["frames"], 560) and ours.dtype == np.float32
    if f"{case}/features" in z:
        assert np.abs(ours - z[f"{case}/features"]).max() <= 1e-4
    else:
        assert ends_within(ours, z[f"{case}/features_first"], z[f"{case}/features_last"], 1e-4)
    assert abs(float(ours.astype(np.float64).sum()) - c["sum"]) <= 1e-4 * ours.size


def test_the_stacking_rule_for_every_length() -> None:
    """Output i stacks padded frames 6i .. 6i+6: three copies of frame 0 in front, the last frame repeated after."""
    for t in range(1, 40):
        feats = np.arange(t, dtype=np.float32)[:, None]
        out = stack_frames(feats)
        assert out.shape == (-(-t // 6), 7)
        padded = [0, 0, 0, *range(t)] + [t - 1] * 7
        for i, row in enumerate(out):
            assert list(row) == padded[6 * i : 6 * i + 7], (t, i)
    assert stack_frames(np.zeros((0, 80), np.float32)).shape == (0, 560)


def test_no_audio_is_no_frames() -> None:
    assert fbank(np.zeros(0, np.float32)).shape == (0, 80)


@pytest.mark.parametrize(("text", "error"), [
    ("<Nnet>\n<AddShift> 3 3\n<LearnRateCoef> 0 [ 1 2 3 ]\n</Nnet>\n", "no <Rescale> vector"),
    ("<AddShift> 3 3\n<LearnRateCoef> 0 [ 1 2 3 ]\n<Rescale> 2 2\n<LearnRateCoef> 0 [ 1 2 ]\n", "<Rescale> 2"),
    ("<AddShift> 3 3\n<LearnRateCoef> 0 1 2 3\n<Rescale> 3 3\n<LearnRateCoef> 0 [ 1 2 3 ]\n", "no [ ... ] vector"),
    ("<AddShift> 1 1\n<LearnRateCoef> 0 [ x ]\n<Rescale> 1 1\n<LearnRateCoef> 0 [ 1 ]\n", "not numbers"),
])
def test_a_broken_am_mvn_is_refused_naming_the_file(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "am.mvn"
    path.write_text(text)
    with pytest.raises(CheckpointError, match=re.escape(error)) as info:
        read_cmvn(path)
    assert str(path) in str(info.value)
