"""Parakeet as a transcription engine: long audio in chunks (chunks.py), each chunk's greedy tokens, then NeMo's
words and segments on the file's timeline. Not yet served: the runtime, routes and realtime sessions come next.

A hybrid TDT-CTC checkpoint decodes with its transducer unless ``decoder = "ctc"``. Times follow NeMo's rules for
the decoder that ran (engine/nemo/timestamps.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.errors import EngineError
from omnid.engine.nemo import timestamps
from omnid.engine.nemo.transducer import Token
from omnid.engine.parakeet.checkpoint import load
from omnid.engine.parakeet.chunks import chunk_spans, silent
from omnid.engine.parakeet.model import Parakeet
from omnid.engine.transcript import Segment, Transcript, Word

log = structlog.get_logger(__name__)
Check = Callable[[], None]
HOP_LENGTH = 160
SUBSAMPLING = 8


@dataclass(frozen=True)
class ParakeetOptions:
    max_chunk_s: float = 120.0  # long audio is cut into chunks of at most this long
    split_search_s: float = 2.0  # ... at the quietest 100 ms of this long before each boundary
    max_audio_s: float = 3600.0  # longer audio is refused
    decoder: Literal["transducer", "ctc"] = "transducer"  # a hybrid checkpoint's head


class ParakeetEngine:
    kind = "parakeet"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None,
                 options: ParakeetOptions = ParakeetOptions()):
        started = time.perf_counter()
        self.model_id, self.options = model_id, options
        ckpt = load(Path(path), dict(pins) if pins else None)
        self.layout = ckpt.layout
        self.model = Parakeet(ckpt)
        if options.decoder == "ctc" and self.model.ctc is None:
            raise EngineError(f"{path}: decoder = \"ctc\" asks for a CTC head, which this checkpoint has not")
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=self.layout,
                 decoder="ctc" if options.decoder == "ctc" else ("tdt" if self.model.dims.durations else "rnnt"),
                 seconds=round(self.load_seconds, 3))

    def tokens(self, audio: np.ndarray) -> list[Token]:
        """One chunk's greedy tokens."""
        model = self.model
        return model.decode(model.encode(model.features(audio)), ctc=self.options.decoder == "ctc")

    def transcribe(self, audio: np.ndarray, check: Check = lambda: None,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """16 kHz mono float32 -> transcript: each chunk that is not silent decoded on its own, its segments (and
        their words) on the file's timeline; the text is the chunks' texts joined by spaces."""
        duration = len(audio) / SAMPLE_RATE
        if duration > self.options.max_audio_s:
            raise EngineError(f"the audio is {duration:.1f} s long; this model takes at most "
                              f"{self.options.max_audio_s:.0f} s")
        segments: list[Segment] = []
        texts: list[str] = []
        generated = 0
        for start, end in chunk_spans(audio, self.options.max_chunk_s, self.options.split_search_s):
            check()
            chunk = audio[start:end]
            if not silent(chunk):
                tokens = self.tokens(chunk)
                generated += len(tokens)
                text = self.model.vocabulary.text([t.id for t in tokens])
                if text:
                    texts.append(text)
                for seg in self._segments(tokens, start):
                    seg = replace(seg, id=len(segments))
                    segments.append(seg)
                    if on_segment is not None:
                        on_segment(seg)
            if on_progress is not None:
                on_progress(end / SAMPLE_RATE, duration)
        return Transcript(" ".join(texts), segments, "", duration, generated, "stop")  # the reference joins so

    def _segments(self, tokens: list[Token], start: int) -> list[Segment]:
        vocab, offset = self.model.vocabulary, start / SAMPLE_RATE
        stride = HOP_LENGTH / SAMPLE_RATE
        words = timestamps.words(timestamps.token_spans(tokens, vocab, ctc=self.options.decoder == "ctc"), vocab)
        out = []
        for seg in timestamps.segments(words):
            s0, s1 = seg.seconds(stride, SUBSAMPLING)
            timed = []
            for w in words:
                if w.first >= seg.first and w.last <= seg.last:
                    w0, w1 = w.seconds(stride, SUBSAMPLING)
                    timed.append(Word(w.text, round(offset + w0, 3), round(offset + w1, 3), 1.0))  # NeMo gives none
            out.append(Segment(0, start // HOP_LENGTH, round(offset + s0, 3), round(offset + s1, 3), seg.text,
                               [t.id for t in tokens[seg.first : seg.last]], 0.0, 0.0, 0.0, 0.0, timed))
        return out
