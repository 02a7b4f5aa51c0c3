"""Audio files in any container/codec ffmpeg reads, decoded with PyAV to 16 kHz mono float32 (soxr resampling)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import BinaryIO

import av
import numpy as np
import soxr

SAMPLE_RATE = 16000


class AudioDecodeError(Exception):
    """The input is empty, truncated, corrupt or not audio. The message is safe to show to a client."""


def decode_audio(source: str | Path | bytes | BinaryIO, max_seconds: float | None = None) -> np.ndarray:
    """Decodes, down-mixes and resamples to 16 kHz mono float32 in [-1, 1]. ``max_seconds`` stops decoding
    early (raising) so a huge upload never becomes a huge array."""
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
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        raise AudioDecodeError("the file is not a recognised audio format") from exc
    with container:
        if not container.streams.audio:
            raise AudioDecodeError("the file has no audio stream")
        stream = container.streams.audio[0]
        rate = stream.codec_context.sample_rate or stream.rate
        if not rate:
            raise AudioDecodeError("the audio stream has no sample rate")
        chunks = _decode_frames(container, stream, rate, max_seconds)
    if not chunks:
        raise AudioDecodeError("the file contains no decodable audio")
    mono = np.concatenate(chunks)
    if rate != SAMPLE_RATE:
        mono = soxr.resample(mono, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    if not np.all(np.isfinite(mono)):
        raise AudioDecodeError("the audio contains non-finite samples")
    return np.clip(mono, -1.0, 1.0)


def _decode_frames(container: av.container.InputContainer, stream: av.AudioStream, rate: int, max_seconds: float | None) -> list[np.ndarray]:
    chunks: list[np.ndarray] = []
    total = 0
    limit = None if max_seconds is None else int(max_seconds * rate) + 1
    try:
        for frame in container.decode(stream):
            chunk = _to_mono(frame)
            chunks.append(chunk)
            total += len(chunk)
            if limit is not None and total > limit:
                raise AudioDecodeError(f"the audio is longer than the {max_seconds:g} s limit")
    except av.error.FFmpegError as exc:
        if not chunks:
            raise AudioDecodeError("the audio data is corrupt or truncated") from exc
        # A damaged tail after good audio: keep what decoded, as ffmpeg does.
    return chunks


def _to_mono(frame: av.AudioFrame) -> np.ndarray:
    data = frame.to_ndarray()
    fmt = frame.format
    channels = len(frame.layout.channels)
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
