"""Word timestamps from cross-attention: the alignment heads' attention over audio frames, smoothed and
normalised, aligned to the text tokens by dynamic time warping, then grouped into words."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from omnid.engine.transcript import Word
from omnid.engine.whisper.model import Whisper
from omnid.engine.whisper.tokenizer import WhisperTokenizer

TOKENS_PER_SECOND = 50  # encoder positions per second of audio
MEDIAN_WIDTH = 7
LEADING_PUNCTUATION = "\"'“¿([{-"
TRAILING_PUNCTUATION = "\"'.。,，!！?？:：”)]}、"


def _median_filter(x: np.ndarray, width: int) -> np.ndarray:
    pad = width // 2
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1), axis=-1)


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Monotonic alignment path through ``cost`` (tokens x frames), as (token indices, frame indices)."""
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)
    acc[0, 0] = 0
    move = np.zeros((n + 1, m + 1), np.int8)  # 0 diagonal, 1 token step, 2 frame step
    for i in range(1, n + 1):
        row, prev = acc[i], acc[i - 1]
        for j in range(1, m + 1):
            d, up, left = prev[j - 1], prev[j], row[j - 1]
            if d <= up and d <= left:
                best, step = d, 0
            elif up <= left:
                best, step = up, 1
            else:
                best, step = left, 2
            row[j] = cost[i - 1, j - 1] + best
            move[i, j] = step
    i, j, path = n, m, []
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        step = int(move[i, j])
        if step == 0:
            i, j = i - 1, j - 1
        elif step == 1:
            i -= 1
        else:
            j -= 1
    path.reverse()
    tokens, frames = zip(*path)
    return np.array(tokens), np.array(frames)


def _split_words(tokenizer: WhisperTokenizer, tokens: list[int]) -> list[tuple[str, list[int]]]:
    """Tokens grouped into words: a token that starts with a space (or is punctuation) starts a new word."""
    words: list[tuple[str, list[int]]] = []
    for t in tokens:
        piece = tokenizer.decode([t])
        starts = piece.startswith(" ") or piece.strip() in TRAILING_PUNCTUATION and piece.strip() != ""
        if not words or (starts and words[-1][0].strip()):
            words.append((piece, [t]))
        else:
            text, ids = words[-1]
            words[-1] = (text + piece, ids + [t])
    return words


def word_timestamps(
    model: Whisper,
    tokenizer: WhisperTokenizer,
    features: mx.array,
    prompt: list[int],
    text_tokens: list[int],
    n_frames: int,
    alignment_heads: tuple[tuple[int, int], ...],
    offset: float,
) -> list[Word]:
    """Words of one window's text tokens, with absolute start/end times and mean token probability."""
    if not text_tokens:
        return []
    tokens = prompt + [tokenizer.no_timestamps] + text_tokens + [tokenizer.eot]
    weights = model.decoder.cross_attention(mx.array([tokens]), features)
    heads = alignment_heads or tuple((layer, h) for layer in range(len(weights) // 2, len(weights)) for h in range(weights[0].shape[1]))
    frames = max(1, min(n_frames // 2, features.shape[1]))
    w = np.stack([np.array(weights[layer][0, head, :, :frames]) for layer, head in heads])
    w = (w - w.mean(axis=-2, keepdims=True)) / (w.std(axis=-2, keepdims=True) + 1e-6)
    w = _median_filter(w, MEDIAN_WIDTH).mean(axis=0)
    # Row p attends while predicting token p + 1: rows from <|notimestamps|> to the last text token place the
    # n text tokens and the end of text.
    first = len(prompt) + 1
    matrix = w[first - 1 : first + len(text_tokens)]
    token_idx, frame_idx = dtw(-matrix)
    jumps = np.pad(np.diff(token_idx), (1, 0), constant_values=1).astype(bool)
    times = frame_idx[jumps] / TOKENS_PER_SECOND  # n + 1 boundaries
    starts, ends = times[:-1], times[1:]
    probs = _token_probabilities(model, features, tokens, first, len(text_tokens))
    words, pos = [], 0
    for text, ids in _split_words(tokenizer, text_tokens):
        k = len(ids)
        words.append(Word(text, round(offset + float(starts[pos]), 3), round(offset + float(ends[pos + k - 1]), 3),
                          round(float(np.mean(probs[pos : pos + k])), 4)))
        pos += k
    return _merge_punctuation(words)


def _token_probabilities(model: Whisper, features: mx.array, tokens: list[int], first: int, n: int) -> np.ndarray:
    hidden, _ = model.decoder(mx.array([tokens]), features)
    logits = model.decoder.logits(hidden[0, first - 1 : first - 1 + n])
    probs = mx.softmax(logits, axis=-1)
    return np.array(mx.take_along_axis(probs, mx.array(tokens[first : first + n])[:, None], axis=-1)[:, 0])


def _merge_punctuation(words: list[Word]) -> list[Word]:
    """Leading punctuation joins the next word, trailing punctuation the previous one."""
    merged: list[Word] = []
    carry = ""
    for w in words:
        stripped = w.word.strip()
        if stripped and all(c in TRAILING_PUNCTUATION for c in stripped) and merged:
            last = merged[-1]
            merged[-1] = Word(last.word + w.word, last.start, max(last.end, w.end), last.probability)
        elif stripped and all(c in LEADING_PUNCTUATION for c in stripped):
            carry += w.word
        else:
            merged.append(Word(carry + w.word if carry else w.word, w.start, w.end, w.probability))
            carry = ""
    return merged
