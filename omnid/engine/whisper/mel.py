"""Whisper's window on the shared log-mel front end: 30 s, 3000 frames."""

from __future__ import annotations

from omnid.audio import SAMPLE_RATE
from omnid.engine.logmel import FRAMES_PER_SECOND, HOP_LENGTH, log_mel_spectrogram

CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 frames in a 30 s window

__all__ = ["CHUNK_SECONDS", "FRAMES_PER_SECOND", "N_FRAMES", "N_SAMPLES", "SAMPLE_RATE", "log_mel_spectrogram"]
