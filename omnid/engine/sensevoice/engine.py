"""SenseVoice Small as a transcription engine: each clip (the whole audio up to ``max_clip_s``; longer audio comes
as the speech clips the daemon's VAD found, or is cut at ``max_clip_s``) decoded as funasr's ``inference`` decodes
one input, its tags read into the segment's language, emotion and events, its text funasr's rich post-processing
(plain, or with emoji where configured).

Options: a request's language picks the language query (funasr's languages: zh, en, yue, ja, ko; any other is
"auto", as funasr maps it, and the model writes the language it heard); ``itn`` (a request's ``use_itn``, else the
section's) the text-normalisation query; ``ban_emo_unk`` from the section.

Times: a segment spans its clip. Token times come from the greedy CTC runs (each token's first and last output
frame, 60 ms a frame, as funasr's timestamps count them: (frame x 60 - 30) ms); a word's span is its tokens'.
funasr times tokens by a forced alignment of the decoded text instead; greedy runs give the same frames wherever
the decode has no repeats merged across a blank-free run, and are what a greedy decoder honestly knows.

Synchronous and thread-confined: only the engine's worker thread calls into it (see runtime/scheduler.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path

import mlx.core as mx
import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.clips import ClipEngine, clip_segment
from omnid.engine.interface import Capabilities
from omnid.engine.nemo.tokenizer import SPACE
from omnid.engine.options import TranscribeOptions
from omnid.engine.sensevoice.checkpoint import load
from omnid.engine.sensevoice.model import FRAME_S, LANGUAGE_ROWS, Decoded, SenseVoice
from omnid.engine.sensevoice.options import SenseVoiceOptions
from omnid.engine.sensevoice.tags import Tagged, rich_text
from omnid.engine.transcript import Segment, Word

log = structlog.get_logger(__name__)
Check = Callable[[], None]
LANGUAGES = tuple(code for code in LANGUAGE_ROWS if code not in ("auto", "nospeech"))
MAX_TOKENS = 4096  # what a request's max_new_tokens is held to (CTC has no token budget)


class SenseVoiceEngine(ClipEngine):
    kind = "sensevoice"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None,
                 options: SenseVoiceOptions = SenseVoiceOptions()):
        self.model_id, self.options = model_id, options
        self.max_clip_s = options.max_clip_s
        started = time.perf_counter()
        ckpt = load(Path(path), dict(pins) if pins else None)
        self.model = SenseVoice(ckpt.dims)
        self.model.load_weights(ckpt.weights, strict=True)
        mx.eval(self.model.parameters())
        self.vocabulary, self.front, self.layout = ckpt.vocabulary, ckpt.front, ckpt.layout
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=self.layout,
                 seconds=round(self.load_seconds, 3))

    @property
    def capabilities(self) -> Capabilities:
        # Non-autoregressive CTC: greedy, no prompt, no budget; a language it does not know decodes as "auto". Word
        # times from the CTC runs; a segment spans its clip (up to max_clip_s): too coarse for subtitles.
        return Capabilities(languages=LANGUAGES, prompt=False, word_timestamps=True, timestamps=False,
                            max_new_tokens=MAX_TOKENS, streaming="redecode", temperature=False, itn=True,
                            max_clip_s=self.max_clip_s)

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        return ()

    # --- the model, step by step (also what the parity tests call) -------------------------------------------------

    def language(self, opts: TranscribeOptions) -> str:
        """The language query's name: the request's where funasr has it, else "auto"."""
        return opts.language if opts.language in LANGUAGE_ROWS else "auto"

    def itn(self, opts: TranscribeOptions) -> bool:
        return self.options.use_itn if opts.itn is None else opts.itn

    def decode(self, audio: np.ndarray, language: str = "auto", itn: bool = False,
               ban_emo_unk: bool = False) -> Decoded:
        """One input as funasr's inference decodes it: the ids its tokenizer decodes, with their frames."""
        features = self.front.features(np.asarray(audio, np.float32))
        encoded = self.model.encode(features, language, itn)
        return self.model.greedy(encoded, ban_emo_unk)

    def raw_text(self, ids: tuple[int, ...] | list[int]) -> str:
        """funasr's text of the ids (SentencePiece's decoding: tags verbatim)."""
        return self.vocabulary.piece_text(list(ids))

    # --- transcription ---------------------------------------------------------------------------------------------

    def clip(self, audio: np.ndarray, first: int, opts: TranscribeOptions, seg_id: int,
              check: Check) -> tuple[Segment | None, int, str]:
        check()
        decoded = self.decode(audio, self.language(opts), self.itn(opts), self.options.ban_emo_unk)
        raw = self.raw_text(decoded.ids)
        text = rich_text(raw, self.options.emoji)
        tags = Tagged.of(raw)
        if not text:
            return None, len(decoded.ids), "stop"
        start, end = first / SAMPLE_RATE, (first + len(audio)) / SAMPLE_RATE
        words = self._words(decoded, start, end) if opts.word_timestamps else None
        return clip_segment(seg_id, first, len(audio), text, list(decoded.ids), tags.language, words=words,
                            emotion=tags.emotion, events=tags.events), len(decoded.ids), "stop"

    def _words(self, decoded: Decoded, start: float, end: float) -> list[Word]:
        """Words from the greedy runs of their tokens (tags skipped): a word starts at a piece with ``▁``."""
        words: list[Word] = []
        for i, first, last in zip(decoded.ids, decoded.first, decoded.last, strict=True):
            piece = self.vocabulary.pieces[i]
            if first < 0 or piece.startswith("<|"):
                continue
            t0 = min(end, start + max(first * FRAME_S - FRAME_S / 2, 0.0))
            t1 = min(end, start + max((last + 1) * FRAME_S - FRAME_S / 2, 0.0))
            if piece.startswith(SPACE) or not words:
                words.append(Word(piece.replace(SPACE, " ").strip(), t0, t1, 1.0))
            else:
                w = words[-1]
                words[-1] = Word(w.word + piece.replace(SPACE, " "), w.start, t1, 1.0)
        return [w for w in words if w.word]
