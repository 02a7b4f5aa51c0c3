"""What a realtime session and its streaming strategy say to each other.

A session owns what every streaming mode shares: the audio buffer, Silero VAD and the turns, the events, the bounds,
and the queue of finals, sent in order. How its open segment becomes text is its strategy's: the re-decoding one
(realtime/redecode.py: previews decode the segment again, its final is a whole decode, started early at a pause) or
the cache-aware stream (realtime/stream.py: each chunk encoded once, the final only the stream's tail). A strategy
holds its open segment, typed as its own, and the decodes in flight for it; the session reaches both only through
``Strategy``, and a strategy reaches its session only through ``Host``. A new streaming mode is a new strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from omnid.config import RealtimeConfig, TranscriptionConfig
from omnid.engine.interface import Sentence, TranscriptionEngine
from omnid.realtime.buffer import AudioBuffer
from omnid.realtime.events import DomainEvent, TurnRules
from omnid.realtime.settings import Settings
from omnid.runtime.scheduler import EngineRuntime
from omnid.vad.segments import TurnDetector


class SessionError(Exception):
    """Ends the session: the connection sends this error, then closes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass
class Segment:
    """What the session knows of a segment, whatever decodes it; each strategy's segment adds its own state."""

    index: int  # Voxt segment_id, from 0
    item_id: str  # OpenAI item id
    start: int  # absolute 16 kHz sample
    speech_at: int | None = None  # first window above the speech threshold
    end: int | None = None  # absolute 16 kHz sample where it closed (None: open)


class Decoded(NamedTuple):
    """A final's text, and its timed sentences where the strategy has them (None: it has none)."""

    text: str
    sentences: tuple[Sentence, ...] | None = None


class FinalJob(Protocol):
    """A closed segment waiting for its final: the session queues it and sends its result in turn."""

    closed_at: float  # monotonic time the segment ended (latency is measured from here)

    @property
    def segment(self) -> Segment:
        """The closed segment (its strategy's own)."""

    @property
    def samples(self) -> int:
        """The audio it still holds to decode: counted in the session's backlog until its final is out."""

    @property
    def seconds(self) -> float:
        """The audio the segment held."""

    @property
    def agreed(self) -> str:
        """The words its previews made final (the final continues them under append-only rules)."""

    async def decode(self) -> Decoded:
        """Its final text. Raises what the engine raised: the session reports the segment failed."""

    def cancel(self) -> None:
        """The session is closing: its decodes stop now."""


class Host(Protocol):
    """What a strategy reads of its session (and the one counter it moves). The session may swap its buffer, turn
    detector and settings on an update, so a strategy reads them here each time rather than keeping them."""

    rules: TurnRules
    config: RealtimeConfig
    transcription: TranscriptionConfig
    settings: Settings
    buffer: AudioBuffer
    turns: TurnDetector | None
    prompt_tokens: tuple[int, ...]  # of settings.prompt, for the settings' model
    input_samples: int  # at the client's rate, appended so far
    speculations: int  # finals started before their turn ended, so far
    emit: Callable[[DomainEvent], None]

    @property
    def runtime(self) -> EngineRuntime[TranscriptionEngine]:
        """The settings' model's runtime."""

    def trim(self) -> None:
        """Consumes the audio nothing needs any more (what the open segment needs is ``Strategy.needed_from``)."""


class Strategy(Protocol):
    """How one streaming mode turns a session's open segment into previews and a final. The session calls these in
    this order: ``admits`` before taking audio; ``open`` when a segment starts; ``heard`` after each VAD window;
    ``advance`` once the audio of an append is analysed; ``close`` when the segment ends; ``committed`` after a
    commit; ``drop`` when the client clears the buffer or the session closes."""

    settings_fixed_by_audio: bool  # its settings cannot change once audio came (a stream's are its state)
    timed: bool  # its finals carry timed sentences (the Voxt session's end lists them)

    @property
    def segment(self) -> Segment | None:
        """The open segment."""

    @property
    def listens(self) -> bool:
        """Speech probabilities decide something: without, the session runs no VAD on its audio."""

    @property
    def segment_limit(self) -> int | None:
        """Samples after which the open segment is cut at its quietest moment (None: it is never cut)."""

    def admits(self, samples: int) -> bool:
        """Whether ``samples`` more of the client's audio are taken (False: refused, the session goes on). Raises
        SessionError where they end the session."""

    def open(self, index: int, item_id: str, start: int) -> Segment:
        """Opens the segment that starts at ``start``."""

    def needed_from(self) -> int | None:
        """The first sample the open segment still needs in the buffer (None: no segment is open)."""

    def heard(self, now: int) -> None:
        """The VAD has judged the audio up to ``now``, and the turn detector has seen it."""

    def advance(self) -> None:
        """New audio is in the buffer: starts the decode it calls for, if any."""

    def close(self, end: int) -> FinalJob:
        """Ends the open segment at ``end`` (before the buffer gives up that audio); returns its final's job."""

    def committed(self) -> None:
        """The client committed its audio."""

    def drop(self) -> None:
        """Forgets the open segment, its decodes cancelled."""
