"""Nemotron streaming ASR as a transcription engine: a file (or each speech span of a clip) runs the same streaming
pass a live session runs (nemotron/stream.py at the checkpoint's native chunk), so a file and a session of the same
audio give the same text; NeMo's words and segments from the RNN-T frames, on the file's timeline.

The language picks the prompt: a prompt-dictionary key (``en-US``), or an ISO code mapped to the first key of
that language; none: the checkpoint's default prompt, else index 0 (the reference's rule).
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
from omnid.engine.nemotron.checkpoint import load
from omnid.engine.nemotron.model import Nemotron
from omnid.engine.nemotron.stream import Stream
from omnid.engine.transcript import Segment, Transcript, after_prefix
from omnid.engine.whisper.engine import TranscribeOptions

log = structlog.get_logger(__name__)
Check = Callable[[], None]
MAX_TOKENS = 4096  # what a request's max_new_tokens is held to (a transducer has no token budget)
PUSH_SECONDS = 10.0  # a file is pushed into its stream this much at a time: cancellation and progress between


class NemotronEngine:
    kind = "nemotron"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None):
        started = time.perf_counter()
        self.model_id = model_id
        ckpt = load(Path(path), dict(pins) if pins else None)
        self.layout = "mlx" if Path(path).is_dir() else "nemo"
        self.model = Nemotron(ckpt)
        self.chunk = self.model.streaming.contexts[0][1] + 1  # the native chunk: the default right context + 1
        prompts = self.model.streaming.prompts
        self.languages = tuple(dict.fromkeys(key.split("-")[0].lower() for key in prompts if key != "auto"))
        self.load_seconds = time.perf_counter() - started
        log.info("engine_loaded", model=model_id, kind=self.kind, layout=self.layout, chunk_frames=self.chunk,
                 prompts=len(prompts), seconds=round(self.load_seconds, 3))

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(languages=self.languages, prompt=False, word_timestamps=True, timestamps=True,
                            max_new_tokens=MAX_TOKENS, streaming="redecode", temperature=False,
                            refuses_unknown_language=True)

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]:
        return ()

    def prompt_index(self, language: str | None) -> int:
        """The prompt of a language: a prompt key as it is, an ISO code's first key, else the default."""
        streaming = self.model.streaming
        prompts = streaming.prompts
        if language:
            if language in prompts:
                return prompts[language]
            for key, index in prompts.items():
                if key.split("-")[0].lower() == language.lower():
                    return index
            raise EngineError(f"language {language!r} is not one of this model's prompts ({', '.join(prompts)})")
        return prompts[streaming.default_language] if streaming.default_language else 0

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """16 kHz mono float32 -> transcript: the whole audio as one stream."""
        return self._transcript(audio, [(0, len(audio))], opts, check, on_segment, on_progress)

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]],
                         opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                         on_segment: Callable[[Segment], None] | None = None) -> Transcript:
        """Only the given sample spans (the speech a VAD found), each a stream of its own, on the clip's timeline."""
        return self._transcript(audio, clips, opts, check, on_segment)

    def preview(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), prefix: str = "",
                check: Check = lambda: None) -> str:
        return after_prefix(self.transcribe(audio, opts, check).text, prefix)

    def redecode(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                 check: Check = lambda: None, final: bool = False) -> Hypothesis:
        text = self.transcribe(audio, opts, check).text
        return Hypothesis(text=text, raw=text, decodes=(previous.decodes if previous else 0) + 1, language=None)

    def _transcript(self, audio: np.ndarray, spans: list[tuple[int, int]], opts: TranscribeOptions, check: Check,
                    on_segment: Callable[[Segment], None] | None = None,
                    on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        duration = len(audio) / SAMPLE_RATE
        prompt = self.prompt_index(opts.language)  # a bad language fails before any model work
        segments: list[Segment] = []
        texts: list[str] = []
        generated = 0
        step = int(PUSH_SECONDS * SAMPLE_RATE)
        for first, last in spans:
            stream = Stream(self.model, self.chunk, prompt)
            for start in range(first, last, step):
                check()
                stream.push(audio[start : min(start + step, last)])
                if on_progress is not None:
                    on_progress(min(start + step, last) / SAMPLE_RATE, duration)
            check()
            stream.finish()
            tokens = stream.tokens
            generated += len(tokens)
            text = self.model.vocabulary.text([t.id for t in tokens])
            if text:
                texts.append(text)
            for seg in timestamps.transcript_segments(tokens, self.model.vocabulary, first, len(segments)):
                if on_segment is not None:
                    on_segment(replace(seg, text=" " + seg.text) if segments else seg)
                segments.append(seg)
        return Transcript(" ".join(texts), segments, "", duration, generated, "stop")
