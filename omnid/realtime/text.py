"""Text rules of realtime sessions: joining final segment texts (wire.md 3a, with the engines' join) and
LocalAgreement, which turns successive hypotheses of an open segment into append-only text (the OpenAI dialect's
deltas)."""

from __future__ import annotations

from omnid.engine.spacing import join_segments

__all__ = ["GrowingText", "LocalAgreement", "join_segments"]

class LocalAgreement:
    """Append-only text from revisions: a word is committed once two consecutive hypotheses agree on it and on
    everything before it. Constant in the number of revisions; reset per segment."""

    def __init__(self, hold_back: int = 0) -> None:
        # A hypothesis's last words may belong to a word still being spoken (or be the start of a sentence the model
    # has not yet punctuated): neither of the two hypotheses may commit them.
        self.hold_back = hold_back
        self.committed: list[str] = []
        self._previous: list[str] = []

    def update(self, hypothesis: str) -> str:
        """Feeds a new hypothesis; returns the newly committed text (possibly empty) to send as a delta."""
        words = hypothesis.split()
        agreed = 0
        h = self.hold_back
        for a, b in zip(self._previous[: max(0, len(self._previous) - h)], words[: max(0, len(words) - h)]):
            if a != b:
                break
            agreed += 1
        self._previous = words
        if agreed <= len(self.committed) or words[: len(self.committed)] != self.committed:
            return ""
        new = words[len(self.committed) : agreed]
        delta = (" " if self.committed else "") + " ".join(new)
        self.committed.extend(new)
        return delta

    def observe(self, hypothesis: str) -> None:
        """Takes a hypothesis too unsure to commit from as the one the next is compared with: the first
        committable hypothesis then needs no second one after it to agree."""
        self._previous = hypothesis.split()

    def text(self) -> str:
        return " ".join(self.committed)


class GrowingText:
    """Append-only text from a stream whose text only grows (a cache-aware engine): the text up to its last word is
    sent once that word has begun (the last one may still be growing); the deltas are slices of the text, spaces as
    they are. Its words are never revised, so no agreement is needed."""

    def __init__(self) -> None:
        self.sent = ""

    def update(self, text: str) -> str:
        """The stream's whole text so far -> the newly complete words, to send as a delta ("" when none). Finds
        the last word from the text's end rather than by a pattern over all of it (a day's stream holds a lot of
        text)."""
        start = len(text.rstrip())  # the last word: back from its end to the space before it
        while start > 0 and not text[start - 1].isspace():
            start -= 1
        if start <= len(self.sent) or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) : start], text[:start]
        return delta

    def text(self) -> str:
        return self.sent

