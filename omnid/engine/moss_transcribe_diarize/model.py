"""MOSS-Transcribe-Diarize (transformers 5.23, ``models/moss_transcribe_diarize/modeling_moss_transcribe_diarize.py``)
in MLX: Whisper's audio encoder (engine/whisper_net.py's AudioEncoder, the ``whisper`` kind's, its positions read
from the checkpoint), every four consecutive encoder frames concatenated, the multi-modal projector (Linear, SiLU, Linear, LayerNorm), and a
Qwen3 decoder (the Qwen3 kinds' TextModel) that writes the speaker-attributed, timed transcript.

Audio goes to the encoder as transformers' feature extractor gives it: 30 s windows back to back, each padded to
3000 mel frames; of each window's 1500 encoder frames the model keeps its valid ones rounded up to a whole number
of groups of four (``get_audio_features``), merges each group into one row and projects it; the rows of all the
windows fill the prompt's ``<|audio_pad|>`` slots in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.logmel import HOP_LENGTH, log_mel_spectrogram
from omnid.engine.qwen3.checkpoint import TextDims
from omnid.engine.qwen3.model import CausalLM
from omnid.engine.whisper_net import AudioEncoder

MERGE = 4  # audio_merge_size: encoder frames per audio token
WINDOW_SAMPLES = 480_000  # audio_chunk_size: 30 s windows
N_MELS = 80


@dataclass(frozen=True)
class AudioDims:
    n_mels: int
    positions: int  # max_source_positions: encoder frames per window
    width: int
    heads: int
    layers: int


@dataclass(frozen=True)
class MossDims:
    audio: AudioDims
    text: TextDims
    merge: int = MERGE


def window_tokens(valid_frames: int, merge: int = MERGE) -> int:
    """Audio tokens of one window with ``valid_frames`` mel frames: its encoder frames (the stride-2 convolution's
    (n - 1) // 2 + 1) rounded up to whole groups of ``merge``."""
    return -(-((valid_frames - 1) // 2 + 1) // merge)


class Projector(nn.Module):
    """transformers' MossTranscribeDiarizeMultiModalProjector."""

    def __init__(self, d: MossDims):
        super().__init__()
        hidden = d.text.hidden_size
        self.linear_1 = nn.Linear(d.audio.width * d.merge, hidden)
        self.linear_2 = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=d.text.rms_norm_eps)

    def __call__(self, x: mx.array) -> mx.array:
        return self.norm(self.linear_2(nn.silu(self.linear_1(x))))


class MossTranscribeDiarize(nn.Module):
    def __init__(self, d: MossDims):
        super().__init__()
        self.dims = d
        a = d.audio
        self.audio_tower = AudioEncoder(a.n_mels, a.positions, a.width, a.heads, a.layers)
        self.multi_modal_projector = Projector(d)
        self.language_model = CausalLM(d.text)

    def audio_rows(self, windows: mx.array, valid: list[int]) -> mx.array:
        """(windows, 3000, n_mels) padded mel windows and each one's valid mel frames -> the projected audio
        tokens of them all, in order: (tokens, hidden)."""
        encoded = self.audio_tower(windows)
        kept = [encoded[i, : window_tokens(n, self.dims.merge) * self.dims.merge] for i, n in enumerate(valid)]
        frames = mx.concatenate(kept, axis=0)
        return self.multi_modal_projector(frames.reshape(-1, self.dims.merge * frames.shape[-1]))


def windows(audio: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """16 kHz samples -> transformers' feature extractor's input for the model: the audio cut into 30 s windows
    back to back (at least one), each padded with zeros to 30 s and turned into Whisper's log-mel (its own
    clipping 8 below its maximum), (windows, 3000, n_mels); and each window's valid mel frames (its samples / 160,
    rounded up)."""
    n = len(audio)
    count = max(1, -(-n // WINDOW_SAMPLES))
    mels, valid = [], []
    for i in range(count):
        chunk = np.zeros(WINDOW_SAMPLES, np.float32)
        part = audio[i * WINDOW_SAMPLES : (i + 1) * WINDOW_SAMPLES]
        chunk[: len(part)] = part
        mels.append(np.array(log_mel_spectrogram(chunk, N_MELS, tail=0)))
        valid.append(-(-len(part) // HOP_LENGTH))
    return np.stack(mels), valid
