"""What a realtime session says happened, in the domain's terms: a turn started or stopped, a segment was
committed, a preview or a final is ready, a segment failed, a request was refused. The session emits these and
never builds a wire event; each dialect (realtime/protocol/) decides what its clients see of them.

Also the few turn rules in which the two dialects differ, given to the session as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from omnid.engine.interface import Sentence


@dataclass(frozen=True)
class SpeechStarted:
    item_id: str
    audio_start_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    item_id: str
    audio_end_ms: int


@dataclass(frozen=True)
class Committed:
    item_id: str
    previous_item_id: str | None


@dataclass(frozen=True)
class Cleared:
    pass


@dataclass(frozen=True)
class Preview:
    segment_id: int
    item_id: str
    text: str  # the whole current hypothesis of the open segment
    agreed: str  # words newly agreed by two successive previews: they will not change ("" when none)


@dataclass(frozen=True)
class Final:
    segment_id: int
    item_id: str
    text: str  # the authoritative transcript of the segment
    agreed: str  # the agreed words emitted before it (the final continues them under append-only rules)
    seconds: float  # audio the segment held
    sentences: tuple[Sentence, ...] | None = None  # a cache-aware stream's sentences, timed (None: other engines)
    speaker: str | None = None  # its speaker's label, in a session that asked for speakers (None: not asked, or
    # nobody heard yet)
    sentence_speakers: tuple[str | None, ...] | None = None  # each sentence's, where both are given


@dataclass(frozen=True)
class Failed:
    segment_id: int
    item_id: str
    busy: bool  # the machine was too busy (the engine queue was full), rather than the engine failing


@dataclass(frozen=True)
class Refused:
    code: str
    message: str
    param: str | None = None  # the setting it is about, where there is one


DomainEvent = Union[SpeechStarted, SpeechStopped, Committed, Cleared, Preview, Final, Failed, Refused]


@dataclass(frozen=True)
class TurnRules:
    """Where the dialects' turns differ."""

    min_commit_samples: int  # a commit of less audio is refused (0: any commit is taken)
    commit_opens_item: bool  # a commit without speech still makes an (empty) item
    append_only: bool  # agreed words are final: the final continues them
    keeps_text: bool  # the session's final texts are kept for its end (joined into one text)
    commit_ends_stream: bool = False  # a cache-aware session's commit ends it: later audio is refused
