"""NeMo's log-mel front end (``FilterbankFeatures``), in numpy: pre-emphasis 0.97, a symmetric Hann window of 400
samples centred in 512, 256 zeros of centre padding each side (not reflect), power spectrum, Slaney mel filters,
``log(mel + 2^-24)``; then no normalisation (Sortformer v2/v2.1) or per-feature normalisation (Parakeet); no dither,
no gain (inference); samples past +-1e6 clipped.

Two frame rules, both kept (they are two modes, not a bug to fix): NeMo's model uses ``n // 160`` frames (the STFT's
last frame is masked away); the reference server's per-feed front end keeps all ``1 + n // 160``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from omnid.engine.errors import CheckpointError
from omnid.engine.logmel import slaney_filterbank

LOG_GUARD = 2.0**-24
# Samples are held within +-MAX_SAMPLE before the front end: finite but extreme samples (1e30, float32's 3.4e38)
# overflow its float32 power spectrum to infinity, and a stream's state would turn NaN for good. Real audio never
# comes near (full scale is 1; int16-scaled floats reach 32768), so every result on real audio is unchanged.
MAX_SAMPLE = 1.0e6
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
    normalize: str = "NA"  # or "per_feature": each mel bin to zero mean and unit deviation over the clip's frames


@lru_cache(maxsize=4)
def window(front: FrontEnd) -> np.ndarray:
    """torch.hann_window(win_length, periodic=False), zero-padded to n_fft and centred, as torch.stft does."""
    n = np.arange(front.win_length, dtype=np.float64)
    hann = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / (front.win_length - 1))
    left = (front.n_fft - front.win_length) // 2
    out = np.zeros(front.n_fft, np.float64)
    out[left : left + front.win_length] = hann
    return out.astype(np.float32)


@lru_cache(maxsize=4)
def mel_filterbank(front: FrontEnd) -> np.ndarray:
    """librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr/2, norm="slaney") in float32, shape
    (n_mels, n_fft//2 + 1): the filterbank NeMo stores in a .nemo."""
    return slaney_filterbank(front.n_fft, front.n_mels, front.sample_rate).astype(np.float32)


def log_mel(audio: np.ndarray, front: FrontEnd, keep_last: bool = False) -> np.ndarray:
    """16 kHz mono float32 -> (frames, n_mels) float32. ``keep_last``: all ``1 + n // hop`` STFT frames (the
    reference server's feed mode); else ``n // hop`` (NeMo's model)."""
    x = np.asarray(audio, np.float32)
    n = len(x)
    x = _preemphasis(_clipped(x), front, None)
    half = front.n_fft // 2
    padded = np.concatenate([np.zeros(half, np.float32), x, np.zeros(half, np.float32)])
    frames_total = 1 + n // front.hop_length
    keep = frames_total if keep_last else n // front.hop_length
    out = np.empty((keep, front.n_mels), np.float32)
    for first in range(0, keep, BLOCK_FRAMES):
        count = min(BLOCK_FRAMES, keep - first)
        out[first : first + count] = _frames(padded[first * front.hop_length :], count, front)
    if front.normalize == "per_feature":
        _per_feature(out)
    return out


def _clipped(x: np.ndarray) -> np.ndarray:
    return np.clip(x, -MAX_SAMPLE, MAX_SAMPLE) if len(x) and float(np.abs(x).max()) > MAX_SAMPLE else x


def _preemphasis(x: np.ndarray, front: FrontEnd, before: np.float32 | None) -> np.ndarray:
    """x[i] - preemph * x[i - 1]; the first sample as it is, or after ``before`` (the sample before it)."""
    if not len(x):
        return x
    a = np.float32(front.preemph)
    first = x[:1] if before is None else x[:1] - a * before
    return np.concatenate([first, x[1:] - a * x[:-1]])


def _frames(padded: np.ndarray, count: int, front: FrontEnd) -> np.ndarray:
    """``count`` log-mel frames from centre-padded, pre-emphasised samples starting at the first one's window."""
    span = padded[: (count - 1) * front.hop_length + front.n_fft]
    frames = np.lib.stride_tricks.sliding_window_view(span, front.n_fft)[:: front.hop_length]
    spectrum = np.fft.rfft(frames * window(front), axis=-1)
    power = spectrum.real.astype(np.float32) ** 2 + spectrum.imag.astype(np.float32) ** 2
    return np.log(power @ _filterbank_t(front) + np.float32(LOG_GUARD))


@lru_cache(maxsize=4)
def _filterbank_t(front: FrontEnd) -> np.ndarray:
    return np.ascontiguousarray(mel_filterbank(front).T)


class MelStream:
    """NeMo's unnormalised log-mel of a growing signal (its model's ``n // hop`` frames, or with ``keep_last`` all
    ``1 + n // hop`` STFT frames, as the reference server's streams take them). Frame i is centred on
    sample i * hop; it is final once the samples up to i * hop + n_fft / 2 have come (``ready``), and ``take`` computes
    frames only then, in the blocks it is asked for: the same blocks give the same numbers however the samples were
    split. ``finish`` declares the end: the frames left, up to n // hop, see the zero padding after the last
    sample. Holds the pre-emphasised samples from the next frame's window on: less than a block's worth."""

    def __init__(self, front: FrontEnd, keep_last: bool = False):
        if front.normalize != "NA":
            raise ValueError("a streamed log-mel cannot be normalised over the whole signal")
        self.front = front
        self.keep_last = keep_last
        self.samples = 0  # samples pushed
        self.done = 0  # frames taken
        self.finished = False
        self._buffer = np.zeros(front.n_fft // 2, np.float32)  # from the next frame's window start (padding first)
        self._pending: list[np.ndarray] = []  # pushed since the last take, joined then (a push copies nothing)
        self._last: np.float32 | None = None  # the last raw sample (pre-emphasis)

    def push(self, audio: np.ndarray) -> None:
        if self.finished:
            raise ValueError("the stream is finished")
        x = _clipped(np.asarray(audio, np.float32))
        if not len(x):
            return
        self._pending.append(_preemphasis(x, self.front, self._last))
        self._last = x[-1]
        self.samples += len(x)

    def finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._pending.append(np.zeros(self.front.n_fft // 2, np.float32))

    @property
    def total(self) -> int | None:
        """All the frames there will be, once finished."""
        return frames(self.samples, self.front, self.keep_last) if self.finished else None

    def ready(self) -> int:
        """Frames final and not yet taken."""
        if self.finished:
            return frames(self.samples, self.front, self.keep_last) - self.done
        half, hop = self.front.n_fft // 2, self.front.hop_length
        final = (self.samples - half) // hop + 1 if self.samples >= half else 0
        return max(0, min(final, self.samples // hop) - self.done)

    def take(self, count: int) -> np.ndarray:
        """The next ``count`` frames (count <= ready()), (count, n_mels)."""
        if not 0 <= count <= self.ready():
            raise ValueError(f"{count} frames asked, {self.ready()} ready")
        if count == 0:
            return np.empty((0, self.front.n_mels), np.float32)
        if self._pending:
            self._buffer = np.concatenate([self._buffer, *self._pending])
            self._pending = []
        out = _frames(self._buffer, count, self.front)
        self.done += count
        self._buffer = self._buffer[count * self.front.hop_length :].copy()
        return out


# NeMo adds this to each bin's standard deviation (and a single frame's, which it takes as 0).
STD_GUARD = 1e-5


def _per_feature(mel: np.ndarray) -> None:
    """NeMo's ``normalize_batch(..., "per_feature")`` in place: each bin's mean over the frames, its deviation with
    n - 1 (0 for a single frame), plus STD_GUARD; in float32 as NeMo computes it."""
    n = len(mel)
    if n == 0:
        return
    mean = mel.sum(axis=0, dtype=np.float32) / np.float32(n)
    centred = mel - mean
    std = np.sqrt((centred * centred).sum(axis=0, dtype=np.float32) / np.float32(n - 1)) if n > 1 else \
        np.zeros_like(mean)
    mel[:] = centred / (std + np.float32(STD_GUARD))


def frames(n_samples: int, front: FrontEnd, keep_last: bool = False) -> int:
    return 1 + n_samples // front.hop_length if keep_last else n_samples // front.hop_length


def check_buffers(buffers: dict[str, np.ndarray], front: FrontEnd, path: Path) -> None:
    """The .nemo's own window and filterbank against omnid's: a front end that differs fails loudly."""
    want = {"preprocessor.featurizer.window": window(front)[(front.n_fft - front.win_length) // 2 :][: front.win_length],
            "preprocessor.featurizer.fb": mel_filterbank(front)[None]}
    for name, ours in want.items():
        theirs = buffers.pop(name, None)
        if theirs is None:
            raise CheckpointError(f"{path}: missing tensor {name}")
        if theirs.shape != ours.shape:
            raise CheckpointError(f"{path}: tensor {name} has shape {theirs.shape}, expected {ours.shape}")
        diff = float(np.abs(theirs.astype(np.float64) - ours).max())
        if diff > 1e-6:
            raise CheckpointError(f"{path}: tensor {name} differs from omnid's front end by {diff:.3g} (max 1e-6)")
    if buffers:
        raise CheckpointError(f"{path}: unexpected tensor {sorted(buffers)[0]}")
