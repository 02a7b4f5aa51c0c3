"""Nemotron streaming ASR against NVIDIA NeMo 3.0.0 (scripts/nemotron_goldens.py): a tiny random cache-aware prompt
checkpoint built with NeMo's own classes (EncDecRNNTBPEModelWithPrompt), loaded from its .nemo through the
production loader, on four real clips (one over 20 s), for every attention context the checkpoint was trained for
and two prompt languages: the log-mel, NeMo's offline pass with the chunked-limited mask (its streaming oracle),
and its greedy tokens."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from omnid.engine.nemotron.checkpoint import load
from omnid.engine.nemotron.model import Nemotron
from tests.helpers import nemo_goldens

GOLDENS = Path(__file__).parent / "goldens" / "nemotron_tiny"
CLIPS = ("short", "ljspeech", "librispeech", "long")
LANGUAGES = ("en-US", "de-DE")
RIGHTS = (13, 6, 3, 1, 0)


meta, arrays, audio = nemo_goldens(GOLDENS)


@cache
def model() -> Nemotron:
    return Nemotron(load(GOLDENS / "nemotron.nemo"))


def test_the_streaming_configuration_comes_from_the_checkpoint() -> None:
    """Contexts, prompts and the encoder's switches as NeMo's config holds them, not defaults."""
    m = model()
    assert m.streaming.contexts == tuple((meta()["left"], r) for r in meta()["rights"])
    assert m.streaming.prompts == meta()["prompts"]
    assert m.dims.conformer.causal and m.dims.conformer.conv_norm == "layer_norm"
    assert m.front.normalize == "NA"
    assert not m.dims.durations and m.dims.max_symbols == 10


def test_the_long_clip_is_over_20_seconds() -> None:
    assert len(audio("long")) > 20 * 16000


@pytest.mark.parametrize("clip", CLIPS)
def test_log_mel_is_nemos_unnormalised_one(clip: str) -> None:
    """NeMo's streaming buffer holds the valid frames and one frame of its pad value (0) after them."""
    mel = model().features(audio(clip))
    want = arrays()[f"mel/{clip}"]
    assert mel.shape == (len(want) - 1, want.shape[1])
    assert not want[-1].any()
    assert np.abs(mel - want[:-1]).max() <= 1e-3


@pytest.mark.parametrize("right", RIGHTS)
@pytest.mark.parametrize("clip", CLIPS)
def test_the_offline_pass_with_the_chunked_mask_is_nemos(clip: str, right: int) -> None:
    """The causal FastConformer over the whole clip with chunked-limited attention, then the prompt: NeMo's
    model.forward within 1e-4 for both languages, and NeMo's greedy ids on it."""
    m = model()
    mel = arrays()[f"mel/{clip}"][:-1]
    for language in LANGUAGES:
        out = m.encode_offline(mel, (meta()["left"], right), m.streaming.prompts[language])
        want = arrays()[f"offline/{right}/{language}/{clip}"]
        assert out.shape == want.shape
        assert np.abs(out - want).max() <= 1e-4, (clip, right, language)
        offline = meta()["runs"][f"{right}/{language}/{clip}"]["offline"]
        tokens = m.transducer.greedy(out)
        assert [t.id for t in tokens] == offline["ids"]
        assert [t.frame for t in tokens] == offline["frames"]
        assert m.vocabulary.text([t.id for t in tokens]) == offline["text"]


def test_the_two_prompts_give_different_encodings() -> None:
    """The prompt is applied: the same audio and context under two languages differ (and NeMo's agree with each)."""
    m = model()
    mel = arrays()["mel/ljspeech"][:-1]
    en, de = (m.encode_offline(mel, (56, 13), m.streaming.prompts[lang]) for lang in LANGUAGES)
    assert np.abs(en - de).max() > 0.1
