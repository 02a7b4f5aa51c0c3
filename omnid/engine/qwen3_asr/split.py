"""Long audio cut as the official package cuts it (qwen_asr inference/utils.py split_audio_into_chunks): near every
multiple of the chunk length, at the quietest 100 ms within a few seconds of it, so that no word is cut in two.
Concatenating the chunks gives back the audio exactly; a chunk under 0.5 s is zero-padded (only when a cut was made)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from omnid.audio import SAMPLE_RATE

MIN_CHUNK_S = 0.5
ENERGY_WINDOW_S = 0.1


def split_long_audio(audio: np.ndarray, max_chunk_s: float, search_s: float) -> Iterator[tuple[int, np.ndarray]]:
    """(first sample, samples) of each chunk, in order."""
    total = len(audio)
    max_len = int(max_chunk_s * SAMPLE_RATE)
    if total <= max_len:
        yield 0, audio
        return
    expand = int(search_s * SAMPLE_RATE)
    win = max(4, int(ENERGY_WINDOW_S * SAMPLE_RATE))
    min_len = int(MIN_CHUNK_S * SAMPLE_RATE)
    start = 0
    while total - start > max_len:
        cut = start + max_len
        left, right = max(start, cut - expand), min(total, cut + expand)
        if right - left <= win:
            boundary = cut
        else:
            level = np.abs(audio[left:right])
            sums = np.convolve(level, np.ones(win, dtype=np.float32), mode="valid")
            quiet = int(np.argmin(sums))
            boundary = left + quiet + int(np.argmin(level[quiet : quiet + win]))
        boundary = min(max(boundary, start + 1), total)
        yield start, _padded(audio[start:boundary], min_len)
        start = boundary
    yield start, _padded(audio[start:], min_len)


def _padded(chunk: np.ndarray, min_len: int) -> np.ndarray:
    return chunk if len(chunk) >= min_len else np.concatenate([chunk, np.zeros(min_len - len(chunk), chunk.dtype)])
