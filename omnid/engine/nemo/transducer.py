"""NeMo's transducer and CTC heads in numpy, and greedy decoding exactly as NeMo's ``transcribe()`` runs it.

The prediction network (an embedding with the blank as its padding row, then stacked LSTMs) and the joint
(encoder and prediction projections added, ReLU, the output layer) are small next to the encoder, and decoding is a
sequential loop of single-row steps: numpy runs them on the CPU on every platform (on Metal a GPU round trip per
step would cost more than the step). The encoder output is projected once for all frames.

Greedy decoding is NeMo 3.0.0's label-looping ``greedy_batch`` for one sequence
(``tdt_label_looping.py`` and ``rnnt_label_looping.py``, ``torch_impl``): start from the blank (SOS) through the
prediction network; at frame t take the best label (and for TDT the best duration); a blank moves t on (RNN-T: by
one; TDT: by its duration, 0 counted as 1) and is looked at again from the new frame with the same prediction
state; a label is emitted at the frame where it was found (with its duration: TDT moves t on by it, 0 staying on
the frame) and fed to the prediction network; after ``max_symbols`` labels emitted on one frame without moving,
t moves on by one. TDT's last durations are not clipped to the audio (NeMo's times can end past it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True)
class LstmLayer:
    """torch.nn.LSTM's weights for one layer (gates in torch's order: input, forget, cell, output)."""

    w_ih: np.ndarray  # (4H, in)
    w_hh: np.ndarray  # (4H, H)
    b_ih: np.ndarray  # (4H,)
    b_hh: np.ndarray  # (4H,)


@dataclass
class PredictionState:
    """The LSTMs' hidden and cell states, (layers, H) each: a few fixed-size arrays per sequence."""

    h: np.ndarray
    c: np.ndarray


@dataclass(frozen=True)
class PredictionNetwork:
    embed: np.ndarray  # (vocabulary + 1, H): the blank's row last
    layers: tuple[LstmLayer, ...]

    def initial(self) -> PredictionState:
        n, hidden = len(self.layers), self.layers[0].w_hh.shape[1]
        return PredictionState(np.zeros((n, hidden), np.float32), np.zeros((n, hidden), np.float32))

    def step(self, token: int, state: PredictionState) -> tuple[np.ndarray, PredictionState]:
        """Feeds one token: the last layer's output (H,) and the new state."""
        x = self.embed[token]
        h, c = np.empty_like(state.h), np.empty_like(state.c)
        for i, layer in enumerate(self.layers):
            gates = layer.w_ih @ x + layer.b_ih + (layer.w_hh @ state.h[i] + layer.b_hh)
            gi, gf, gg, go = np.split(gates, 4)
            c[i] = _sigmoid(gf) * state.c[i] + _sigmoid(gi) * np.tanh(gg)
            h[i] = _sigmoid(go) * np.tanh(c[i])
            x = h[i]
        return x, PredictionState(h, c)


@dataclass(frozen=True)
class Joint:
    enc_weight: np.ndarray  # (J, encoder width)
    enc_bias: np.ndarray
    pred_weight: np.ndarray  # (J, prediction width)
    pred_bias: np.ndarray
    out_weight: np.ndarray  # (vocabulary + 1 + durations, J)
    out_bias: np.ndarray

    def project_encoder(self, encoded: np.ndarray) -> np.ndarray:
        return encoded @ self.enc_weight.T + self.enc_bias

    def project_prediction(self, g: np.ndarray) -> np.ndarray:
        return self.pred_weight @ g + self.pred_bias

    def logits(self, f: np.ndarray, g: np.ndarray) -> np.ndarray:
        return self.out_weight @ np.maximum(f + g, 0.0) + self.out_bias


@dataclass(frozen=True)
class Decoding:
    """A greedy decode between chunks of frames: the joint's projection of the prediction network's output and its
    state after the last label, and the frames decoded so far. A few fixed-size arrays per stream."""

    g: np.ndarray
    state: PredictionState
    frames: int


