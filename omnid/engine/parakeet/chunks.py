"""Long audio as the reference server cuts it for Parakeet: chunks of at most ``max_chunk_s`` (120 s), each cut at
the middle of the quietest 100 ms window in the ``search_s`` (2 s) before its boundary, so that a word is rarely cut;
a chunk whose peak stays under SILENT_PEAK (-60 dBFS) holds no speech and is not decoded (decoding silence can emit
tokens)."""

from __future__ import annotations

import numpy as np

from omnid.audio import SAMPLE_RATE

ENERGY_WINDOW = SAMPLE_RATE // 10
SILENT_PEAK = 1e-3


def chunk_spans(audio: np.ndarray, max_chunk_s: float, search_s: float) -> list[tuple[int, int]]:
    """Half-open sample spans covering the audio, in order."""
    chunk, search = int(max_chunk_s * SAMPLE_RATE), int(search_s * SAMPLE_RATE)
    spans: list[tuple[int, int]] = []
    start = 0
    while len(audio) - start > chunk:
        boundary = start + chunk
        region = audio[boundary - search : boundary].astype(np.float64)
        windows = len(region) // ENERGY_WINDOW
        energy = np.square(region[: windows * ENERGY_WINDOW].reshape(windows, ENERGY_WINDOW)).mean(axis=1)
        cut = boundary - search + int(np.argmin(energy)) * ENERGY_WINDOW + ENERGY_WINDOW // 2
        spans.append((start, cut))
        start = cut
    spans.append((start, len(audio)))
    return spans


def silent(samples: np.ndarray) -> bool:
    return len(samples) == 0 or float(np.abs(samples).max()) < SILENT_PEAK
