"""A realtime session's audio: PCM16 in at the client's rate, 16 kHz float32 out, bounded whatever the session's
length. Only audio not yet consumed is kept; positions stay absolute (samples since the session began), so
events can name times in the whole stream while memory holds only the open segment."""

from __future__ import annotations

import base64
import binascii

import numpy as np
import soxr

from omnid.audio import SAMPLE_RATE


class InvalidAudio(ValueError):
    """Not base64 PCM16: the session goes on (recoverable error ``invalid_audio``)."""


class BufferOverflow(Exception):
    """More undecoded audio than the configured backlog (terminal error ``buffer_overflow``)."""


def decode_pcm16(audio: object) -> np.ndarray:
    """Base64 little-endian PCM16 mono -> float32 in [-1, 1); rejects anything else with a reason."""
    if not isinstance(audio, str):
        raise InvalidAudio("audio must be a base64 string")
    if not audio:
        raise InvalidAudio("audio is empty")
    try:
        raw = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidAudio(f"audio is not valid base64: {exc}") from None
    if not raw:
        raise InvalidAudio("audio is empty")
    if len(raw) % 2:
        raise InvalidAudio(f"audio has an odd byte count ({len(raw)}); PCM16 samples are 2 bytes")
    return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0


class AudioBuffer:
    def __init__(self, input_rate: int, max_backlog_s: float):
        if input_rate <= 0:
            raise ValueError("input_rate must be positive")
        self.input_rate = input_rate
        self.max_backlog = int(max_backlog_s * SAMPLE_RATE)
        self._resampler = (
            soxr.ResampleStream(input_rate, SAMPLE_RATE, 1, dtype="float32") if input_rate != SAMPLE_RATE else None
        )
        self._data = np.zeros(0, np.float32)
        self.start = 0  # absolute 16 kHz sample index of _data[0]

    @property
    def end(self) -> int:
        """Absolute index one past the newest sample."""
        return self.start + len(self._data)

    @property
    def backlog(self) -> int:
        return len(self._data)

    def append(self, samples: np.ndarray) -> np.ndarray:
        """Adds input-rate samples; returns the new 16 kHz samples. Refuses to grow past the backlog cap."""
        new = self._resampler.resample_chunk(samples) if self._resampler is not None else samples.astype(np.float32)
        if len(self._data) + len(new) > self.max_backlog:
            raise BufferOverflow(
                f"more than {self.max_backlog / SAMPLE_RATE:g} s of audio is waiting to be transcribed"
            )
        self._data = np.concatenate([self._data, new])
        return new

    def flush(self) -> np.ndarray:
        """Drains the resampler's delay line (at a commit), so the segment's last samples are not held back."""
        if self._resampler is None:
            return np.zeros(0, np.float32)
        tail = self._resampler.resample_chunk(np.zeros(0, np.float32), last=True)
        self._resampler = soxr.ResampleStream(self.input_rate, SAMPLE_RATE, 1, dtype="float32")
        self._data = np.concatenate([self._data, tail])
        return tail

    def view(self, begin: int, end: int | None = None) -> np.ndarray:
        """Samples between absolute positions (clamped to what is kept)."""
        lo = max(begin, self.start) - self.start
        hi = (self.end if end is None else min(end, self.end)) - self.start
        return self._data[lo:max(lo, hi)]

    def consume(self, up_to: int) -> None:
        """Forgets everything before an absolute position: consumed audio costs no memory."""
        cut = min(max(up_to, self.start), self.end) - self.start
        if cut:
            self._data = self._data[cut:].copy()
            self.start += cut
