"""Qwen3-ForcedAligner: times the units of a transcript in its audio, as the official package does (qwen-asr 0.0.6,
``Qwen3ForcedAligner.align``).

The network is Qwen3-ASR's (engine/qwen3/: the same loader, encoder and decoder) with a head of time classes.
Its input is the audio's slots, then each unit of the transcript (words.py) followed by two ``<timestamp>`` tokens
(its start and its end), with no chat template; one causal pass, and the class predicted at each ``<timestamp>``
is its time (timestamps.py). Audio is aligned at most ``LIMIT_S`` at a time (qwen3/aligner_limits.py): a Qwen3-ASR
transcript timed by the aligner is cut into chunks no longer than that (as the official timed transcription cuts it).

Synchronous and thread-confined, like every engine: only its runtime's worker thread calls ``align``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

import mlx.core as mx
import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.alignment import AlignedUnit
from omnid.engine.errors import CheckpointError
from omnid.engine.qwen3.aligner_limits import LIMIT_S
from omnid.engine.qwen3.features import features_mel, normalized
from omnid.engine.qwen3.model import audio_token_count
from omnid.engine.qwen3.network import PREFILL_BLOCK, load_network, numpy_decoder
from omnid.engine.qwen3_aligner.timestamps import seconds
from omnid.engine.qwen3_aligner.words import Unit, units

log = structlog.get_logger(__name__)
Check = Callable[[], None]


class Qwen3AlignerEngine:
    """An AlignerEngine (engine/alignment.py)."""

    kind = "qwen3_forced_aligner"

    def __init__(self, model_id: str, folder: Path, pins: Mapping[str, str] | None = None,
                 cpu_decoder: bool | None = None, segment_max_s: float = 10.0):
        started = time.perf_counter()
        self.model_id = model_id
        self.segment_max_s = segment_max_s  # timed segments are cut before they pass this (alignment.timed_segments)
        self.folder = Path(folder)
        net = load_network(self.folder, pins)
        if net.checkpoint.timestamps is None:
            raise CheckpointError(f"{self.folder / 'config.json'}: not a Qwen3-ForcedAligner checkpoint (its "
                                  "thinker_config.model_type names no forced aligner)")
        self.timestamps = net.checkpoint.timestamps
        if self.timestamps.token_id >= net.tokenizer.size:
            raise CheckpointError(f"{self.folder / 'tokenizer_config.json'}: no token for timestamp_token_id "
                                  f"{self.timestamps.token_id}")
        self.model, self.tokenizer, self.pin_report = net.model, net.tokenizer, net.pin_report
        self.cpu_decoder = numpy_decoder(net, cpu_decoder)
        self.layout = net.checkpoint.layout
        self.quantized = bool(net.checkpoint.quantized)
        self.languages = net.checkpoint.languages
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=self.layout, quantized=self.quantized,
                 decoder="numpy" if self.cpu_decoder else "mlx", seconds=round(self.load_seconds, 3))

    def input_ids(self, pieces: list[Unit], n_audio: int) -> list[int]:
        """``<|audio_start|>`` + the audio slots + ``<|audio_end|>`` + each unit and two ``<timestamp>``s. Each unit is
        tokenized alone, as the whole string would be: added tokens split it first."""
        ids = self.tokenizer.ids
        out = [ids.audio_start, *([ids.audio_pad] * n_audio), ids.audio_end]
        for unit in pieces:
            out += [*self.tokenizer.encode(unit.text), self.timestamps.token_id, self.timestamps.token_id]
        return out

    def slot_classes(self, mel: mx.array, ids: list[int], check: Check = lambda: None) -> list[int]:
        """The class predicted at every ``<timestamp>`` of ``ids`` (whose audio slots the log-mel ``mel`` fills)."""
        features = self.model.audio(mel, check)
        x = self.model.embed(ids, self.tokenizer.ids.audio_pad, features)
        rows = np.array([i for i, t in enumerate(ids) if t == self.timestamps.token_id], dtype=np.int64)
        if self.cpu_decoder is not None:
            hidden = self.cpu_decoder.hidden(np.array(x[0]), rows, check)
            return [int(c) for c in np.argmax(self.cpu_decoder.head(hidden), axis=-1)]
        caches = self.model.new_caches()
        picked = []
        for first in range(0, x.shape[1], PREFILL_BLOCK):
            h = self.model.text(x[:, first : first + PREFILL_BLOCK], caches)[0]
            wanted = rows[(rows >= first) & (rows < first + h.shape[0])] - first
            if len(wanted):
                picked.append(mx.argmax(self.model.logits(h[mx.array(wanted)]), axis=-1))
            mx.eval(*picked, *(c.keys for c in caches if c.keys is not None))
            check()
        return [int(c) for p in picked for c in np.array(p)]

    def align(self, audio: np.ndarray, text: str, language: str, check: Check = lambda: None) -> list[AlignedUnit]:
        """The units of ``text`` in ``language`` (a Qwen3-ASR language name; any other splits at spaces) timed in
        ``audio`` (16 kHz mono, at most LIMIT_S). A text with no unit gives none, without the model."""
        if len(audio) > LIMIT_S * SAMPLE_RATE:
            raise ValueError(f"the aligner takes at most {LIMIT_S:g} s of audio at a time")
        pieces = units(text, language)
        if not pieces:
            return []
        mel = features_mel(normalized(audio), self.model.audio.dims.n_mels)
        ids = self.input_ids(pieces, audio_token_count(mel.shape[0]))
        times = seconds(self.slot_classes(mel, ids, check), self.timestamps.segment_ms)
        return [AlignedUnit(u.text, times[2 * i], times[2 * i + 1], u.start, u.end) for i, u in enumerate(pieces)]
