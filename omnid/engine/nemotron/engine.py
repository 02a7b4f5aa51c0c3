"""Nemotron streaming ASR as a transcription engine: a file (or each speech span of a clip) runs the same streaming
pass a live session runs (nemotron/stream.py at the checkpoint's native chunk), so a file and a session of the same
audio give the same text; NeMo's words and segments from the RNN-T frames, on the file's timeline.

Every job is a program of chunks (engine/programs.py): the runtime's batch encodes the waiting chunks of one shape
(one per stream: live sessions at the same chunk size, files) in one encoder call, each row with its own caches;
each stream's RNN-T then decodes its own frames. A live session's stream lives between its programs
(``open_stream``/``stream_program``).

The language picks the prompt: a prompt-dictionary key (``en-US``), or an ISO code mapped to the first key of
that language; none: the checkpoint's default prompt, else index 0 (the reference's rule).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import structlog

from omnid.audio import SAMPLE_RATE
from omnid.engine.errors import EngineError
from omnid.engine.interface import Capabilities, Program, Sentence, StreamUpdate
from omnid.engine.nemo import timestamps
from omnid.engine.nemo.cache_aware import stream_steps
from omnid.engine.nemo.fastconformer import numpy_packed
from omnid.engine.nemo.mlx_folder import keep_packed
from omnid.engine.nemotron.checkpoint import load
from omnid.engine.nemotron.model import Nemotron
from omnid.engine.nemotron.stream import Chunk, Stream
from omnid.engine.options import TranscribeOptions
from omnid.engine.programs import ProgramBatch, run_alone
from omnid.engine.transcript import Segment, Transcript, after_prefix

log = structlog.get_logger(__name__)
Check = Callable[[], None]
MAX_TOKENS = 4096  # what a request's max_new_tokens is held to (a transducer has no token budget)
PUSH_SECONDS = 10.0  # a file is pushed into its stream this much at a time: cancellation and progress between
FRAME_MS = round(timestamps.FRAME_SECONDS * 1000)  # an encoder frame


@dataclass
class LiveStream:
    """A live session's stream: its prompt and chunk fixed when it opened; the Stream is made by its first program."""

    prompt: int
    chunk: int  # encoder frames
    offset: float  # seconds: where its audio starts on the session's timeline
    stream: Stream | None = None


class StreamBatch(ProgramBatch):
    """Programs whose only model work is encoding chunks: the waiting chunks of the smallest key's shape go in one
    call."""

    def __init__(self, model: Nemotron, lane: Callable[[Any], Any] | None = None):
        super().__init__(lane)
        self.model = model

    def is_encode(self, request: Any) -> bool:
        return True

    def together(self, keys: list[Any]) -> list[Any]:
        shape = self.waiting[keys[0]].shape
        return [k for k in keys if self.waiting[k].shape == shape]

    def encode(self, requests: list[Chunk], between: Callable[[], None]) -> list[Any]:
        first, last = requests[0].first, requests[0].last
        windows = mx.array(np.stack([r.window for r in requests]))
        return stream_steps(self.model.encoder, windows, [r.cache for r in requests], None, first, last, between)

    def begin(self, request: Any) -> Any:
        raise TypeError("a stream program only encodes")

    def new_lane(self) -> Any:
        raise TypeError("a stream program only encodes")


