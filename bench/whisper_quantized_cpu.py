"""Which way a quantized Whisper runs faster on MLX's CPU device: widened to float32 at load through omnid's numpy
encoder and decode step (what omnid does), or packed through MLX's quantized layers (what Metal runs). tiny.en (the
built-in weights) quantized in memory by ``nn.quantize`` at group size 64 and 4 or 8 bits, as mlx-examples'
``convert.py -q`` quantizes; one 30 s window of noise encoded, then a prompt and 30 greedy decode steps. Best of 3.

    python bench/whisper_quantized_cpu.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.config import load_config, model_folder  # noqa: E402
from omnid.engine.whisper.checkpoint import build_model, load_checkpoint  # noqa: E402
from omnid.engine.whisper.model import Whisper  # noqa: E402


def best(f: Callable[[], None], n: int = 3) -> float:
    f()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return min(times)


def widened(packed: Whisper, ckpt, bits: int) -> Whisper:
    params = dict(tree_flatten(packed.parameters()))
    modules = {k[: -len(".scales")] for k in params if k.endswith(".scales")}
    wide = {}
    for k, v in params.items():
        module = k.rsplit(".", 1)[0]
        if module in modules and k.endswith(".weight"):
            wide[k] = mx.dequantize(v, params[f"{module}.scales"], params[f"{module}.biases"], group_size=64, bits=bits)
        elif not k.endswith((".scales", ".biases")):
            wide[k] = v
    model = build_model(ckpt)
    model.load_weights(list(wide.items()))
    mx.eval(model.parameters())
    model.decoder.freeze_projection()
    return model


def main() -> None:
    mx.set_default_device(mx.cpu)
    ckpt = load_checkpoint(model_folder(load_config().model("tiny.en")))
    mel = mx.array(np.random.default_rng(0).standard_normal((1, 3000, ckpt.dims.n_mels)).astype(np.float32))
    prompt = mx.array([[50257, 50362]])  # <|startoftranscript|><|notimestamps|> of tiny.en
    for bits in (4, 8):
        packed = build_model(ckpt)
        nn.quantize(packed, group_size=64, bits=bits)
        wide = widened(packed, ckpt, bits)
        xa = wide.encoder(mel)

        def encode_numpy() -> None:
            mx.eval(wide.encoder(mel))  # AudioEncoder on the CPU device: numpy blocks

        def encode_quantized() -> None:
            x = packed.encoder.front(mel)
            for block in packed.encoder.blocks:
                x, _ = block(x)
            mx.eval(packed.encoder.ln_post(x))

        def decode_numpy() -> None:
            cross = wide.decoder.cross_kv(xa)
            _, caches = wide.decoder(prompt, None, kv_cache=cross)
            row = wide.decoder.cpu_step.row([c[0] for c in caches], cross)
            token = 220
            for _ in range(30):
                token = int(wide.decoder.cpu_step.step([token], [row])[0].argmax())

        def decode_quantized() -> None:
            _, caches = packed.decoder(prompt, None, kv_cache=packed.decoder.cross_kv(xa))
            token = 220
            for _ in range(30):
                hidden, caches = packed.decoder(mx.array([[token]]), None, kv_cache=caches)
                token = int(packed.decoder.logits(hidden[:, -1]).argmax().item())

        print(f"{bits}-bit: 30 s encoder: widened (numpy) {best(encode_numpy):.3f} s, MLX quantized "
              f"{best(encode_quantized):.3f} s; 30 decode steps: widened (numpy) {best(decode_numpy):.3f} s, "
              f"MLX quantized {best(decode_quantized):.3f} s")


if __name__ == "__main__":
    main()
