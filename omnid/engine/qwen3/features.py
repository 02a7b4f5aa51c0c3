"""The audio the network's encoder reads, prepared as the official package prepares it for either kind."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from omnid.engine.logmel import N_FFT, log_mel_spectrogram


def features_mel(audio: np.ndarray, n_mels: int) -> mx.array:
    """(frames, n_mels) log-mel as Hugging Face's WhisperFeatureExtractor computes it: N // 160 frames."""
    audio = np.asarray(audio, dtype=np.float32)
    if audio.size < N_FFT:  # the reflect padding needs at least this much
        audio = np.concatenate([audio, np.zeros(N_FFT - audio.size, np.float32)])
    return log_mel_spectrogram(audio, n_mels, tail=0)


def normalized(audio: np.ndarray) -> np.ndarray:
    """Float samples as the official loader leaves them: divided by the peak when it is over 1."""
    audio = np.asarray(audio, dtype=np.float32)
    peak = float(np.abs(audio).max()) if audio.size else 0.0
    return audio / peak if peak > 1.0 else audio
