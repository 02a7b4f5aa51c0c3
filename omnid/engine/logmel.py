"""The Whisper-style log-mel front end in MLX, shared by Whisper and Qwen3-ASR: 25 ms Hann windows every 10 ms,
power spectrum, Slaney mel filters, log10 clipped 8 below the maximum, scaled to about [-1, 1].

Reflect padding of n_fft/2 each side, and the last STFT frame is dropped. The engines differ only in zeros added at
the end first: faster-whisper's front end (Whisper's parity reference) adds 160, Hugging Face's
WhisperFeatureExtractor (Qwen3-ASR's) none, so a clip of N samples has N // 160 frames there.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np

from omnid.audio import SAMPLE_RATE

N_FFT = 400
HOP_LENGTH = 160
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH


def slaney_filterbank(n_fft: int, n_mels: int, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """librosa's Slaney mel filters (fmin 0, fmax sample_rate / 2, area-normalised) in float64, shape
    (n_mels, n_fft//2+1). Whisper's and Sortformer's front ends both use it."""
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    max_mel = min_log_mel + np.log(sample_rate / 2 / min_log_hz) / logstep
    mels = np.linspace(0.0, max_mel, n_mels + 2)
    freqs = f_sp * mels
    log_region = mels >= min_log_mel
    freqs[log_region] = min_log_hz * np.exp(logstep * (mels[log_region] - min_log_mel))
    fdiff = np.diff(freqs)
    ramps = freqs[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (freqs[2 : n_mels + 2] - freqs[:n_mels]))[:, None]
    return weights


@lru_cache(maxsize=4)
def mel_filters(n_mels: int) -> mx.array:
    """Whisper's filterbank, shape (n_fft//2+1, n_mels)."""
    return mx.array(slaney_filterbank(N_FFT, n_mels).T.astype(np.float32))


@lru_cache(maxsize=1)
def _hann() -> mx.array:
    return mx.array(np.hanning(N_FFT + 1)[:-1].astype(np.float32))


# Frames computed per step: bounds the STFT's temporaries (frames x n_fft floats) whatever the audio's length.
BLOCK_FRAMES = 6000


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, tail: int = HOP_LENGTH) -> mx.array:
    """16 kHz mono float32 samples -> (frames, n_mels) log-mel, one frame per 10 ms.

    Computed BLOCK_FRAMES at a time: each frame depends only on its own 400 samples, and the clipping below the
    maximum is applied once all blocks are known, so the result equals a single pass over the whole signal."""
    x = _padded(np.asarray(audio, dtype=np.float32), tail)
    n_frames = (x.size - N_FFT) // HOP_LENGTH  # the last STFT frame is dropped
    blocks = []
    # Blocks of equal size: a block of a few frames would take BLAS's matrix-vector path, off by an ulp.
    size = -(-n_frames // -(-n_frames // BLOCK_FRAMES)) if n_frames else 1
    for first in range(0, n_frames, size):
        count = min(size, n_frames - first)
        # One extra frame per block, dropped after the FFT as the whole-signal pass drops its last frame.
        span = mx.array(x[first * HOP_LENGTH : (first + count) * HOP_LENGTH + N_FFT])
        frames = mx.as_strided(span, (count + 1, N_FFT), (HOP_LENGTH, 1))
        spectrum = mx.fft.rfft(frames * _hann(), axis=-1)[:-1]
        power = mx.abs(spectrum).square()
        mel = power @ mel_filters(n_mels)
        block = mx.log10(mx.maximum(mel, 1e-10))
        mx.eval(block)
        blocks.append(block)
    log_spec = mx.concatenate(blocks) if len(blocks) > 1 else blocks[0]
    log_spec = mx.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def _padded(audio: np.ndarray, tail: int) -> np.ndarray:
    """``tail`` zeros at the end (and more when the audio is shorter than the reflection), then reflect padding of
    n_fft/2 each side, written into one array: an hour of audio is copied once, not three times."""
    pad = N_FFT // 2
    n = max(audio.size + tail, pad + 1)
    x = np.zeros(n + 2 * pad, np.float32)
    x[pad : pad + audio.size] = audio
    x[:pad] = x[2 * pad : pad : -1]
    x[pad + n :] = x[pad + n - 2 : n - 2 : -1]
    return x
