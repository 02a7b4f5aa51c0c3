"""Speech-only file transcription: the parts of a file Silero VAD hears speech in.

Whisper, given silence or noise, invents words ("you you you ..."); a transcription service must not. A file
without speech is therefore never decoded, and a silence longer than ``min_silence_s`` separates two parts that
are transcribed on their own (keeping ``pad_s`` of the silence at each edge). Anything shorter is kept as it is,
so speech with ordinary pauses reaches the model unchanged and transcribes exactly as without the filter.
"""

from __future__ import annotations

import numpy as np

from omnid.audio import SAMPLE_RATE
from omnid.vad.segments import SpeechParams, speech_timestamps


def speech_clips(probs: np.ndarray, n_samples: int, threshold: float, max_clip_s: float,
                 pad_s: float) -> list[tuple[int, int]]:
    """A long file as a model that takes clips of at most ``max_clip_s`` needs it (SenseVoice): Silero's speech
    segments (speech running on past the limit split where Silero's own rule splits it, at its last pause, else at
    the limit), then neighbours joined while the joined clip stays within the limit, as funasr's merge_vad joins
    its VAD's segments. None of them longer than the limit; silence between clips is never decoded."""
    params = SpeechParams(threshold=threshold, speech_pad_ms=int(pad_s * 1000), max_speech_duration_s=max_clip_s)
    limit = int(max_clip_s * SAMPLE_RATE)
    clips: list[tuple[int, int]] = []
    for seg in speech_timestamps(probs, n_samples, params):
        start, end = seg["start"], min(seg["end"], seg["start"] + limit)
        if clips and end - clips[-1][0] <= limit:
            clips[-1] = (clips[-1][0], end)
        else:
            clips.append((start, end))
    return clips


def speech_spans(probs: np.ndarray, n_samples: int, threshold: float, min_silence_s: float,
                 pad_s: float) -> list[tuple[int, int]]:
    """The parts of the audio to transcribe (sample offsets), from Silero's window probabilities: none when it
    holds no speech, the whole of it when no silence is longer than ``min_silence_s``."""
    params = SpeechParams(threshold=threshold, min_silence_duration_ms=int(min_silence_s * 1000),
                          speech_pad_ms=int(pad_s * 1000))
    spans = [(s["start"], s["end"]) for s in speech_timestamps(probs, n_samples, params)]
    if not spans:
        return []
    gap = int(min_silence_s * SAMPLE_RATE)
    # Silences up to the gap are kept, at the file's edges too: only long ones are cut.
    if spans[0][0] <= gap:
        spans[0] = (0, spans[0][1])
    if n_samples - spans[-1][1] <= gap:
        spans[-1] = (spans[-1][0], n_samples)
    merged = [spans[0]]
    for start, end in spans[1:]:
        if start - merged[-1][1] <= gap:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged
