"""A tiny Sortformer that tells the test corpus's two English speakers apart, for the live speakers' tests.

The golden tiny Sortformer (random weights, written by NeMo) gives every frame of speech the same speaker slot, so
a test of who spoke when could not fail on it. This one is that checkpoint, in the mlx-community layout (mlx-audio's
converter, tests/sortformer_reference.py), changed in two ways: the residual branches of its FastConformer and
Transformer layers are zero (each frame's hidden state then depends on its own stretch of spectrum through the
subsampling convolutions and the norms), and its speaker head is fitted, by logistic regression in numpy, to put
LJ Speech's reader on slot 0 and "michael" of the MFA corpus on slot 1 over the conversation the tests stream. It is
a fixture whose answers differ by speaker, not a model of speakers (fitted on other clips of the same two voices,
such a head could not tell them apart): the tests check that a live session's speakers are what the same model gives
for the whole file, which a model with one answer for everything would pass without showing anything. Built once
per test session in a temporary folder; deterministic."""

from __future__ import annotations

import re
from pathlib import Path

import mlx.core as mx
import numpy as np

from omnid.audio import decode_audio
from omnid.engine.diarization import SAMPLES_PER_FRAME

ROOT = Path(__file__).parent
NEMO = ROOT / "goldens" / "sortformer_tiny" / "tiny.nemo"
CORPUS = ROOT / "corpus" / "audio" / "en"
RATE = 16000
# The residual branches zeroed: FastConformer's feed-forwards, attention output and convolution module output;
# the Transformer's attention output and second feed-forward layer.
ZEROED = re.compile(r"^(fc_encoder\.layers\.\d+\.(feed_forward[12]\.linear2|self_attn\.o_proj|conv\.pointwise_conv2)"
                    r"|tf_encoder\.layers\.\d+\.(self_attn\.out_proj|fc2))\.(weight|bias)$")
HEAD = "sortformer_modules.single_hidden_to_spks"
LJ, MICHAEL = 0, 1  # the slots the head is fitted to
PAUSE_S = 0.8


def clip(name: str) -> np.ndarray:
    return decode_audio((CORPUS / f"{name}.flac").read_bytes())


def michael() -> np.ndarray:
    return clip("mfa_cold_corpus")


def conversation() -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Five turns, LJ and michael alternating, PAUSE_S of silence after each; with each turn's [start, end)
    samples."""
    m = michael()
    turns = [clip("ljspeech_LJ001-0004"), m[: 4 * RATE], clip("ljspeech_LJ001-0011"), m[4 * RATE : 8 * RATE],
             clip("ljspeech_LJ001-0020")]
    return _joined(turns)


def _joined(turns: list[np.ndarray]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    pause = np.zeros(int(PAUSE_S * RATE), np.float32)
    parts, spans, pos = [], [], 0
    for t in turns:
        parts += [t, pause]
        spans.append((pos, pos + len(t)))
        pos += len(t) + len(pause)
    return np.concatenate(parts), spans


def build(folder: Path) -> Path:
    """Writes the checkpoint (config.json, model.safetensors) into ``folder``."""
    from omnid.engine.sortformer.engine import SortformerEngine
    from tests.sortformer_reference import convert

    convert(NEMO, folder, "sinusoid")
    weights = dict(mx.load(str(folder / "model.safetensors")))
    weights |= {k: mx.zeros_like(v) for k, v in weights.items() if ZEROED.match(k)}
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    engine = SortformerEngine("two-speakers", folder)
    features, targets = _training_frames(engine)
    w, b = _fit(features, targets)
    weights[f"{HEAD}.weight"], weights[f"{HEAD}.bias"] = mx.array(w), mx.array(b)
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder


def _training_frames(engine) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """The head's inputs (the hidden state after first_hidden_to_hidden) over the conversation, fed as a live
    stream in 12-frame feeds, and each frame's slot: LJ, MICHAEL, or -1 where the frame is near silent."""
    audio, spans = conversation()
    who = [LJ, MICHAEL, LJ, MICHAEL, LJ]
    frames = len(audio) // SAMPLES_PER_FRAME
    rms = np.sqrt((audio[: frames * SAMPLES_PER_FRAME].reshape(frames, -1) ** 2).mean(axis=1))
    target = np.full(frames, -1)
    for (a, b), slot in zip(spans, who):
        span = slice(a // SAMPLES_PER_FRAME, b // SAMPLES_PER_FRAME)
        target[span] = np.where(rms[span] > 0.01, slot, -1)
    heads = engine.model.sortformer_modules
    hidden: list[np.ndarray] = []
    speakers = type(heads).speakers

    def keep(self, h):  # type: ignore[no-untyped-def]
        mx.eval(h)
        x = np.maximum(np.asarray(h)[0], 0.0)
        layer = self.first_hidden_to_hidden
        hidden.append(np.maximum(x @ np.asarray(layer.weight).T + np.asarray(layer.bias), 0.0))
        return speakers(self, h)

    type(heads).speakers = keep
    try:
        stream, k = engine.new_stream(), 12
        for start in range(0, frames - k + 1, k):
            engine.feed(stream, audio[start * SAMPLES_PER_FRAME : (start + k) * SAMPLES_PER_FRAME - 1], 188, 188)
    finally:
        type(heads).speakers = speakers
    features = np.concatenate([h[-k:] for h in hidden])  # each feed's own frames come last in its forward pass
    return features, target[: len(features)]


def _fit(x: np.ndarray, target: np.ndarray, steps: int = 3000, rate: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Logistic regression of each slot's probability on the standardised features, the two speakers' frames
    weighted equally; returned as the head's (4, width) weight and (4,) bias on the raw features."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-3
    z = (x - mean) / scale
    y = np.zeros((len(target), 4))
    y[target == LJ, LJ] = 1.0
    y[target == MICHAEL, MICHAEL] = 1.0
    weight = np.where(target == MICHAEL, (target == LJ).sum() / max((target == MICHAEL).sum(), 1), 1.0)[:, None]
    w, b = np.zeros((z.shape[1], 4)), np.full(4, -2.0)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(z @ w + b)))
        g = (p - y) * weight
        w -= rate * (z.T @ g / len(z) + 1e-3 * w)
        b -= rate * g.mean(axis=0)
    return (w / scale[:, None]).T.astype(np.float32), (b - (mean / scale) @ w).astype(np.float32)
