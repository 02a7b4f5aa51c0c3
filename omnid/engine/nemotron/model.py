"""Nemotron streaming ASR: NeMo's log-mel (no normalisation), the shared FastConformer in its cache-aware variant
(causal subsampling and convolutions, chunked-limited attention), the language prompt fused into each encoder frame,
and Parakeet's RNN-T (prediction network and joint), decoded greedily as NeMo does.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.nemo.cache_aware import EncoderCache, stream_step
from omnid.engine.nemo.fastconformer import FastConformer
from omnid.engine.nemo.features import log_mel
from omnid.engine.nemo.mlx_folder import load_module
from omnid.engine.nemo.transducer_checkpoint import transducer
from omnid.engine.nemotron.checkpoint import Checkpoint


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
        load_module(self.encoder, w, "encoder.", ckpt.quantized)
        self.prompt = Prompt(d.conformer.d_model, ckpt.streaming.num_prompts)
        load_module(self.prompt, w, "prompt_kernel.", ckpt.quantized, lambda name: f"layers.{name}")
        self.transducer = transducer(w, d)

    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> (frames, n_mels): NeMo's valid frames (n // hop), unnormalised."""
        return log_mel(audio, self.front)

    def encode_offline(self, mel: np.ndarray, context: tuple[int, int], prompt: int) -> np.ndarray:
        """One pass over a whole (frames, n_mels) log-mel with the chunked-limited mask of ``context``, the prompt
        applied: NeMo's offline oracle for its streaming."""
        x = self.encoder.subsampling(mx.array(mel)[None])
        return self.prompted(self.encoder.encode(x, context)[0], prompt)

    def prompted(self, encoded: mx.array | np.ndarray, prompt: int) -> np.ndarray:
        """Encoder frames (T, d_model) with the language prompt ``prompt`` fused in."""
        out = self.prompt(mx.array(encoded)[None], prompt)[0]
        mx.eval(out)
        return np.array(out)

    def stream_nemo(self, mel: np.ndarray, context: tuple[int, int]) -> list[np.ndarray]:
        """NeMo's cache-aware streaming loop over a log-mel as its CacheAwareStreamingAudioBuffer feeds it (the
        mel given whole, as that buffer holds it): a first chunk of 1 + 8R frames without a pre-encode cache, then
        chunks of 8 (R + 1) frames after the 9 mel frames before them (zeros where there are fewer), whose first 2
        subsampled frames are dropped; it stops when fewer than 8 new frames are left. -> each chunk's encoder output
        (before the prompt)."""
        right, factor = context[1], self.dims.conformer.subsampling_factor
        cache = EncoderCache.initial(self.encoder, context[0])
        outputs, start, first = [], 0, 1 + factor * right
        while start < len(mel):
            size = first if start == 0 else factor * (right + 1)
            chunk = mel[start : start + size]
            if len(chunk) < (1 if start == 0 else factor):
                break
            if start:
                before = mel[max(0, start - PRE_ENCODE_CACHE) : start]
                pad = np.zeros((PRE_ENCODE_CACHE - len(before), mel.shape[1]), np.float32)
                chunk = np.concatenate([pad, before, chunk])
            encoded, cache = stream_step(self.encoder, mx.array(chunk), cache, context, DROP if start else 0)
            outputs.append(np.array(encoded))
            start += size
        return outputs


PRE_ENCODE_CACHE = 9  # mel frames before a chunk that its causal subsampling reads (NeMo's pre_encode_cache_size)
DROP = 2  # the subsampled frames those 9 produce, dropped (NeMo's drop_extra_pre_encoded)
