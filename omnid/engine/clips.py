"""A model that decodes at most ``max_clip_s`` of audio at once (SenseVoice, Fun-ASR-Nano) transcribes a file in
clips: the speech clips the daemon's VAD found (runtime/transcription.model_clips), each cut at the limit where it
runs on, or, given none, the audio cut at the limit. Each clip is decoded on its own and becomes a segment on the
file's timeline; the transcript's text is the segments' joined with a space (as funasr joins its VAD segments)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.engine.interface import Hypothesis
from omnid.engine.options import TranscribeOptions
from omnid.engine.transcript import Segment, Transcript, Word, after_prefix

HOP = 160  # samples per 10 ms: a segment's seek is in these, as Whisper counts it
# One clip's decode: (its samples, its first sample on the file's timeline, the segment id it would get) ->
# (its segment, or None when it says nothing; the tokens it generated; "stop" or "length").
DecodeClip = Callable[[np.ndarray, int, int], tuple[Segment | None, int, str]]


def whole(length: int, max_clip_s: float) -> list[tuple[int, int]]:
    """Audio given without clips: cut at the limit (one clip up to it)."""
    step = max(1, int(max_clip_s * SAMPLE_RATE))
    return [(a, min(a + step, length)) for a in range(0, max(length, 1), step)]


def transcribe_in_clips(audio: np.ndarray, clips: list[tuple[int, int]], max_clip_s: float, decode: DecodeClip,
                        language: str, check: Callable[[], None],
                        on_segment: Callable[[Segment], None] | None = None,
                        on_progress: Callable[[float, float], None] | None = None) -> Transcript:
    duration = len(audio) / SAMPLE_RATE
    step = max(1, int(max_clip_s * SAMPLE_RATE))
    segments: list[Segment] = []
    generated, finish = 0, "stop"
    for first, last in clips:
        for a in range(first, last, step):
            b = min(a + step, last)
            check()
            seg, count, ended = decode(audio[a:b], a, len(segments))
            generated += count
            finish = ended if ended != "stop" else finish
            if seg is not None:
                if on_segment is not None:  # after the first, a segment's text continues the text: a space first
                    on_segment(replace(seg, text=" " + seg.text) if segments else seg)
                segments.append(seg)
            if on_progress is not None:
                on_progress(b / SAMPLE_RATE, duration)
    language = next((s.language for s in segments if s.language), None) or language
    return Transcript(" ".join(s.text for s in segments), segments, language, duration, generated, finish)


def clip_segment(seg_id: int, first: int, samples: int, text: str, tokens: list[int], language: str | None,
                 words: list[Word] | None = None, emotion: str | None = None,
                 events: tuple[str, ...] | None = None) -> Segment:
    """A clip's segment: its span on the file's timeline (``samples`` from sample ``first``), its text and tokens,
    and what else the model tells."""
    return Segment(seg_id, first // HOP, first / SAMPLE_RATE, (first + samples) / SAMPLE_RATE, text, tokens, 0.0, 0.0,
                   0.0, 0.0, words, language, emotion, events)


class RedecodesWhole(ABC):
    """Previews and live re-decodes of an engine that keeps no state between decodes: each is its transcription of
    the open segment's audio (the clip engines; MOSS-Transcribe-Diarize)."""

    @abstractmethod
    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(),
                   check: Callable[[], None] = lambda: None, on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """16 kHz mono float32 -> transcript."""

    def preview(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(), prefix: str = "",
                check: Callable[[], None] = lambda: None) -> str:
        """The clip's text; with ``prefix`` (words a realtime final has already sent) a text that starts with it."""
        return after_prefix(self.transcribe(audio, opts, check).text, prefix)

    def redecode(self, audio: np.ndarray, opts: TranscribeOptions, previous: Hypothesis | None,
                 check: Callable[[], None] = lambda: None, final: bool = False) -> Hypothesis:
        """A live preview: the whole open segment decoded again (no state kept between decodes)."""
        transcript = self.transcribe(audio, opts, check)
        return Hypothesis(text=transcript.text, raw=transcript.text, decodes=(previous.decodes if previous else 0) + 1,
                          language=transcript.language or None)


class ClipEngine(RedecodesWhole):
    """The transcription calls of an engine that decodes clip by clip (SenseVoice, Fun-ASR-Nano): it gives
    ``max_clip_s`` and ``clip`` (one clip's decode); transcripts, previews and live re-decodes follow from them."""

    max_clip_s: float

    @abstractmethod
    def clip(self, audio: np.ndarray, first: int, opts: TranscribeOptions, seg_id: int,
             check: Callable[[], None]) -> tuple[Segment | None, int, str]:
        """One clip (from sample ``first`` of the file) -> its segment (None when it says nothing), the tokens it
        generated, and "stop" or "length"."""

    def transcribe(self, audio: np.ndarray, opts: TranscribeOptions = TranscribeOptions(),
                   check: Callable[[], None] = lambda: None, on_segment: Callable[[Segment], None] | None = None,
                   on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """16 kHz mono float32 -> transcript: one decode up to max_clip_s, else one per max_clip_s."""
        return self.transcribe_clips(np.asarray(audio, np.float32), whole(len(audio), self.max_clip_s), opts, check,
                                     on_segment, on_progress)

    def transcribe_clips(self, audio: np.ndarray, clips: list[tuple[int, int]],
                         opts: TranscribeOptions = TranscribeOptions(), check: Callable[[], None] = lambda: None,
                         on_segment: Callable[[Segment], None] | None = None,
                         on_progress: Callable[[float, float], None] | None = None) -> Transcript:
        """Only the given sample spans (the speech a VAD found), each decoded on its own."""
        return transcribe_in_clips(audio, clips, self.max_clip_s,
                                   lambda piece, first, seg_id: self.clip(piece, first, opts, seg_id, check),
                                   opts.language or "", check, on_segment, on_progress)

