"""FunASR's ``WavFrontend`` (funasr 1.4.16, ``frontends/wav_frontend.py``): Kaldi filterbank features, low-frame-rate
stacking and the model's mean/variance normalisation, in numpy.

- **Filterbank** as Kaldi computes it (``compliance.kaldi.fbank``, kaldi-native-fbank): the samples scaled to int16
  units (x 32768); frames of 25 ms every 10 ms with snip_edges (1 + (N - 400) // 160 frames; audio shorter than
  25 ms gets one frame as long as the audio, as funasr shortens ``frame_length``); per frame the DC offset removed,
  pre-emphasis 0.97 (the first sample against itself), a Hamming window, the FFT's power spectrum (padded to a power
  of two); 80 triangular mel bins (1127 ln(1 + f / 700), 20 Hz to Nyquist) over the FFT bins below Nyquist; the log
  floored at float32's epsilon. **No dither**: funasr dithers by default (Gaussian noise of std 1 in int16 units,
  ``dither=1.0``), which makes its own features random; omnid adds none.
- **Low frame rate** (LFR): each output frame is 7 input frames stacked (oldest first) every 6, ceil(T / 6) of
  them, with 3 copies of the first frame in front and copies of the last one at the end as needed.
- **CMVN**: ``(x + shift) * scale`` after stacking, the model's ``am.mvn`` giving ``shift`` (the negated means) and
  ``scale`` (the inverse deviations) per stacked dimension.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.engine.errors import CheckpointError

INT16_SCALE = 32768.0  # funasr's upsacle_samples: float samples to int16 units
PREEMPHASIS = 0.97
LOG_FLOOR = float(np.finfo(np.float32).eps)


@dataclass(frozen=True)
class FrontEnd:
    """The config's ``frontend_conf`` (funasr's names in comments) and the model's normalisation."""

    shift: np.ndarray  # am.mvn's <AddShift>, (n_mels * lfr_m,)
    scale: np.ndarray  # am.mvn's <Rescale>
    n_mels: int = 80  # n_mels
    frame_ms: float = 25.0  # frame_length
    hop_ms: float = 10.0  # frame_shift
    lfr_m: int = 7  # frames stacked
    lfr_n: int = 6  # every lfr_n frames

    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> (ceil(T / lfr_n), n_mels * lfr_m) float32, T the filterbank's frames."""
        stacked = stack_frames(fbank(audio, self.n_mels, self.frame_ms, self.hop_ms), self.lfr_m, self.lfr_n)
        return ((stacked + self.shift) * self.scale).astype(np.float32)


def fbank(audio: np.ndarray, n_mels: int = 80, frame_ms: float = 25.0, hop_ms: float = 10.0) -> np.ndarray:
    """Kaldi's log mel filterbank (see the module docstring) of 16 kHz float samples -> (frames, n_mels) float32;
    (0, n_mels) for no samples."""
    x = np.asarray(audio, np.float64) * INT16_SCALE
    # funasr's frame_length = min(25 ms, the audio's length), then Kaldi's window of int(rate * ms / 1000) samples
    window_ms = min(frame_ms, len(x) / SAMPLE_RATE * 1000)
    size, hop = int(SAMPLE_RATE * 0.001 * window_ms), int(SAMPLE_RATE * 0.001 * hop_ms)
    if size < 1 or len(x) < size:
        return np.zeros((0, n_mels), np.float32)
    count = 1 + (len(x) - size) // hop
    frames = np.lib.stride_tricks.as_strided(x, (count, size), (x.strides[0] * hop, x.strides[0])).copy()
    frames -= frames.mean(axis=1, keepdims=True)
    frames[:, 1:] -= PREEMPHASIS * frames[:, :-1].copy()
    frames[:, 0] *= 1.0 - PREEMPHASIS
    frames *= _hamming(size)
    n_fft = 1 << (size - 1).bit_length()
    power = np.abs(np.fft.rfft(frames, n=n_fft)) ** 2
    energies = power[:, : n_fft // 2] @ _mel_banks(n_mels, n_fft).T
    return np.log(np.maximum(energies, LOG_FLOOR)).astype(np.float32)


@lru_cache(maxsize=8)
def _hamming(size: int) -> np.ndarray:
    return 0.54 - 0.46 * np.cos(2 * math.pi * np.arange(size) / (size - 1)) if size > 1 else np.ones(1)


def _mel(freq: np.ndarray | float) -> np.ndarray | float:
    return 1127.0 * np.log(1.0 + np.asarray(freq) / 700.0)


@lru_cache(maxsize=8)
def _mel_banks(n_mels: int, n_fft: int, low_hz: float = 20.0) -> np.ndarray:
    """Kaldi's triangular filters over the FFT bins below Nyquist: (n_mels, n_fft // 2)."""
    low, high = float(_mel(low_hz)), float(_mel(SAMPLE_RATE / 2))
    delta = (high - low) / (n_mels + 1)
    mels = _mel(np.arange(n_fft // 2) * (SAMPLE_RATE / n_fft))
    left = low + np.arange(n_mels)[:, None] * delta
    center, right = left + delta, left + 2 * delta
    rising, falling = (mels - left) / (center - left), (right - mels) / (right - center)
    weights = np.where(mels <= center, rising, falling)
    return np.where((mels > left) & (mels < right), weights, 0.0)


def stack_frames(feats: np.ndarray, m: int = 7, n: int = 6) -> np.ndarray:
    """funasr's apply_lfr: (T, d) -> (ceil(T / n), m * d): frame i stacks padded frames n i ... n i + m - 1, the
    padding (m - 1) // 2 copies of the first frame in front and copies of the last frame at the end."""
    t, d = feats.shape
    if t == 0:
        return np.zeros((0, m * d), feats.dtype)
    out_frames = -(-t // n)
    front = (m - 1) // 2
    need = (out_frames - 1) * n + m  # padded frames the last output reads
    index = np.clip(np.arange(need) - front, 0, t - 1)
    padded = feats[index]
    rows = np.arange(out_frames)[:, None] * n + np.arange(m)[None, :]
    return padded[rows].reshape(out_frames, m * d)


def read_cmvn(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """am.mvn (Kaldi's nnet text format) -> (shift, scale): the vectors on the lines after <AddShift> and
    <Rescale>, between ``[`` and ``]``."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from exc
    found: dict[str, np.ndarray] = {}
    for i, line in enumerate(lines[:-1]):
        key = line.split()[0] if line.split() else ""
        if key in ("<AddShift>", "<Rescale>"):
            body = lines[i + 1]
            if "[" not in body or "]" not in body:
                raise CheckpointError(f"{path}: the line after {key} holds no [ ... ] vector")
            try:
                found[key] = np.array(body[body.index("[") + 1 : body.index("]")].split(), np.float32)
            except ValueError as exc:
                raise CheckpointError(f"{path}: {key}'s vector is not numbers") from exc
    for key in ("<AddShift>", "<Rescale>"):
        if key not in found:
            raise CheckpointError(f"{path}: no {key} vector (not a Kaldi am.mvn)")
    shift, scale = found["<AddShift>"], found["<Rescale>"]
    if len(shift) != len(scale):
        raise CheckpointError(f"{path}: <AddShift> has {len(shift)} values, <Rescale> {len(scale)}")
    return shift, scale
