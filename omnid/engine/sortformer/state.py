"""A diarization stream's state and its update rules: pure array code, no network.

The Conformer sees ``[speaker cache | FIFO | chunk]``; after each step the chunk's pre-encoded frames join the
FIFO, the FIFO's oldest frames move to the speaker cache, and a cache that grows past its size is compressed by
AOSC (arrival-order speaker cache, Medennikov et al. 2025): per speaker, the frames where that speaker alone is
most clearly active are kept, plus silence slots filled with the running mean of silent frames.

Two update rules, because two systems define the numbers:

* :func:`nemo_update`, NeMo's ``streaming_update`` (the model's own code; the file route): chunks carry real mel
  context on both sides, at least one update period is popped, and cache predictions are frozen once compressed.
* :func:`feed_update`, the reference server's ``feed()`` (``/v1/diarization/stream``): a feed is one chunk with
  its left context taken from the FIFO, only the overflow is popped, and cache predictions are refreshed by every
  feed.

Exact ties at the top-k boundaries are common (a frame kept for two speakers is duplicated, and its copies score
alike), so the rule matters: NeMo mode keeps the lowest index among equal scores (a stable sort); feed mode calls
``mx.argpartition`` as the reference does, so ties fall as they fall there. Every array is bounded by the cache
and FIFO sizes: nothing grows with the stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from omnid.engine.sortformer.checkpoint import Streaming

TopK = Callable[[np.ndarray, int], np.ndarray]  # (rows, n) scores -> (rows, k) indices of the k largest per row


def stable_topk(scores: np.ndarray, k: int) -> np.ndarray:
    """The k largest per row; among equal scores the lower index wins (NeMo mode's stated rule)."""
    return np.argsort(-scores, axis=-1, kind="stable")[..., :k]


def mlx_topk(scores: np.ndarray, k: int) -> np.ndarray:
    """The reference's ``mx.argpartition(-scores, kth=k-1)[:k]``: its ties fall as MLX's partition leaves them."""
    return np.array(mx.argpartition(-mx.array(scores), kth=k - 1, axis=-1)[..., :k])


@dataclass
class StreamState:
    d_model: int
    n_spk: int
    spkcache: np.ndarray = field(init=False)  # (n, d_model) pre-encoded frames
    spkcache_preds: np.ndarray = field(init=False)  # (n, n_spk); NeMo mode: only once compressed
    fifo: np.ndarray = field(init=False)
    fifo_preds: np.ndarray = field(init=False)
    mean_sil_emb: np.ndarray = field(init=False)
    n_sil_frames: int = 0
    frames_processed: int = 0  # output frames so far
    compressed: bool = False  # NeMo mode: the cache has been compressed at least once
    compressions: int = 0

    def __post_init__(self) -> None:
        self.spkcache = np.zeros((0, self.d_model), np.float32)
        self.spkcache_preds = np.zeros((0, self.n_spk), np.float32)
        self.fifo = np.zeros((0, self.d_model), np.float32)
        self.fifo_preds = np.zeros((0, self.n_spk), np.float32)
        self.mean_sil_emb = np.zeros(self.d_model, np.float32)

    def context(self) -> np.ndarray:
        """What precedes a new chunk in the Conformer's input: the cache, then the FIFO."""
        return np.concatenate([self.spkcache, self.fifo])


# --- AOSC compression ----------------------------------------------------------------------------------------


def log_pred_scores(preds: np.ndarray, threshold: float) -> np.ndarray:
    """High where speaker k alone is active: log p_k - log(1 - p_k) + sum_j log(1 - p_j) - log 0.5."""
    log_p = np.log(np.maximum(preds, np.float32(threshold)))
    log_1p = np.log(np.maximum(np.float32(1.0) - preds, np.float32(threshold)))
    return log_p - log_1p + log_1p.sum(axis=1, keepdims=True) - np.float32(math.log(0.5))


def _boost_topk(scores: np.ndarray, n: int, scale: float, topk: TopK) -> np.ndarray:
    """Adds scale * ln 2 to each speaker's n best (finite) scores."""
    if n <= 0:
        return scores
    k = min(n, scores.shape[0])
    idx = topk(scores.T, k)  # (n_spk, k)
    out = scores.copy()
    boost = np.float32(-scale * math.log(0.5))
    for spk in range(scores.shape[1]):
        out[idx[spk], spk] += boost  # -inf stays -inf
    return out


def compress(embs: np.ndarray, preds: np.ndarray, mean_sil_emb: np.ndarray, s: Streaming, n_spk: int,
             topk: TopK) -> tuple[np.ndarray, np.ndarray, float]:
    """AOSC: N > spkcache_len frames -> exactly spkcache_len, grouped by speaker in arrival order, each group in
    time order, with spkcache_sil_frames_per_spk silence slots per speaker. Also returns the selection's margin
    (the gap between the last kept score and the next different one; inf when nothing competes)."""
    n = embs.shape[0]
    per_spk = s.spkcache_len // n_spk - s.spkcache_sil_frames_per_spk
    strong = math.floor(per_spk * s.strong_boost_rate)
    weak = math.floor(per_spk * s.weak_boost_rate)
    min_pos = math.floor(per_spk * s.min_pos_scores_rate)

    scores = log_pred_scores(preds, s.pred_score_threshold)
    speech = preds > 0.5
    scores = np.where(speech, scores, -np.inf).astype(np.float32)
    positive = scores > 0
    enough = positive.sum(axis=0, keepdims=True) >= min_pos
    scores = np.where(~positive & speech & enough, -np.inf, scores).astype(np.float32)  # overlap, once enough
    if s.scores_boost_latest > 0 and n > s.spkcache_len:
        scores[s.spkcache_len :] += np.float32(s.scores_boost_latest)
    scores = _boost_topk(scores, strong, 2.0, topk)
    scores = _boost_topk(scores, weak, 1.0, topk)
    sil = s.spkcache_sil_frames_per_spk
    padded = np.concatenate([scores, np.full((sil, n_spk), np.inf, np.float32)])
    flat = padded.T.reshape(-1)  # speaker-major
    k = min(s.spkcache_len, flat.size)
    picked = topk(flat[None], k)[0]
    values = flat[picked]
    margin = _margin(flat, values)
    picked = np.where(values > -np.inf, picked, s.max_index)
    picked = np.sort(picked)
    disabled = picked == s.max_index
    frame = picked % (n + sil)
    disabled |= frame >= n
    frame = np.where(disabled, 0, frame)
    out_embs = np.where(disabled[:, None], mean_sil_emb[None], embs[frame]).astype(np.float32)
    out_preds = np.where(disabled[:, None], np.float32(0.0), preds[frame]).astype(np.float32)
    return out_embs, out_preds, margin


def _margin(flat: np.ndarray, kept: np.ndarray) -> float:
    """Gap between the weakest kept finite score and the best different score left out (exact ties excluded)."""
    finite = kept[np.isfinite(kept)]
    if finite.size == 0:
        return math.inf
    low = float(finite.min())
    rest = flat[np.isfinite(flat) & (flat < low)]
    return low - float(rest.max()) if rest.size else math.inf


def silence_profile(state: StreamState, embs: np.ndarray, preds: np.ndarray, threshold: float) -> None:
    """Running mean of the pre-encoded frames whose speaker probabilities sum below ``threshold``."""
    is_sil = preds.sum(axis=1) < threshold
    count = int(is_sil.sum())
    if count == 0:
        return
    total = state.mean_sil_emb * np.float32(state.n_sil_frames) + embs[is_sil].sum(axis=0)
    state.n_sil_frames += count
    state.mean_sil_emb = (total / np.float32(max(state.n_sil_frames, 1))).astype(np.float32)


# --- NeMo's rule (file route) --------------------------------------------------------------------------------


def nemo_update(state: StreamState, s: Streaming, chunk: np.ndarray, preds: np.ndarray, lc: int, rc: int,
                on_compress: Callable[[float], None] | None = None) -> np.ndarray:
    """One step of NeMo's synchronous ``streaming_update``. ``chunk``: the step's pre-encoded frames with ``lc``
    left and ``rc`` right context frames; ``preds``: the network's output over ``[cache | fifo | chunk]``.
    Returns the chunk's own predictions (the step's output)."""
    n_cache, n_fifo = len(state.spkcache), len(state.fifo)
    c = len(chunk) - lc - rc
    fifo_preds = preds[n_cache : n_cache + n_fifo]
    chunk_preds = preds[n_cache + n_fifo + lc : n_cache + n_fifo + lc + c]
    fifo = np.concatenate([state.fifo, chunk[lc : lc + c]])
    fifo_preds = np.concatenate([fifo_preds, chunk_preds])
    if n_fifo + c > s.fifo_len:
        pop = min(max(s.spkcache_update_period, c - s.fifo_len + n_fifo), n_fifo + c)
        pop_embs, pop_preds = fifo[:pop], fifo_preds[:pop]
        fifo, fifo_preds = fifo[pop:], fifo_preds[pop:]
        silence_profile(state, pop_embs, pop_preds, s.sil_threshold)
        cache = np.concatenate([state.spkcache, pop_embs])
        if state.compressed:
            state.spkcache_preds = np.concatenate([state.spkcache_preds, pop_preds])
        if len(cache) > s.spkcache_len:
            if not state.compressed:
                state.spkcache_preds = np.concatenate([preds[:n_cache], pop_preds])
            cache, state.spkcache_preds, margin = compress(cache, state.spkcache_preds, state.mean_sil_emb, s,
                                                           state.n_spk, stable_topk)
            state.compressed = True
            state.compressions += 1
            if on_compress is not None:
                on_compress(margin)
        state.spkcache = cache
    state.fifo, state.fifo_preds = fifo, fifo_preds
    state.frames_processed += c
    return chunk_preds


# --- the reference server's rule (the socket) ----------------------------------------------------------------


def feed_update(state: StreamState, chunk: np.ndarray, preds: np.ndarray, lc: int) -> np.ndarray:
    """After a feed's forward pass over ``[cache | fifo | fifo[-lc:] | chunk]``: refresh the cache's and FIFO's
    predictions, append the chunk to the FIFO. Returns the chunk's predictions."""
    n_cache, n_fifo = len(state.spkcache), len(state.fifo)
    chunk_preds = preds[n_cache + n_fifo + lc :]
    if n_cache:
        state.spkcache_preds = preds[:n_cache]
    if n_fifo:
        state.fifo_preds = preds[n_cache : n_cache + n_fifo]
    state.fifo = np.concatenate([state.fifo, chunk])
    state.fifo_preds = np.concatenate([state.fifo_preds, chunk_preds])
    state.frames_processed += len(chunk)
    return chunk_preds


def feed_compress(state: StreamState, s: Streaming, spkcache_max: int, fifo_max: int) -> None:
    """The reference's ``MaybeCompress``: pop only the FIFO's overflow (at most one update period) into the
    cache; compress the cache to spkcache_len once it passes ``spkcache_max``."""
    if len(state.fifo) <= fifo_max:
        return
    pop = min(len(state.fifo) - fifo_max, s.spkcache_update_period)
    pop_embs, pop_preds = state.fifo[:pop], state.fifo_preds[:pop]
    silence_profile(state, pop_embs, pop_preds, s.sil_threshold)
    cache = np.concatenate([state.spkcache, pop_embs])
    cache_preds = np.concatenate([state.spkcache_preds, pop_preds])
    if len(cache) > spkcache_max:
        cache, cache_preds, _ = compress(cache, cache_preds, state.mean_sil_emb, s, state.n_spk, mlx_topk)
        state.compressions += 1
    state.spkcache, state.spkcache_preds = cache, cache_preds
    state.fifo, state.fifo_preds = state.fifo[pop:], state.fifo_preds[pop:]
