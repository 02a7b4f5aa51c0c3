"""The Voxt dialect (wire-identical to the sglang-omni MLX servers): previews as the whole hypothesis of a segment,
sent only when it changed, one final per segment, the joined text at the end; no turn or item events."""

from __future__ import annotations

from collections.abc import Sequence

from omnid.engine.interface import Sentence
from omnid.realtime import events as de
from omnid.realtime.protocol import server_events as ev

RULES = de.TurnRules(min_commit_samples=0, commit_opens_item=False, append_only=False, keeps_text=True,
                     commit_ends_stream=True)


class VoxtWire:
    def __init__(self) -> None:
        self.shown: dict[int, str] = {}  # the preview text last sent, per open segment

    def __call__(self, event: de.DomainEvent) -> list[ev.ServerEvent]:
        if isinstance(event, de.Preview):
            if not event.text or event.text == self.shown.get(event.segment_id):
                return []
            self.shown[event.segment_id] = event.text
            return [ev.TranscriptionSegment(segment_id=event.segment_id, text=event.text, is_final=False)]
        if isinstance(event, de.Final):
            self.shown.pop(event.segment_id, None)
            return [ev.TranscriptionSegment(segment_id=event.segment_id, text=event.text, is_final=True,
                                            segments=sentences(event.sentences, event.sentence_speakers),
                                            speaker=event.speaker)]
        if isinstance(event, de.Failed):
            self.shown.pop(event.segment_id, None)
            return [ev.Error(error=ev.transcription_failed(event.busy))]
        if isinstance(event, de.Refused):
            return [ev.error(event.code, event.message, param=event.param)]
        if isinstance(event, de.Cleared):
            return [ev.Cleared()]
        return []  # turns and items are not part of this dialect



def sentences(said: tuple[Sentence, ...] | None, speakers: Sequence[str | None] | None = None
              ) -> list[ev.Sentence] | None:
    """Timed sentences on the wire, each with its speaker where the session asked for speakers ("" otherwise, as
    the reference server sends)."""
    if said is None:
        return None
    who = list(speakers or ()) + [None] * len(said)
    return [ev.Sentence(start=s.start, end=s.end, speaker=w or "", text=s.text) for s, w in zip(said, who)]
