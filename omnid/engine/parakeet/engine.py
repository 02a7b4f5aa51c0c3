"""Parakeet as a transcription engine: long audio in chunks (chunks.py), each chunk's greedy tokens, then NeMo's
words and segments on the file's timeline; live previews decode the open segment again.

A hybrid TDT-CTC checkpoint decodes with its transducer unless ``decoder = "ctc"``; a CTC model with its one
head. Times follow NeMo's rules for the decoder that ran (engine/nemo/timestamps.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.errors import EngineError
from omnid.engine.interface import Capabilities, Hypothesis
from omnid.engine.nemo import timestamps
from omnid.engine.nemo.fastconformer import numpy_packed
from omnid.engine.nemo.mlx_folder import keep_packed
from omnid.engine.nemo.transducer import Token
from omnid.engine.options import TranscribeOptions
from omnid.engine.parakeet.checkpoint import load
from omnid.engine.parakeet.chunks import chunk_spans, silent
from omnid.engine.parakeet.model import Parakeet
from omnid.engine.parakeet.options import ParakeetOptions
from omnid.engine.transcript import Segment, Transcript, after_prefix

log = structlog.get_logger(__name__)
Check = Callable[[], None]
MAX_TOKENS = 4096  # what a request's max_new_tokens is held to (a transducer has no token budget)
# Parakeet v3's 25 European languages (v2 is English only, with a 1024-piece vocabulary).
V3_LANGUAGES = ("bg", "hr", "cs", "da", "nl", "en", "et", "fi", "fr", "de", "el", "hu", "it", "lv", "lt", "mt", "pl",
                "pt", "ro", "sk", "sl", "es", "sv", "ru", "uk")


class ParakeetEngine:
    kind = "parakeet"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None,
                 options: ParakeetOptions = ParakeetOptions(), keep_quantized: bool | None = None):
        started = time.perf_counter()
        self.model_id, self.options = model_id, options
        ckpt = load(Path(path), dict(pins) if pins else None, keep_packed(keep_quantized, on_cpu=numpy_packed))
        self.layout = ckpt.layout
        self.model = Parakeet(ckpt)
        self.ctc = options.decoder == "ctc" or self.model.transducer is None  # a CTC model has only that head
        if self.ctc and self.model.ctc is None:
            raise EngineError(f"{path}: decoder = \"ctc\" asks for a CTC head, which this checkpoint has not")
        # The checkpoint names no languages: NVIDIA's English model has a 1024-piece vocabulary, the 25-language v3
        # an 8192-piece one (and so do these tiny test models' 64 pieces count as English).
        self.languages = V3_LANGUAGES if len(self.model.vocabulary) > 1024 else ("en",)
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=self.layout,
                 decoder="ctc" if self.ctc else ("tdt" if self.model.dims.durations else "rnnt"),
                 seconds=round(self.load_seconds, 3))

    def tokens(self, audio: np.ndarray) -> list[Token]:
        """One chunk's greedy tokens."""
        model = self.model
        return model.decode(model.encode(model.features(audio)), ctc=self.ctc)

    @property
    def capabilities(self) -> Capabilities:
        # Greedy only, no prompt, no budget (the request rules of the reference's servers); times from the tokens.
        return Capabilities(languages=self.languages, prompt=False, word_timestamps=True, timestamps=True,
                            max_new_tokens=MAX_TOKENS, streaming="redecode", temperature=False,
                            max_audio_s=self.options.max_audio_s)

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        return ()

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """16 kHz mono float32 -> transcript: each chunk that is not silent decoded on its own, its segments (and
        their words) on the file's timeline; the text is the chunks' texts joined by spaces. Segments passed to
        ``on_segment`` after the first start with a space, so that their texts join into the text."""
        return self._transcript(audio, [(0, len(audio))], check, on_segment, on_progress)

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]],
                         opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                         on_segment: Callable[[Segment], None] | None = None) -> Transcript:
        """Only the given sample spans (the speech a VAD found), each on its own, on the clip's timeline."""
        return self._transcript(audio, clips, check, on_segment)

    def _transcript(self, audio: np.ndarray, spans: list[tuple[int, int]], check: Check,
                    on_segment: Callable[[Segment], None] | None = None,
                    on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """The given sample spans of the audio, each cut into chunks, each chunk decoded on its own."""
        duration = len(audio) / SAMPLE_RATE
        if duration > self.options.max_audio_s:
            raise EngineError(f"the audio is {duration:.1f} s long; this model takes at most "
                              f"{self.options.max_audio_s:.0f} s")
        segments: list[Segment] = []
        texts: list[str] = []
        generated = 0
        for first, last in spans:
            for start, end in chunk_spans(audio[first:last], self.options.max_chunk_s, self.options.split_search_s):
                check()
                chunk = audio[first + start : first + end]
                if not silent(chunk):
                    tokens = self.tokens(chunk)
                    generated += len(tokens)
                    text = self.model.vocabulary.text([t.id for t in tokens])
                    if text:
                        texts.append(text)
                    for seg in self._segments(tokens, first + start, len(segments)):
                        if on_segment is not None:
                            on_segment(replace(seg, text=" " + seg.text) if segments else seg)
                        segments.append(seg)
                if on_progress is not None:
                    on_progress((first + end) / SAMPLE_RATE, duration)
        return Transcript(" ".join(texts), segments, "", duration, generated, "stop")  # the reference joins so

    def preview(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), prefix: str = "",
                check: Check = lambda: None) -> str:
        """The clip's text; with ``prefix`` (the words a realtime final has already sent as append-only deltas) a
        text that starts with it: the prefix, then the decode's words past as many words as the prefix has (a
        transducer cannot be forced to continue a text)."""
        return after_prefix(self.transcribe(audio, opts, check).text, prefix)

    def redecode(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                 check: Check = lambda: None, final: bool = False) -> Hypothesis:
        """A live preview: the whole open segment decoded again (cheap for this model)."""
        text = self.transcribe(audio, opts, check).text
        return Hypothesis(text=text, raw=text, decodes=(previous.decodes if previous else 0) + 1, language=None)

    def _segments(self, tokens: list[Token], start: int, first_id: int) -> list[Segment]:
        """NeMo's segments of one chunk's tokens, on the file's timeline (``start``: the chunk's first sample)."""
        return timestamps.transcript_segments(tokens, self.model.vocabulary, start, first_id, ctc=self.ctc)
