"""What every transcription engine offers, whatever its kind: the one interface sessions, HTTP handlers,
`omnid transcribe` and `omnid eval` use, and the capabilities they ask instead of checking which model it is."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from omnid.engine.options import TranscribeOptions

if TYPE_CHECKING:
    from omnid.engine.transcript import Segment, Transcript

Check = Callable[[], None]
# A job as a generator of the model work it needs, run by its engine's batch (engine/programs.py).
Program = Generator[Any, Any, Any]


@dataclass(frozen=True)
class Capabilities:
    languages: tuple[str, ...]  # ISO-639-1 codes it transcribes
    prompt: bool  # conditions on a text prompt
    word_timestamps: bool
    timestamps: bool  # segment times fine enough for subtitles (srt, vtt)
    max_new_tokens: int  # the most tokens one decode may produce
    # How a live preview of an open segment is made: "forced_prefix" re-decodes the segment with its stable
    # words forced as the decoder's prefix (Whisper); "redecode" decodes the whole segment again; "cache_aware"
    # encodes each new chunk once against the stream's caches, the transcript only growing (Nemotron).
    streaming: Literal["forced_prefix", "redecode", "cache_aware"]
    temperature: bool = True  # samples at a temperature (else greedy only)
    # How the model itself names its languages (ISO code -> name), where that is what its reference server reports
    # in generation metadata (Qwen3-ASR: "English"); None: the ISO code is reported.
    language_names: Mapping[str, str] | None = None
    # The longest audio it takes in one request, where it has its own limit (None: the daemon's).
    max_audio_s: float | None = None
    # A language it does not know is refused (Nemotron: the language picks a prompt it must have), where the
    # others decode in a language they detect instead, as the reference servers do.
    refuses_unknown_language: bool = False
    # It detects no language: a request must name one (or the model's configured default_language applies); one
    # that names none is refused naming the field, before any model work (Cohere Transcribe).
    requires_language: bool = False
    # The language a request that names none decodes in (the model's configuration may set one); None: detect, or
    # for a model that requires a language, refused.
    default_language: str | None = None
    # Takes a per-request punctuation switch (a request's `punctuation`; None there is the model's default).
    punctuation: bool = False
    # Takes a per-request inverse text normalisation switch (a request's `use_itn`; None: the model's default).
    itn: bool = False
    # Audio longer than this reaches the model as the speech clips Silero VAD finds in it, none longer than this
    # (the model's own rule for long audio: SenseVoice); None: the model takes long audio whole.
    max_clip_s: float | None = None
    # Names it takes for a language beside ISO codes, kept as they are (Nemotron's prompt keys: "en-US").
    language_keys: tuple[str, ...] = ()
    # A cache-aware engine's chunk lengths in ms, the shortest first (a session's chunk_ms snaps to one).
    chunk_ms: tuple[int, ...] = ()
    # It names who speaks in each segment itself (MOSS-Transcribe-Diarize): speakers on its transcripts need no
    # diarization model.
    speakers: bool = False


@dataclass(frozen=True)
class Hypothesis:
    """A "redecode" engine's last decode of an open segment: what it shows, and what its next decode continues."""

    text: str
    raw: str  # the decoded answer as the model wrote it (the next decode's prefix comes from it)
    decodes: int  # decodes of this segment so far
    language: str | None  # detected or forced: forced for the rest of the segment
    raw_language: str | None = None  # the language forced in the decode that wrote ``raw`` (None: raw names it)
    tokens: tuple[int, ...] = ()


class TranscriptionEngine(Protocol):
    """Synchronous and thread-confined: only its runtime's worker thread calls transcribe/preview."""

    model_id: str
    kind: str

    @property
    def capabilities(self) -> Capabilities: ...

    def prompt_tokens(self, prompt: str | None) -> tuple[int, ...]: ...

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions, check: Check = ...,
                   on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript: ...

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]], opts: TranscribeOptions,
                         check: Check = ..., on_segment: Callable[[Segment], None] | None = None) -> Transcript: ...

    def preview(self, audio: np.ndarray, opts: TranscribeOptions, prefix: str = "", check: Check = ...) -> str: ...


class RedecodingEngine(TranscriptionEngine, Protocol):
    """An engine whose live previews re-decode the open segment (capabilities.streaming == "redecode")."""

    def redecode(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                 check: Check = ..., final: bool = False) -> Hypothesis: ...

    def redecode_program(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                         final: bool = False) -> Program: ...


@dataclass(frozen=True)
class Sentence:
    start: float  # seconds on the session's timeline
    end: float
    text: str


@dataclass(frozen=True)
class StreamUpdate:
    """What a live stream has given so far: its whole text (it only grows), and when finished its sentences."""

    text: str
    sentences: tuple[Sentence, ...] = ()


class StreamingEngine(TranscriptionEngine, Protocol):
    """A cache-aware engine (capabilities.streaming == "cache_aware"): a live session holds one stream, fed the
    audio that arrived since its last decode; each stream's state is a few fixed-size arrays."""

    def open_stream(self, language: str | None, chunk_ms: int | None, offset: float) -> Any:
        """A stream's handle (no model work: its arrays are made by its first program, on the worker thread).
        Raises EngineError for a language it lacks. ``offset``: where its audio starts on the session's timeline."""

    def stream_program(self, stream: Any, audio: np.ndarray, finish: bool) -> Program:
        """Feeds ``audio`` to the stream (then, with ``finish``, the end) -> StreamUpdate. A program that stops
        early leaves the stream where its last whole chunk left it: the audio is in it, the rest decodes next time."""


class BatchingEngine(TranscriptionEngine, Protocol):
    """An engine that runs many jobs together: each job is a program, ``batch()`` runs any number of them."""

    def batch(self, lane: Callable[[Any], Any] | None = None) -> Any: ...

    def transcribe_program(self, audio: np.ndarray, opts: TranscribeOptions,
                           on_segment: Callable[[Segment], None] | None = None,
                           on_progress: Callable[[float, float], None] | None = None) -> Program: ...

    def clips_program(self, audio: np.ndarray, clips: list[tuple[int, int]], opts: TranscribeOptions,
                      on_segment: Callable[[Segment], None] | None = None) -> Program: ...

    def preview_program(self, audio: np.ndarray, opts: TranscribeOptions, prefix: str = "") -> Program: ...

    def final_program(self, audio: np.ndarray, opts: TranscribeOptions, sent: str) -> Program: ...
