"""The OpenAI dialect (Realtime API transcription sessions): turn and item events, append-only deltas of agreed
words, and the authoritative completed transcript of each item."""

from __future__ import annotations

from omnid.audio import SAMPLE_RATE
from omnid.realtime import events as de
from omnid.realtime.protocol import server_events as ev

RULES = de.TurnRules(min_commit_samples=SAMPLE_RATE // 10, commit_opens_item=True, append_only=True, keeps_text=False)


class OpenAIWire:
    def __call__(self, event: de.DomainEvent) -> list[ev.ServerEvent]:
        if isinstance(event, de.SpeechStarted):
            return [ev.SpeechStarted(item_id=event.item_id, audio_start_ms=event.audio_start_ms)]
        if isinstance(event, de.SpeechStopped):
            return [ev.SpeechStopped(item_id=event.item_id, audio_end_ms=event.audio_end_ms)]
        if isinstance(event, de.Committed):
            return [ev.Committed(item_id=event.item_id, previous_item_id=event.previous_item_id)]
        if isinstance(event, de.Cleared):
            return [ev.Cleared()]
        if isinstance(event, de.Preview):
            return [ev.TranscriptDelta(item_id=event.item_id, content_index=0, delta=event.agreed)] if event.agreed else []
        if isinstance(event, de.Final):
            return self._final(event)
        if isinstance(event, de.Failed):
            return [ev.TranscriptFailed(item_id=event.item_id, content_index=0, error=ev.transcription_failed(event.busy))]
        return [ev.error(event.code, event.message, param=event.param)]

    @staticmethod
    def _final(event: de.Final) -> list[ev.ServerEvent]:
        """The rest of the text after the deltas already sent, then the authoritative transcript."""
        sent, text = event.agreed, event.text
        rest = text[len(sent):] if text.startswith(sent) else ""
        out: list[ev.ServerEvent] = []
        if sent and rest.strip() or (not sent and text):
            out.append(ev.TranscriptDelta(item_id=event.item_id, content_index=0, delta=rest if sent else text))
        out.append(ev.TranscriptCompleted(item_id=event.item_id, content_index=0, transcript=text,
                                          usage=ev.Usage(seconds=round(event.seconds, 3)), speaker=event.speaker))
        return out
