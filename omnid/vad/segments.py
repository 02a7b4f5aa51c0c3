"""From speech probabilities to speech: Silero's timestamp rules over a whole buffer, and a streaming turn
detector with OpenAI's ``server_vad`` knobs for realtime sessions."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.vad.silero import WINDOW


@dataclass(frozen=True)
class SpeechParams:
    threshold: float = 0.5
    min_speech_duration_ms: int = 250
    min_silence_duration_ms: int = 100
    speech_pad_ms: int = 30
    max_speech_duration_s: float = math.inf
    # A silence at least this long inside over-long speech is a place where it may be split.
    min_silence_at_max_speech_ms: int = 98


@dataclass
class _Tracker:
    """The state of Silero's pass: the open segment, a pending end, and split points for over-long speech."""

    start: int | None = None
    temp_end: int = 0
    possible_ends: list[tuple[int, int]] = field(default_factory=list)

    def open(self, at: int) -> None:
        self.start, self.temp_end, self.possible_ends = at, 0, []


def speech_timestamps(probs: np.ndarray, n_samples: int, p: SpeechParams = SpeechParams()) -> list[dict[str, int]]:
    """Speech segments as sample offsets, following Silero's get_speech_timestamps: speech starts at a window
    >= threshold, ends after min_silence of windows < threshold - 0.15, is dropped when shorter than min_speech,
    is split at its longest inner silence (or cut) when longer than max_speech, and is padded by speech_pad."""
    sr = SAMPLE_RATE
    neg_threshold = max(p.threshold - 0.15, 0.01)
    min_speech = sr * p.min_speech_duration_ms / 1000
    min_silence = sr * p.min_silence_duration_ms / 1000
    pad = sr * p.speech_pad_ms / 1000
    max_speech = sr * p.max_speech_duration_s - WINDOW - 2 * pad
    split_silence = sr * p.min_silence_at_max_speech_ms / 1000
    speeches: list[dict[str, int]] = []
    t = _Tracker()

    for i, prob in enumerate(probs):
        at = WINDOW * i
        if prob >= p.threshold and t.temp_end:
            silence = at - t.temp_end
            if silence > split_silence:
                t.possible_ends.append((t.temp_end, silence))
            t.temp_end = 0
        if prob >= p.threshold and t.start is None:
            t.open(at)
            continue
        if t.start is not None and at - t.start > max_speech:
            if t.possible_ends:
                end, silence = max(t.possible_ends, key=lambda e: e[1])
                speeches.append({"start": t.start, "end": end})
                resume = end + silence
                if resume < end + at:  # the split silence ended before now: speech resumed there
                    t.open(resume)
                else:
                    t.start = None
            else:
                speeches.append({"start": t.start, "end": at})
                t.start = None
                continue
        if prob < neg_threshold and t.start is not None:
            if not t.temp_end:
                t.temp_end = at
            if at - t.temp_end < min_silence:
                continue
            if t.temp_end - t.start > min_speech:
                speeches.append({"start": t.start, "end": t.temp_end})
            t.start = None
            t.temp_end = 0
    if t.start is not None and n_samples - t.start > min_speech:
        speeches.append({"start": t.start, "end": n_samples})
    return _pad(speeches, pad, n_samples)


def _pad(speeches: list[dict[str, int]], pad: float, n_samples: int) -> list[dict[str, int]]:
    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - pad))
        if i + 1 < len(speeches):
            following = speeches[i + 1]
            gap = following["start"] - speech["end"]
            if gap < 2 * pad:  # share a short gap between neighbours
                speech["end"] += int(gap // 2)
                following["start"] = int(max(0, following["start"] - gap // 2))
            else:
                speech["end"] = int(min(n_samples, speech["end"] + pad))
                following["start"] = int(max(0, following["start"] - pad))
        else:
            speech["end"] = int(min(n_samples, speech["end"] + pad))
    return speeches


@dataclass(frozen=True)
class TurnEvent:
    kind: str  # "speech_started" | "speech_stopped"
    sample: int  # position in the stream, 16 kHz samples


class TurnDetector:
    """OpenAI-style server VAD over a stream of window probabilities: speech starts at the first window at or
    above ``threshold`` (reported ``prefix_padding_ms`` earlier), and stops once ``silence_duration_ms`` of
    windows below it have passed (reported where the silence began). Constant state."""

    def __init__(self, threshold: float = 0.5, prefix_padding_ms: int = 300, silence_duration_ms: int = 500):
        self.threshold = threshold
        self.prefix = SAMPLE_RATE * prefix_padding_ms // 1000
        self.silence = SAMPLE_RATE * silence_duration_ms // 1000
        self.in_speech = False
        self.silence_from: int | None = None
        self.window = 0

    def end_turn(self) -> None:
        """The turn was ended from outside (a commit or a clear): the next speech starts a new one."""
        self.in_speech = False
        self.silence_from = None

    def push(self, probs: np.ndarray) -> list[TurnEvent]:
        events = []
        for prob in probs:
            start, end = self.window * WINDOW, (self.window + 1) * WINDOW
            self.window += 1
            if prob >= self.threshold:
                self.silence_from = None
                if not self.in_speech:
                    self.in_speech = True
                    events.append(TurnEvent("speech_started", max(0, start - self.prefix)))
            elif self.in_speech:
                if self.silence_from is None:
                    self.silence_from = start
                if end - self.silence_from >= self.silence:
                    self.in_speech = False
                    events.append(TurnEvent("speech_stopped", self.silence_from))
                    self.silence_from = None
        return events
