"""NeMo's front end for Sortformer v2/v2.1 (``FilterbankFeatures``), in numpy: pre-emphasis 0.97, a symmetric
Hann window of 400 samples centred in 512, 256 zeros of centre padding each side (not reflect), power spectrum,
Slaney mel filters, ``log(mel + 2^-24)``; no normalisation, no dither, no gain.

Two frame rules, both kept (they are two modes, not a bug to fix): NeMo's model uses ``n // 160`` frames (the STFT's
last frame is masked away); the reference server's per-feed front end keeps all ``1 + n // 160``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

LOG_GUARD = 2.0**-24
# STFT frames per block: bounds the temporaries (frames x n_fft floats) whatever the audio's length.
BLOCK_FRAMES = 4096


@dataclass(frozen=True)
class FrontEnd:
    sample_rate: int = 16000
    n_mels: int = 128
    n_fft: int = 512
    win_length: int = 400
    hop_length: int = 160
    preemph: float = 0.97


@lru_cache(maxsize=4)
def window(front: FrontEnd) -> np.ndarray:
    """torch.hann_window(win_length, periodic=False), zero-padded to n_fft and centred, as torch.stft does."""
    n = np.arange(front.win_length, dtype=np.float64)
    hann = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / (front.win_length - 1))
    left = (front.n_fft - front.win_length) // 2
    out = np.zeros(front.n_fft, np.float64)
    out[left : left + front.win_length] = hann
    return out.astype(np.float32)


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    mels = f / f_sp
    return np.where(f >= min_log_hz, min_log_hz / f_sp + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, mels)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, np.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


@lru_cache(maxsize=4)
def mel_filterbank(front: FrontEnd) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, norm="slaney"), shape (n_mels, n_fft//2 + 1)."""
    fftfreqs = np.fft.rfftfreq(front.n_fft, 1.0 / front.sample_rate)
    mel_f = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(front.sample_rate / 2.0)),
                                   front.n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper)).astype(np.float32)
    weights *= (2.0 / (mel_f[2 : front.n_mels + 2] - mel_f[: front.n_mels]))[:, None].astype(np.float32)
    return weights


def log_mel(audio: np.ndarray, front: FrontEnd, keep_last: bool = False) -> np.ndarray:
    """16 kHz mono float32 -> (frames, n_mels) float32. ``keep_last``: all ``1 + n // hop`` STFT frames (the
    reference server's feed mode); else ``n // hop`` (NeMo's model)."""
    x = np.asarray(audio, np.float32)
    n = len(x)
    if n:
        x = np.concatenate([x[:1], x[1:] - np.float32(front.preemph) * x[:-1]])
    half = front.n_fft // 2
    padded = np.concatenate([np.zeros(half, np.float32), x, np.zeros(half, np.float32)])
    frames_total = 1 + n // front.hop_length
    keep = frames_total if keep_last else n // front.hop_length
    win = window(front)
    fb_t = np.ascontiguousarray(mel_filterbank(front).T)
    out = np.empty((keep, front.n_mels), np.float32)
    for first in range(0, keep, BLOCK_FRAMES):
        count = min(BLOCK_FRAMES, keep - first)
        span = padded[first * front.hop_length : (first + count - 1) * front.hop_length + front.n_fft]
        frames = np.lib.stride_tricks.sliding_window_view(span, front.n_fft)[:: front.hop_length]
        spectrum = np.fft.rfft(frames * win, axis=-1)
        power = spectrum.real.astype(np.float32) ** 2 + spectrum.imag.astype(np.float32) ** 2
        out[first : first + count] = np.log(power @ fb_t + np.float32(LOG_GUARD))
    return out


def frames(n_samples: int, front: FrontEnd, keep_last: bool = False) -> int:
    return 1 + n_samples // front.hop_length if keep_last else n_samples // front.hop_length
