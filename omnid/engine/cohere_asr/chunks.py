"""Long audio as the official processor cuts it (transformers' ``CohereAsrFeatureExtractor`` and processor), and its
chunk texts joined as it joins them.

Audio up to 30 s (the 35 s window less its 5 s search) is one input. Longer audio is cut into chunks of at most
35 s: from each chunk's start, the cut is searched in the window's last 5 s, on a grid of 1600-sample windows from
``start + 30 s`` (those starting before the search span's last 1600 samples), the first window whose RMS (in float32)
is strictly the lowest wins, and the cut is its start; the rest of the audio, once no longer than 35 s, is the last
chunk. So 30 to 35 s takes the chunk path as one chunk. Every chunk is encoded alone (the official code batches
them, padded and masked: the same result) and decoded with up to ``chunks_together`` others (engine.py). Nothing
is cut at a model limit: the official code has no other window (the encoder's relative positions cover any length,
and the decoder's 1024 positions bound only the tokens), so no chunk is longer than 35 s and no audio is refused for
its length.

The chunk texts (each the official decode of prompt and tokens, with its leading space) are joined by dropping the
empty ones, right-stripping the first and stripping the others, and joining with a space, or with nothing where the
requested language is Japanese or Chinese.
"""

from __future__ import annotations

import numpy as np

from omnid.engine.cohere_asr.tokenizer import UNSPACED

SAMPLE_RATE = 16000
CHUNK_S = 35.0  # the feature extractor's max_audio_clip_s
SEARCH_S = 5.0  # its overlap_chunk_second: the end of each window searched for a cut
ENERGY_WINDOW = 1600  # its min_energy_window_samples


def chunk_spans(n: int, audio: np.ndarray | None = None) -> list[tuple[int, int]] | None:
    """The official chunks of ``n`` samples as (start, end) spans, or None where the audio is one input (30 s or
    less)."""
    chunk, search = int(CHUNK_S * SAMPLE_RATE), int(SEARCH_S * SAMPLE_RATE)
    if n <= chunk - search:
        return None
    assert audio is not None and len(audio) == n
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n:
        if start + chunk >= n:
            spans.append((start, n))
            break
        cut = quietest(audio, start + chunk - search, min(start + chunk, n))
        spans.append((start, cut))
        start = cut
    return spans


def quietest(audio: np.ndarray, first: int, last: int) -> int:
    """The start of the first window of lowest RMS among those on the grid from ``first`` that start before
    ``last - ENERGY_WINDOW``; the middle of the span where it holds no whole window."""
    segment = np.asarray(audio[first:last], np.float32)
    if len(segment) <= ENERGY_WINDOW:
        return (first + last) // 2
    starts = range(0, len(segment) - ENERGY_WINDOW, ENERGY_WINDOW)
    best, best_rms = first, np.float32(np.inf)
    for i in starts:
        window = segment[i : i + ENERGY_WINDOW]
        rms = np.sqrt(np.mean(window * window, dtype=np.float32))
        if rms < best_rms:
            best, best_rms = first + i, rms
    return best


def join_texts(texts: list[str], language: str) -> str:
    """The official reassembly of chunk texts ("" where every chunk is empty: the official code raises there)."""
    kept = [t for t in texts if t.strip()]
    if not kept:
        return ""
    separator = "" if language in UNSPACED else " "
    return separator.join([kept[0].rstrip(), *(t.strip() for t in kept[1:])])
