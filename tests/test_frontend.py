"""Audio decoding and the log-mel front end, against faster-whisper's reference front end on real audio."""

from __future__ import annotations

import numpy as np
import pytest
from faster_whisper.feature_extractor import FeatureExtractor

from omnid.audio import AudioDecodeError, decode_audio, wav_bytes
from omnid.engine.whisper.mel import log_mel_spectrogram
from tests.helpers import manifest

CLIPS = ["ljspeech_LJ001-0001", "an4_an369-mtos-b", "librispeech_1688-142285-0009"]


@pytest.mark.parametrize("clip_id", CLIPS)
@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_reference_front_end(corpus, clip_id, n_mels):
    audio = decode_audio(corpus / manifest()[clip_id]["path"])
    ref = FeatureExtractor(feature_size=n_mels)(audio)
    ours = np.array(log_mel_spectrogram(audio, n_mels)).T
    assert ours.shape == ref.shape
    assert np.abs(ours - ref).max() < 1e-3


def test_every_container_in_the_corpus_decodes_to_16k_mono(corpus):
    seen = {}
    for clip in manifest().values():
        ext = clip["path"].rsplit(".", 1)[1]
        if ext not in seen:
            seen[ext] = clip
    assert {"wav", "flac", "mp3", "ogg", "opus", "aiff"} <= set(seen)
    for ext, clip in seen.items():
        audio = decode_audio(corpus / clip["path"])
        assert audio.dtype == np.float32 and audio.ndim == 1
        assert abs(len(audio) / 16000 - clip["duration_s"]) < 0.1, ext
        assert 0 < np.abs(audio).max() <= 1.0


def test_stereo_44k_is_downmixed_and_resampled():
    t = np.arange(44100) / 44100
    left, right = np.sin(2 * np.pi * 440 * t), np.zeros_like(t)
    stereo = np.stack([left, right], axis=1).reshape(-1) * 0.5
    audio = decode_audio(wav_bytes(stereo, 44100, 2))
    assert abs(len(audio) - 16000) <= 2
    assert 0.2 < np.abs(audio).max() < 0.3  # half of the left channel's 0.5 peak


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "empty"),
        (b"this is plain text, not audio" * 10, "not a recognised audio format"),
        (wav_bytes(np.zeros(16000), 16000, 1)[:30], "not a recognised audio format|no decodable audio|corrupt"),
    ],
)
def test_bad_input_is_a_clear_error(data, message):
    with pytest.raises(AudioDecodeError, match=message):
        decode_audio(data)


def test_length_cap_stops_decoding_early():
    with pytest.raises(AudioDecodeError, match="longer than the 0.5 s limit"):
        decode_audio(wav_bytes(np.zeros(16000), 16000, 1), max_seconds=0.5)
