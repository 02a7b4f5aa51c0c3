"""Writes the goldens of the SAN-M encoder (tests/goldens/funasr_sanm/) with the OFFICIAL code: funasr 1.4.16's
``SenseVoiceEncoderSmall`` at tiny sizes (width 16, 4 heads, feed-forward 32, 3 blocks and 2 tp_blocks, the real
input width 560 and FSMN kernel 11), random weights (torch seed 0) rounded to float16 values (stored as float16:
the goldens stay small; computed in float32 as read), evaluated in float32 on the CPU.

Run once on a developer machine, never in CI, in the throwaway virtualenv scripts/funasr_frontend_goldens.py
describes:

    /tmp/funasr-ref/bin/python scripts/funasr_sanm_goldens.py

Inputs: 71 and 500 frames (a short clip's and a 30 s segment's) of a smooth 560-wide signal, computed the same way
by the test (``inputs``), so nothing of them is stored. Writes encoder.npz (the encoder's state dict under the
checkpoint's names, ``encoder.`` + funasr's module names, PyTorch layouts) and goldens.npz (each case's output) +
goldens.json (sizes, cases, versions).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
from funasr.models.sense_voice.model import SenseVoiceEncoderSmall

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "goldens" / "funasr_sanm"
SIZES = {"input_size": 560, "output_size": 16, "attention_heads": 4, "linear_units": 32, "num_blocks": 3,
         "tp_blocks": 2, "kernel_size": 11, "sanm_shfit": 0}


def inputs() -> dict[str, np.ndarray]:
    """tests/test_funasr_sanm.py's inputs, computed alike: a smooth signal of the stacked features' width."""
    return {name: (2 * np.sin(np.arange(frames)[:, None] * 0.37 + np.arange(560)[None, :] * 0.11)).astype(np.float32)
            for name, frames in (("short", 71), ("long", 500))}


def main() -> None:
    torch.manual_seed(0)
    encoder = SenseVoiceEncoderSmall(**SIZES, dropout_rate=0.0, positional_dropout_rate=0.0,
                                     attention_dropout_rate=0.0).eval()
    with torch.no_grad():
        for p in encoder.parameters():
            p.copy_(p.half().float())  # float16 values, so that float16 storage holds them exactly
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "encoder.npz", **{f"encoder.{k}": v.half().numpy() for k, v in encoder.state_dict().items()})
    outputs = {}
    with torch.inference_mode():
        for name, x in inputs().items():
            out, lengths = encoder(torch.from_numpy(x.copy())[None], torch.tensor([len(x)]))
            outputs[name] = out[0].numpy()
            print(name, x.shape, out.shape, int(lengths[0]))
    np.savez_compressed(OUT / "goldens.npz", **outputs)
    (OUT / "goldens.json").write_text(json.dumps({"sizes": SIZES, "cases": {k: len(v) for k, v in outputs.items()},
                                                  "funasr": __import__("funasr").__version__,
                                                  "torch": torch.__version__}, indent=1) + "\n")


if __name__ == "__main__":
    main()
