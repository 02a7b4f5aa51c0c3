"""The SAN-M encoder (omnid/engine/funasr/sanm.py) against funasr 1.4.16's own SenseVoiceEncoderSmall: a tiny random
encoder (scripts/funasr_sanm_goldens.py: width 16, 3 + 2 blocks, the real 560-wide input and FSMN kernel) loaded
from its state dict under the checkpoint's names, on 71 and 500 frames (a short clip's and a 30 s segment's length):
the output within 1e-4 of funasr's."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from omnid.engine.funasr.sanm import SanmDims, SanmEncoder, mlx_weights

GOLDENS = Path(__file__).parent / "goldens" / "funasr_sanm"


def encoder() -> SanmEncoder:
    s = json.loads((GOLDENS / "goldens.json").read_text())["sizes"]
    model = SanmEncoder(SanmDims(s["input_size"], s["output_size"], s["attention_heads"], s["linear_units"],
                                 s["num_blocks"], s["tp_blocks"], s["kernel_size"], s["sanm_shfit"]))
    with np.load(GOLDENS / "encoder.npz") as z:
        model.load_weights(mlx_weights({k: z[k] for k in z.files}), strict=True)
    return model


def inputs() -> dict[str, np.ndarray]:
    """The goldens script's inputs, computed alike: 71 and 500 frames of a smooth 560-wide signal."""
    return {name: (2 * np.sin(np.arange(frames)[:, None] * 0.37 + np.arange(560)[None, :] * 0.11)).astype(np.float32)
            for name, frames in (("short", 71), ("long", 500))}


@pytest.mark.parametrize("case", ["short", "long"])
def test_encoder_output_is_funasrs(case: str) -> None:
    with np.load(GOLDENS / "goldens.npz") as z:
        want = z[case]
    out = np.array(encoder()(mx.array(inputs()[case])[None]))[0]
    assert out.shape == want.shape
    assert np.abs(out - want).max() <= 1e-4


def test_every_tensor_of_the_checkpoint_is_used() -> None:
    """funasr's state dict and the module's parameters are the same names and shapes (the FSMN blocks' middle axis
    dropped); a state dict missing one tensor does not load."""
    model = encoder()
    with np.load(GOLDENS / "encoder.npz") as z:
        weights = dict(mlx_weights({k: z[k] for k in z.files}))
    params = dict(tree_flatten(model.parameters()))
    assert {k: v.shape for k, v in params.items()} == {k: v.shape for k, v in weights.items()}
    assert params["encoders0.0.self_attn.fsmn_block.weight"].shape == (16, 11)
    weights.pop("encoders.1.norm2.bias")
    with pytest.raises(ValueError, match="encoders.1.norm2.bias"):
        model.load_weights(list(weights.items()), strict=True)
