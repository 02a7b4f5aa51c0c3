"""Audio files in any container/codec ffmpeg reads, decoded with PyAV to 16 kHz mono float32 (soxr resampling).

Decoding is streamed: every decoded frame is down-mixed and resampled to 16 kHz at once, and decoding stops as
soon as the output passes the length cap. So memory follows the audio actually accepted (64 kB a second), never
what a file claims or how well it compresses (an hour of silence fits in a few hundred bytes of FLAC).
"""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import BinaryIO

import av
import numpy as np
import soxr

SAMPLE_RATE = 16000
# Sample rates a decoded stream may have; anything else is a damaged or hostile header.
MIN_INPUT_RATE = 1000
MAX_INPUT_RATE = 768000


class AudioDecodeError(Exception):
    """The input is empty, truncated, corrupt or not audio. The message is safe to show to a client."""


class AudioTooLong(AudioDecodeError):
    """The decoded audio passed the length cap; decoding stopped there."""


def decode_audio(source: str | Path | bytes | BinaryIO, max_seconds: float | None = None) -> np.ndarray:
    """Decodes, down-mixes and resamples to 16 kHz mono float32 in [-1, 1]. ``max_seconds`` stops decoding
    as soon as the output is longer (raising AudioTooLong), so a huge upload never becomes a huge array."""
    if isinstance(source, bytes):
        if not source:
            raise AudioDecodeError("the file is empty")
        source = io.BytesIO(source)
    elif isinstance(source, (str, Path)) and Path(source).is_file() and Path(source).stat().st_size == 0:
        raise AudioDecodeError("the file is empty")
    try:
        container = av.open(source if not isinstance(source, Path) else str(source), mode="r")
    except FileNotFoundError as exc:
        raise AudioDecodeError(f"no such file: {source}") from exc
    except Exception as exc:  # noqa: BLE001  (whatever a damaged header makes FFmpeg or PyAV raise)
        raise AudioDecodeError("the file is not a recognised audio format") from exc
    try:
        with container:
            return _decode(container, max_seconds)
    except AudioDecodeError:
        raise
    except Exception as exc:  # noqa: BLE001  (a header PyAV accepted but cannot describe, e.g. 0-bit samples)
        raise AudioDecodeError("the audio stream is malformed") from exc


def _decode(container: av.container.InputContainer, max_seconds: float | None) -> np.ndarray:
    if not container.streams.audio:
        raise AudioDecodeError("the file has no audio stream")
    stream = container.streams.audio[0]
    codec = stream.codec_context
    if codec is None:
        raise AudioDecodeError("the audio stream's codec is not supported")
    rate = codec.sample_rate or stream.rate
    if not rate:
        raise AudioDecodeError("the audio stream has no sample rate")
    if not MIN_INPUT_RATE <= rate <= MAX_INPUT_RATE:
        raise AudioDecodeError(f"the audio stream's sample rate ({rate} Hz) is outside {MIN_INPUT_RATE}-{MAX_INPUT_RATE} Hz")
    out = _Output(rate, max_seconds)
    try:
        for frame in container.decode(stream):
            out.add(_to_mono(frame))
    except av.error.FFmpegError as exc:
        if not out.total:
            raise AudioDecodeError("the audio data is corrupt or truncated") from exc
        # A damaged tail after good audio: keep what decoded, as ffmpeg does.
    return out.finish()


class _Output:
    """16 kHz output of a streaming resampler, with the length cap checked after every decoded frame.

    Samples collect in fixed blocks of BLOCK_SAMPLES (each its own allocation, handed back to the OS when freed),
    so the final copy into one array needs the audio's size plus one block, not twice the audio."""

    BLOCK_SAMPLES = 1 << 18  # 16 s, 1 MiB

    def __init__(self, rate: int, max_seconds: float | None):
        self.resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ") if rate != SAMPLE_RATE else None
        self.limit = None if max_seconds is None else int(max_seconds * SAMPLE_RATE)
        self.max_seconds = max_seconds
        self.blocks: list[np.ndarray] = []
        self.total = 0

    def add(self, samples: np.ndarray, last: bool = False) -> None:
        if self.resampler is not None:
            samples = self.resampler.resample_chunk(samples, last=last)
        if not np.all(np.isfinite(samples)):
            raise AudioDecodeError("the audio contains non-finite samples")
        if self.limit is not None and self.total + len(samples) > self.limit:
            raise AudioTooLong(f"the audio is longer than the {self.max_seconds:g} s limit")
        samples = np.clip(samples, -1.0, 1.0)
        while len(samples):
            used = self.total % self.BLOCK_SAMPLES
            if used == 0:
                self.blocks.append(np.empty(self.BLOCK_SAMPLES, np.float32))
            n = min(len(samples), self.BLOCK_SAMPLES - used)
            self.blocks[-1][used : used + n] = samples[:n]
            samples = samples[n:]
            self.total += n

    def finish(self) -> np.ndarray:
        if self.resampler is not None and self.total:
            self.add(np.zeros(0, np.float32), last=True)
        if not self.total:
            raise AudioDecodeError("the file contains no decodable audio")
        audio = np.empty(self.total, np.float32)
        while self.blocks:  # last block first, each freed once copied
            start = (len(self.blocks) - 1) * self.BLOCK_SAMPLES
            audio[start : start + self.BLOCK_SAMPLES] = self.blocks.pop()[: self.total - start]
        return audio


def _to_mono(frame: av.AudioFrame) -> np.ndarray:
    data = frame.to_ndarray()
    fmt = frame.format
    channels = len(frame.layout.channels)
    if not channels:
        raise AudioDecodeError("the audio stream has no channels")
    if not fmt.is_planar:
        data = data.reshape(-1, channels).T
    data = data.astype(np.float32)
    if fmt.name.startswith("s16"):
        data /= 32768.0
    elif fmt.name.startswith("s32"):
        data /= 2147483648.0
    elif fmt.name.startswith("u8"):
        data = (data - 128.0) / 128.0
    elif fmt.name.startswith("s64"):
        data /= 9.223372036854775808e18
    return data.mean(axis=0) if data.shape[0] > 1 else data[0]


def pcm16(samples: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as little-endian 16-bit PCM (rounded, clipped): what /v1/realtime carries."""
    return np.clip(np.round(np.asarray(samples, np.float64) * 32768), -32768, 32767).astype("<i2").tobytes()


def wav_bytes(samples: np.ndarray, rate: int = SAMPLE_RATE, channels: int = 1) -> bytes:
    """A 16-bit PCM WAV file of float samples (interleaved when ``channels`` > 1)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16(samples))
    return buf.getvalue()
