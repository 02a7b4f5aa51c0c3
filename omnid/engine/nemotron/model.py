"""Nemotron streaming ASR: NeMo's log-mel (no normalisation), the shared FastConformer in its cache-aware variant
(causal subsampling and convolutions, chunked-limited attention), the language prompt fused into each encoder frame,
and Parakeet's RNN-T (prediction network and joint), decoded greedily as NeMo does.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.nemo.fastconformer import FastConformer
from omnid.engine.nemo.features import log_mel
from omnid.engine.nemotron.checkpoint import Checkpoint
from omnid.engine.parakeet.model import transducer


class Prompt(nn.Module):
    """NeMo's prompt_kernel: [encoded, one-hot(prompt)] -> Linear -> ReLU -> Linear, per frame."""

    def __init__(self, d_model: int, num_prompts: int):
        super().__init__()
        self.num_prompts = num_prompts
        self.layers = [nn.Linear(d_model + num_prompts, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model)]

    def __call__(self, encoded: mx.array, index: int) -> mx.array:
        """encoded (B, T, d_model) -> (B, T, d_model). The one-hot's product is a column of the first weight."""
        first, second = self.layers[0], self.layers[2]
        m = encoded.shape[-1]
        hidden = encoded @ first.weight[:, :m].T + (first.bias + first.weight[:, m + index])
        return second(nn.relu(hidden))


class Nemotron:
    def __init__(self, ckpt: Checkpoint):
        d = ckpt.dims
        self.front, self.dims, self.streaming, self.vocabulary = ckpt.front, d, ckpt.streaming, ckpt.vocabulary
        w = ckpt.weights
        self.encoder = FastConformer(d.conformer)
        self.encoder.load_weights([(n.removeprefix("encoder."), mx.array(w.pop(n))) for n in list(w)
                                   if n.startswith("encoder.")])
        self.prompt = Prompt(d.conformer.d_model, ckpt.streaming.num_prompts)
        self.prompt.load_weights([(f"layers.{n.removeprefix('prompt_kernel.')}", mx.array(w.pop(n))) for n in list(w)
                                  if n.startswith("prompt_kernel.")])
        mx.eval(self.encoder.parameters(), self.prompt.parameters())
        self.transducer = transducer(w, d)

    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> (frames, n_mels): NeMo's valid frames (n // hop), unnormalised."""
        return log_mel(audio, self.front)

    def encode_offline(self, mel: np.ndarray, context: tuple[int, int], prompt: int) -> np.ndarray:
        """One pass over a whole (frames, n_mels) log-mel with the chunked-limited mask of ``context``, the prompt
        applied: NeMo's offline oracle for its streaming."""
        x = self.encoder.subsampling(mx.array(mel)[None])
        out = self.prompt(self.encoder.encode(x, context), prompt)[0]
        mx.eval(out)
        return np.array(out)