class NemotronEngine:
    kind = "nemotron"

    def __init__(self, model_id: str, path: Path, pins: Mapping[str, str] | None = None,
                 keep_quantized: bool | None = None):
        started = time.perf_counter()
        self.model_id = model_id
        ckpt = load(Path(path), dict(pins) if pins else None, keep_packed(keep_quantized, on_cpu=numpy_packed))
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
                            max_new_tokens=MAX_TOKENS, streaming="cache_aware", temperature=False,
                            refuses_unknown_language=True, language_keys=tuple(self.model.streaming.prompts),
                            chunk_ms=self.chunk_ms)

    @property
    def chunk_ms(self) -> tuple[int, ...]:
        """The chunk lengths the checkpoint was trained for (its right contexts + 1 frames), the shortest first."""
        return tuple(sorted({(right + 1) * FRAME_MS for _, right in self.model.streaming.contexts}))

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

    def batch(self, lane: Callable[[Any], Any] | None = None) -> StreamBatch:
        return StreamBatch(self.model, lane)

    # --- live streams -------------------------------------------------------------------------------------------

    def open_stream(self, language: str | None, chunk_ms: int | None, offset: float = 0.0) -> LiveStream:
        chunk = self.chunk if chunk_ms is None else max(1, round(chunk_ms / FRAME_MS))
        return LiveStream(self.prompt_index(language), chunk, offset)

    def stream_program(self, live: LiveStream, audio: np.ndarray, finish: bool) -> Program:
        if live.stream is None:
            live.stream = Stream(self.model, live.chunk, live.prompt)
        stream = live.stream
        if len(audio):
            stream.mel.push(audio)
        if finish:
            stream.mel.finish()
        yield from _chunks(stream)
        said: tuple[Sentence, ...] = ()
        if finish:
            said = tuple(timestamps.sentences(stream.tokens, self.model.vocabulary, live.offset))
        return StreamUpdate(stream.text, said)

    # --- files ------------------------------------------------------------------------------------------------

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """16 kHz mono float32 -> transcript: the whole audio as one stream."""
        return run_alone(self.batch(), self.transcribe_program(audio, opts, on_segment, on_progress), check)

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]],
                         opts: TranscribeOptions = TranscribeOptions(), check: Check = lambda: None,
                         on_segment: Callable[[Segment], None] | None = None) -> Transcript:
        """Only the given sample spans (the speech a VAD found), each a stream of its own, on the clip's timeline."""
        if not clips:
            return Transcript("", [], "", len(audio) / SAMPLE_RATE, 0, "stop")
        return run_alone(self.batch(), self.clips_program(audio, clips, opts, on_segment), check)

    def preview(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), prefix: str = "",
                check: Check = lambda: None) -> str:
        return after_prefix(self.transcribe(audio, opts, check).text, prefix)

    def transcribe_program(self, audio: np.ndarray, opts: TranscribeOptions,
                           on_segment: Callable[[Segment], None] | None = None,
                           on_progress: Callable[[float, float], None] | None = None) -> Program:
        return self._transcript(audio, [(0, len(audio))], opts, on_segment, on_progress)

    def clips_program(self, audio: np.ndarray, clips: list[tuple[int, int]], opts: TranscribeOptions,
                      on_segment: Callable[[Segment], None] | None = None) -> Program:
        return self._transcript(audio, clips, opts, on_segment)

    def preview_program(self, audio: np.ndarray, opts: TranscribeOptions, prefix: str = "") -> Program:
        transcript = yield from self.transcribe_program(audio, opts)
        return after_prefix(transcript.text, prefix)

    def final_program(self, audio: np.ndarray, opts: TranscribeOptions, sent: str) -> Program:
        transcript = yield from self.transcribe_program(audio, opts)
        return transcript.text

    def _transcript(self, audio: np.ndarray, spans: list[tuple[int, int]], opts: TranscribeOptions,
                    on_segment: Callable[[Segment], None] | None = None,
                    on_progress: Callable[[float, float], None] | None = None) -> Program:
        duration = len(audio) / SAMPLE_RATE
        prompt = self.prompt_index(opts.language)  # a bad language fails before any model work
        segments: list[Segment] = []
        texts: list[str] = []
        generated = 0
        step = int(PUSH_SECONDS * SAMPLE_RATE)
        for first, last in spans:
            stream = Stream(self.model, self.chunk, prompt)
            for start in range(first, last, step):
                stream.mel.push(audio[start : min(start + step, last)])
                yield from _chunks(stream)
                if on_progress is not None:
                    on_progress(min(start + step, last) / SAMPLE_RATE, duration)
            stream.mel.finish()
            yield from _chunks(stream)
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


def _chunks(stream: Stream) -> Program:
    """Asks the batch to encode each chunk the stream has ready, and decodes it."""
    while (chunk := stream.next_chunk()) is not None:
        encoded, cache = yield chunk
        stream.accept(chunk, encoded, cache)
