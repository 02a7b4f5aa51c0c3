"""The Sortformer engine: a loaded checkpoint and the two ways of running it over audio.

* :meth:`SortformerEngine.diarize` runs NeMo's ``forward_streaming`` over a whole recording (the file route), with
  one of the model card's latency presets; :meth:`offline` is one pass over everything (for parity checks).
* :meth:`feed` is one message of ``/v1/diarization/stream``: the reference server's feed algorithm on a
  :class:`StreamState` the caller keeps per stream.

Synchronous and thread-confined like every engine: only its runtime's worker thread calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import mlx.core as mx
import numpy as np
import structlog

from omnid.engine.interface import Check
from omnid.engine.nemo.features import log_mel
from omnid.engine.sortformer.checkpoint import Checkpoint, Streaming, load
from omnid.engine.sortformer.model import Sortformer
from omnid.engine.sortformer.state import StreamState, feed_compress, feed_update, nemo_update

log = structlog.get_logger()

SUBSAMPLING = 8  # feature frames of 10 ms per output frame: the 80 ms of engine/diarization.py's grid


@dataclass(frozen=True)
class Preset:
    """A latency preset of the model card (frames of 80 ms): chunk, right context, FIFO, update period."""

    chunk_len: int
    chunk_right_context: int
    fifo_len: int
    spkcache_update_period: int


PRESETS = {
    "very_high": Preset(340, 40, 40, 300),
    "high": Preset(124, 1, 124, 124),
    "low": Preset(6, 7, 188, 144),
    "ultra_low": Preset(3, 1, 188, 144),
}


def with_preset(s: Streaming, p: Preset) -> Streaming:
    return replace(s, chunk_len=p.chunk_len, chunk_right_context=p.chunk_right_context, fifo_len=p.fifo_len,
                   spkcache_update_period=p.spkcache_update_period)


class SortformerEngine:
    """A DiarizationEngine (engine/diarization.py)."""

    kind = "sortformer"
    presets = PRESETS

    def __init__(self, model_id: str, path: Path, pins: dict[str, str] | None = None):
        self.model_id = model_id
        ckpt = load(path, pins)
        self.checkpoint_layout = ckpt.layout
        self.front = ckpt.front
        self.streaming = ckpt.streaming
        self.n_spk = ckpt.dims.n_spk
        self.d_model = ckpt.dims.fc_d_model
        self._log_positions(ckpt)
        self.model = Sortformer.from_checkpoint(ckpt)

    @staticmethod
    def _log_positions(ckpt: Checkpoint) -> None:
        pos = ckpt.embed_positions
        if pos is not None:
            # NeMo's Transformer has no positions; converters may add a table, which changes every probability
            # (applied exactly as the reference server does, so its numbers are matched).
            log.info("sortformer_embed_positions", nonzero=bool(np.any(pos)), rows=int(pos.shape[0]))

    @property
    def max_positions(self) -> int | None:
        return self.model.max_positions

    # --- NeMo mode ------------------------------------------------------------------------------------------

    def mel(self, audio: np.ndarray) -> np.ndarray:
        return log_mel(audio, self.front)

    def offline(self, audio: np.ndarray) -> np.ndarray:
        """One pass over the whole recording: (ceil((n // 160) / 8), n_spk) probabilities."""
        mel = self.mel(audio)
        if len(mel) == 0:
            return np.zeros((0, self.n_spk), np.float32)
        return np.array(self.model.forward(self.model.pre_encode(mel)))

    def diarize(self, audio: np.ndarray, preset: Preset | None = None, check: Check = lambda: None,
                on_progress: Callable[[float, float], None] | None = None,
                on_step: Callable[[StreamState, np.ndarray, float | None], None] | None = None) -> np.ndarray:
        """NeMo's ``forward_streaming`` over a whole recording: chunks of ``chunk_len`` output frames with real
        neighbouring mel frames as left/right context. Returns (frames, n_spk) probabilities."""
        s = with_preset(self.streaming, preset) if preset else self.streaming
        return self.diarize_mel(self.mel(audio), s, check, on_progress, on_step)

    def diarize_mel(self, mel: np.ndarray, s: Streaming, check: Check = lambda: None,
                    on_progress: Callable[[float, float], None] | None = None,
                    on_step: Callable[[StreamState, np.ndarray, float | None], None] | None = None) -> np.ndarray:
        """``on_step(state, chunk frames, compression margin or None)`` after each step (for parity tests)."""
        total = len(mel)
        state = StreamState(self.d_model, self.n_spk)
        outputs = []
        start, end = 0, 0
        while end < total:
            check()
            lo = min(s.chunk_left_context * SUBSAMPLING, start)
            end = min(start + s.chunk_len * SUBSAMPLING, total)
            ro = min(s.chunk_right_context * SUBSAMPLING, total - end)
            chunk = np.array(self.model.pre_encode(mel[start - lo : end + ro]))
            lc, rc = round(lo / SUBSAMPLING), -(-ro // SUBSAMPLING)
            preds = self._forward(np.concatenate([state.context(), chunk]))
            margins: list[float] = []
            outputs.append(nemo_update(state, s, chunk, preds, lc, rc, on_compress=margins.append))
            if on_step is not None:
                on_step(state, chunk[lc : len(chunk) - rc], margins[0] if margins else None)
            if on_progress is not None:
                on_progress(end / total, 1.0)
            start = end
        return np.concatenate(outputs) if outputs else np.zeros((0, self.n_spk), np.float32)

    def _forward(self, embeddings: np.ndarray) -> np.ndarray:
        return np.array(self.model.forward(mx.array(embeddings)))

    # --- the reference server's feed mode ------------------------------------------------------------------

    def new_stream(self) -> StreamState:
        return StreamState(self.d_model, self.n_spk)

    def feed(self, state: StreamState, samples: np.ndarray, spkcache_max: int, fifo_max: int) -> np.ndarray:
        """One feed: its own mel (all 1 + n // 160 frames), pre-encoded, after the cache, the FIFO and the FIFO's
        last chunk_left_context frames; no right context. Returns (n // 1280 + 1, n_spk) probabilities; the
        state is updated and its FIFO overflow moved into the cache."""
        mel = log_mel(samples, self.front, keep_last=True)
        chunk = np.array(self.model.pre_encode(mel))
        lc = min(self.streaming.chunk_left_context, len(state.fifo))
        left = state.fifo[len(state.fifo) - lc :] if lc else state.fifo[:0]
        preds = self._forward(np.concatenate([state.spkcache, state.fifo, left, chunk]))
        if not (np.isfinite(chunk).all() and np.isfinite(preds).all()):  # before the state takes any of it
            raise FloatingPointError("the model's output for this feed is not finite; the stream is unchanged")
        out = feed_update(state, chunk, preds, lc)
        feed_compress(state, self.streaming, spkcache_max, fifo_max)
        return out
