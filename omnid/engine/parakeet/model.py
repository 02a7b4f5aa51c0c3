"""Parakeet: NeMo's log-mel, the shared FastConformer (MLX; numpy layers on MLX's CPU device), then a transducer
(TDT or RNN-T: prediction network and joint) or a CTC head (a hybrid has both; a CTC model only the head), decoded
greedily as NeMo does (engine/nemo/transducer.py).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from omnid.engine.nemo.fastconformer import FastConformer
from omnid.engine.nemo.features import log_mel
from omnid.engine.nemo.mlx_folder import load_module
from omnid.engine.nemo.transducer import Ctc, Token
from omnid.engine.nemo.transducer_checkpoint import Checkpoint, transducer

FRAME_SECONDS = 0.08  # an encoder frame: 8 mel hops of 10 ms


class Parakeet:
    def __init__(self, ckpt: Checkpoint):
        d = ckpt.dims
        self.front, self.dims, self.vocabulary = ckpt.front, d, ckpt.vocabulary
        w = ckpt.weights
        self.encoder = FastConformer(d.conformer)
        load_module(self.encoder, w, "encoder.", ckpt.quantized)
        self.transducer = transducer(w, d) if d.transducer else None
        self.ctc = Ctc(w.pop("ctc_decoder.decoder_layers.0.weight"), w.pop("ctc_decoder.decoder_layers.0.bias")) \
            if d.ctc else None

    def features(self, audio: np.ndarray) -> np.ndarray:
        """16 kHz mono float32 -> (frames, n_mels): NeMo's valid frames (n // hop), normalised as configured."""
        return log_mel(audio, self.front)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """(frames, n_mels) -> (encoder frames, d_model)."""
        x = self.encoder.subsampling(mx.array(mel)[None])
        out = self.encoder.encode(x)[0]
        mx.eval(out)
        return np.array(out)

    def decode(self, encoded: np.ndarray, ctc: bool = False) -> list[Token]:
        """Greedy tokens: the transducer's, or the CTC head's when asked (a hybrid) or when it is the only one."""
        if ctc or self.transducer is None:
            if self.ctc is None:
                raise ValueError("this checkpoint has no CTC head")
            return self.ctc.greedy(encoded)
        if self.transducer is None:
            raise ValueError("this checkpoint has no transducer")
        return self.transducer.greedy(encoded)
