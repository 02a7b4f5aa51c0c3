"""Which way a quantized Whisper runs faster on MLX's CPU device: widened to float32 at load through omnid's numpy
encoder and decode step (what omnid does), or packed through MLX's quantized layers (what Metal runs). tiny.en (the
built-in weights) quantized in memory by ``nn.quantize`` at group size 64 and 4 or 8 bits, as mlx-examples'
``convert.py -q`` quantizes; one 30 s window of noise encoded, then a prompt and 30 greedy decode steps. Best of 3.

``--shapes``: the third way, the encoder's blocks kept packed and multiplied so by omnid's numpy encoder
(omnid/engine/cpu_packed.py), against the same blocks widened, at each Whisper size's encoder width (random weights,
one layer over a 30 s window's 1500 positions: every layer of a size has the same shape; medians of 5, the two
alternating), with the memory each layer's weights take both ways and what importing numba's kernels costs (RSS, a
fresh process): where packing saves more than that runtime and costs no time, it pays.

    python bench/whisper_quantized_cpu.py
    python bench/whisper_quantized_cpu.py --shapes
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import omnid  # noqa: E402,F401,I001  (OpenBLAS before mlx: MLX's CPU products otherwise take its reference BLAS)
import mlx.core as mx  # noqa: E402,I001
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402
from mlx.utils import tree_flatten  # noqa: E402

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


# Whisper's sizes: encoder width and layers (openai-whisper's model dimensions).
SHAPES = {"tiny": (384, 4), "base": (512, 6), "small": (768, 12), "medium": (1024, 24), "large-v3(-turbo)": (1280, 32)}


def numba_rss_mb() -> float:
    """The RSS that importing cpu_packed (numba, llvmlite, the cached kernels) adds, in a fresh process."""
    import subprocess

    code = ("import resource, omnid, mlx.core, numpy; r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
            "import omnid.engine.cpu_packed; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - r)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return int(out.stdout.split()[-1]) / 1024


def encoder_shapes() -> None:
    import statistics

    from omnid.engine.cpu_encoder import CpuEncoderLayer

    mx.set_default_device(mx.cpu)
    print(f"importing numba's kernels: +{numba_rss_mb():.0f} MB RSS")
    rng = np.random.default_rng(0)
    for name, (d, layers) in SHAPES.items():
        linears = [nn.Linear(d, d), nn.Linear(d, d, bias=False), nn.Linear(d, d), nn.Linear(d, d),
                   nn.Linear(d, 4 * d), nn.Linear(4 * d, d)]
        norms = (nn.LayerNorm(d), nn.LayerNorm(d))
        x = rng.standard_normal((1, 1500, d)).astype(np.float32)
        floats = CpuEncoderLayer(d // 64, norms[0], *linears[:4], norms[1], *linears[4:])
        float_mb = sum(m.weight.nbytes for m in linears) * layers / 2**20
        for bits in (8, 4):
            packed_linears = [nn.QuantizedLinear.from_linear(m, group_size=64, bits=bits) for m in linears]
            packed = CpuEncoderLayer(d // 64, norms[0], *packed_linears[:4], norms[1], *packed_linears[4:])
            times: dict[str, list[float]] = {"float32": [], "packed": []}
            for _ in range(5):
                for label, layer in (("float32", floats), ("packed", packed)):
                    y = x.copy()
                    start = time.perf_counter()
                    layer(y)
                    times[label].append(time.perf_counter() - start)
            f, p = (statistics.median(times[k]) for k in ("float32", "packed"))
            packed_mb = sum(m.weight.nbytes + m.scales.nbytes + m.biases.nbytes for m in packed_linears) * layers / 2**20
            print(f"{name:<17} width {d:>4}, {layers:>2} layers, {bits}-bit: a layer over 1500 positions float32 "
                  f"{f * 1e3:7.1f} ms, packed {p * 1e3:7.1f} ms ({p / f:.2f}x); the encoder's weights "
                  f"{float_mb:6.0f} MB float32, {packed_mb:5.0f} MB packed (saves {float_mb - packed_mb:5.0f} MB)")


def main() -> None:
    if "--shapes" in sys.argv[1:]:
        encoder_shapes()
        return
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
            row = wide.decoder.cpu_step.row([c[0] for c in caches], [kv for _, kv in cross])
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
