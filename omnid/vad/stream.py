"""Streaming Silero VAD: per-stream state that never grows, and many streams stepped as one batch."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from omnid.vad.silero import CONTEXT, HIDDEN, WINDOW, SileroVAD


@dataclass
class VadStream:
    """One stream's whole state: LSTM h and c, the last 64 samples, fewer than 512 pending samples, and how
    many windows it has completed (so probabilities can be placed in time)."""

    h: np.ndarray = field(default_factory=lambda: np.zeros(HIDDEN, np.float32))
    c: np.ndarray = field(default_factory=lambda: np.zeros(HIDDEN, np.float32))
    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT, np.float32))
    pending: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    windows: int = 0

    def reset(self) -> None:
        self.h[:] = 0
        self.c[:] = 0
        self.context[:] = 0
        self.pending = np.zeros(0, np.float32)
        self.windows = 0

    def take_windows(self, samples: np.ndarray) -> list[np.ndarray]:
        """Adds samples; returns each completed window with its 64 samples of context (576 samples)."""
        data = np.concatenate([self.pending, np.asarray(samples, np.float32)])
        n = len(data) // WINDOW
        self.pending = data[n * WINDOW :].copy()
        out = []
        context = self.context
        for i in range(n):
            window = data[i * WINDOW : (i + 1) * WINDOW]
            out.append(np.concatenate([context, window]))
            context = window[-CONTEXT:]
        self.context = context.copy()
        return out


def feed_many(model: SileroVAD, feeds: list[tuple[VadStream, np.ndarray]]) -> list[np.ndarray]:
    """Feeds each stream its samples and returns each stream's new window probabilities. Step k runs the k-th
    new window of every stream that has one as a single batched MLX call (an LSTM's windows are sequential
    within a stream, independent across streams). A stream may appear once per call."""
    windows = [stream.take_windows(samples) for stream, samples in feeds]
    probs: list[list[float]] = [[] for _ in feeds]
    for k in range(max((len(w) for w in windows), default=0)):
        rows = [i for i, w in enumerate(windows) if len(w) > k]
        streams = [feeds[i][0] for i in rows]
        p, h, c = model.step(
            np.stack([windows[i][k] for i in rows]),
            np.stack([s.h for s in streams]),
            np.stack([s.c for s in streams]),
        )
        for j, (i, stream) in enumerate(zip(rows, streams)):
            stream.h, stream.c = h[j], c[j]
            stream.windows += 1
            probs[i].append(float(p[j]))
    return [np.array(p, np.float32) for p in probs]


def probabilities(model: SileroVAD, audio: np.ndarray, check=lambda: None) -> np.ndarray:
    """Every 512-sample window of a whole buffer, the last one zero-padded, as Silero's reference does. Only the
    last step is padded (a copy of an hour of audio would cost 230 MB)."""
    stream = VadStream()
    audio = np.asarray(audio, np.float32)
    out = []
    step = WINDOW * 256  # ~8 s per call keeps cancellation responsive
    for start in range(0, len(audio), step):
        check()
        chunk = audio[start : start + step]
        if len(chunk) % WINDOW:
            chunk = np.concatenate([chunk, np.zeros(-len(chunk) % WINDOW, np.float32)])
        out.append(feed_many(model, [(stream, chunk)])[0])
    return np.concatenate(out) if out else np.zeros(0, np.float32)
