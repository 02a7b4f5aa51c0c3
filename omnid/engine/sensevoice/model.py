"""SenseVoice Small (funasr 1.4.16 ``models/sense_voice/model.py``, ``SenseVoiceSmall.inference``) in MLX: four
query rows of ``embed`` before the features (language, the event and emotion queries 1 and 2, text
normalisation), the shared SAN-M encoder (engine/funasr/sanm.py), the CTC head ``ctc.ctc_lo``, and greedy CTC
over every output frame, the query frames' included (so the tags come out first).

Greedy decoding as funasr's: the argmax of each frame's log-probabilities (``ban_emo_unk`` first sets the
``<|EMO_UNKNOWN|>`` column to minus infinity on every frame), repeats collapsed over the whole sequence, blank
(id 0) dropped. The argmax of the logits is the argmax of their log-softmax, so the softmax is not computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from omnid.engine.funasr.sanm import SanmDims, SanmEncoder

# funasr's query rows of ``embed`` (model.py's lid_dict and textnorm_dict): a language it does not list is 0.
LANGUAGE_ROWS = {"auto": 0, "zh": 3, "en": 4, "yue": 7, "ja": 11, "ko": 12, "nospeech": 13}
EVENT_ROW, EMOTION_ROW = 1, 2
TEXTNORM_ROWS = {"withitn": 14, "woitn": 15}
QUERY_ROWS = 16
QUERIES = 4  # query frames before the features in the encoder's output
BLANK = 0
EMO_UNKNOWN = 25009  # the column ban_emo_unk bans (funasr names it by id)
FRAME_S = 0.06  # an output frame: 6 stacked 10 ms frames


@dataclass(frozen=True)
class SenseVoiceDims:
    encoder: SanmDims
    vocabulary: int


@dataclass(frozen=True)
class Decoded:
    """One greedy CTC decode: the ids funasr's tokenizer decodes, and each id's first and last output frame
    (counted from the first feature frame: the queries' frames are negative)."""

    ids: tuple[int, ...]
    first: tuple[int, ...]
    last: tuple[int, ...]


class SenseVoice(nn.Module):
    def __init__(self, dims: SenseVoiceDims):
        super().__init__()
        self.dims = dims
        self.embed = nn.Embedding(QUERY_ROWS, dims.encoder.input_size)
        self.encoder = SanmEncoder(dims.encoder)
        self.ctc = nn.Module()
        self.ctc.ctc_lo = nn.Linear(dims.encoder.d_model, dims.vocabulary)

    def queries(self, language: str, itn: bool) -> mx.array:
        """The four query rows before the features: language (0 for one funasr does not list), event, emotion,
        text normalisation."""
        rows = [LANGUAGE_ROWS.get(language, 0), EVENT_ROW, EMOTION_ROW, TEXTNORM_ROWS["withitn" if itn else "woitn"]]
        return self.embed(mx.array(rows))

    def encode(self, features: np.ndarray, language: str, itn: bool) -> mx.array:
        """(T, input_size) stacked, normalised features -> the encoder's output (4 + T, d_model)."""
        x = mx.concatenate([self.queries(language, itn), mx.array(features)], axis=0)
        return self.encoder(x[None])[0]

    def logits(self, encoded: mx.array) -> mx.array:
        head = self.ctc.ctc_lo
        return head(encoded)

    def greedy(self, encoded: mx.array, ban_emo_unk: bool = False) -> Decoded:
        logits = self.logits(encoded)
        if ban_emo_unk and self.dims.vocabulary > EMO_UNKNOWN:
            logits[:, EMO_UNKNOWN] = -mx.inf
        best = np.array(mx.argmax(logits, axis=-1))
        return collapse(best)


def collapse(best: np.ndarray) -> Decoded:
    """Each frame's best id -> funasr's ids: runs of one id collapsed, blanks dropped; with each run's frames."""
    if len(best) == 0:
        return Decoded((), (), ())
    starts = np.flatnonzero(np.r_[True, best[1:] != best[:-1]])
    ends = np.r_[starts[1:], len(best)] - 1
    keep = best[starts] != BLANK
    return Decoded(tuple(int(i) for i in best[starts][keep]), tuple(int(f) - QUERIES for f in starts[keep]),
                   tuple(int(f) - QUERIES for f in ends[keep]))