@dataclass(frozen=True)
class Token:
    id: int
    frame: int  # the encoder frame it was emitted at (80 ms each)
    duration: int | None  # TDT's predicted duration in frames; None for RNN-T and CTC


@dataclass(frozen=True)
class Transducer:
    prediction: PredictionNetwork
    joint: Joint
    blank: int  # the vocabulary's size: the last class
    durations: tuple[int, ...]  # TDT's duration set; empty for RNN-T
    max_symbols: int  # labels on one frame before it moves on: bounds the loop

    def greedy(self, encoded: np.ndarray) -> list[Token]:
        """(frames, encoder width) -> the greedy tokens."""
        return self.continue_greedy(encoded, self.start(), whole=True)[0]

    def start(self) -> Decoding:
        """A decode before any frame: the prediction network fed the blank (NeMo's start of sequence)."""
        g, state = self._predict(self.blank, self.prediction.initial())
        return Decoding(g, state, 0)

    def continue_greedy(self, encoded: np.ndarray, decoding: Decoding,
                        whole: bool = False) -> tuple[list[Token], Decoding]:
        """The greedy tokens of the next frames of a sequence, from where ``decoding`` left it (token frames on the
        whole sequence's axis), and where it leaves it. For RNN-T a boundary between chunks of frames is like any
        other frame boundary, so decoding chunk after chunk gives the whole sequence's tokens; TDT's durations can
        reach past a chunk's end, so it decodes ``whole`` sequences only."""
        if self.durations and not whole:
            raise ValueError("TDT decodes whole sequences")
        frames, offset = len(encoded), decoding.frames
        if frames == 0:
            return [], decoding
        f = self.joint.project_encoder(encoded)
        last = frames - 1
        g, state = decoding.g, decoding.state
        tokens: list[Token] = []
        t, run_frame, run = 0, -1, 0
        while t < frames:
            label, duration = self._best(f[min(t, last)], g)
            at = t
            t += duration
            while label == self.blank and t < frames:
                at = t
                label, duration = self._best(f[t], g)
                t += duration
            if label == self.blank:
                break  # a blank ran past the last frame
            tokens.append(Token(label, offset + at, duration if self.durations else None))
            run = run + 1 if run_frame == at else 1
            run_frame = at
            g, state = self._predict(label, state)
            if run >= self.max_symbols and run_frame == t:
                t += 1
        return tokens, Decoding(g, state, offset + frames)

    def _best(self, f: np.ndarray, g: np.ndarray) -> tuple[int, int]:
        """The best label and how far it moves t: TDT's duration (0 as 1 for a blank), RNN-T's 1 for a blank."""
        logits = self.joint.logits(f, g)
        label = int(np.argmax(logits[: self.blank + 1]))
        if not self.durations:
            return label, 1 if label == self.blank else 0
        duration = self.durations[int(np.argmax(logits[self.blank + 1 :]))]
        if label == self.blank and duration == 0:
            duration = 1
        return label, duration

    def _predict(self, token: int, state: PredictionState) -> tuple[np.ndarray, PredictionState]:
        out, state = self.prediction.step(token, state)
        return self.joint.project_prediction(out), state


@dataclass(frozen=True)
class Ctc:
    """NeMo's ConvASRDecoder: a 1x1 convolution to the classes (the blank last)."""

    weight: np.ndarray  # (vocabulary + 1, encoder width)
    bias: np.ndarray

    def frame_labels(self, encoded: np.ndarray) -> np.ndarray:
        """The best class of each frame (log-softmax, which NeMo applies, changes no argmax)."""
        return np.argmax(encoded @ self.weight.T + self.bias, axis=-1)

    def greedy(self, encoded: np.ndarray) -> list[Token]:
        """The best class per frame, repeats merged, blanks dropped; each token at its run's first frame."""
        best = self.frame_labels(encoded)
        blank = len(self.bias) - 1
        return [Token(int(b), i, None) for i, b in enumerate(best) if b != blank and (i == 0 or b != best[i - 1])]
