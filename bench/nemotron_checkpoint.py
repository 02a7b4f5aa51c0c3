"""A random Nemotron 3.5 ASR streaming checkpoint with the real 0.6B shapes, as an mlx-community folder (for benches:
the real weights cannot be downloaded here, and speed depends only on the shapes).

Shapes (../shared/spec facts, the mlx-community config): a cache-aware FastConformer of 24 layers, d_model 1024, 8
heads, ff 4096, conv kernel 9, causal dw_striding x8 with 256 channels, 56 frames of left context and right contexts
13/6/3/1/0; 128 mels; a prompt of 128 one-hots through 2048 hidden units; a 2-layer LSTM of 640, a joint of 640 and
13,087 pieces plus the blank. Weights are Gaussian with 1/sqrt(fan-in) deviations; as in scripts/nemotron_goldens.py
the first convolution's kernels sum to zero (so the encoder follows the speech, not the log-mel's offset), the
blank's embedding row is zero, and the joint's blank bias is searched so that speech gives about TOKENS_PER_S
tokens a second. A random joint emits max_symbols tokens on a frame or none (its prediction network never says
"enough"): with the usual 10, a 1120 ms chunk's greedy search took 150 joint steps where a trained model takes
about 20 (one per frame and one per token), most of a session's time here. So greedy search may emit one token
per frame in this checkpoint (max_symbols 1), and TOKENS_PER_S is a little above a trained model's (about 3 on
English dictation): its greedy search then takes at least a real model's steps, and its text about its length.

    .venv/bin/python bench/nemotron_checkpoint.py /tmp/nemotron-0.6b
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.engine.nemo.mlx_folder import save_folder  # noqa: E402
from omnid.engine.nemotron.convert import to_mlx_folder  # noqa: E402

TINY = ROOT / "tests" / "goldens" / "nemotron_tiny" / "nemotron.nemo"
D, LAYERS, HEADS, CHANNELS, PRED, VOCAB, PROMPTS = 1024, 24, 8, 256, 640, 13087, 128
LOCALES = ("en-US", "de-DE", "fr-FR", "es-ES", "it-IT", "pt-BR", "nl-NL", "pl-PL")
TOKENS_PER_S = 5.0
MAX_SYMBOLS = 1


def config(tiny: dict) -> dict:
    out = json.loads(json.dumps(tiny))
    out["encoder"].update(n_layers=LAYERS, d_model=D, n_heads=HEADS, subsampling_conv_channels=CHANNELS)
    out["prompt"] = {"num_prompts": PROMPTS, "prompt_hidden": 2 * D,
                     "prompt_dictionary": {k: i for i, k in enumerate(LOCALES)}}
    out["decoder"].update(pred_hidden=PRED, vocab_size=VOCAB)
    out["joint"].update(joint_hidden=PRED, encoder_hidden=D, pred_hidden=PRED, num_classes=VOCAB)
    pieces = list(tiny["vocabulary"])
    out["vocabulary"] = pieces + [f"\u2581w{i}" if i % 2 else f"x{i}" for i in range(VOCAB - len(pieces))]
    out["default_language"] = "en-US"
    out["max_symbols"] = MAX_SYMBOLS
    return out


def shapes(freq: int) -> dict[str, tuple[int, ...]]:
    """NeMo's tensor names in the mlx-community layout (convolutions channels-last, LSTM as Wx, Wh, bias)."""
    m, f, c, p = D, 4 * D, CHANNELS, PRED
    out: dict[str, tuple[int, ...]] = {}
    for i, kind in ((0, "dw"), (2, "dw"), (3, "pw"), (5, "dw"), (6, "pw")):
        out[f"encoder.pre_encode.conv.{i}.weight"] = (c, 3, 3, 1) if kind == "dw" else (c, 1, 1, c)
        out[f"encoder.pre_encode.conv.{i}.bias"] = (c,)
    out["encoder.pre_encode.out.weight"], out["encoder.pre_encode.out.bias"] = (m, c * freq), (m,)
    for n in range(LAYERS):
        at = f"encoder.layers.{n}."
        for norm in ("norm_feed_forward1", "norm_self_att", "norm_conv", "norm_feed_forward2", "norm_out",
                     "conv.batch_norm"):
            out[at + norm + ".weight"], out[at + norm + ".bias"] = (m,), (m,)
        for ff in ("feed_forward1", "feed_forward2"):
            out[f"{at}{ff}.linear1.weight"], out[f"{at}{ff}.linear2.weight"] = (f, m), (m, f)
        for proj in ("q", "k", "v", "out", "pos"):
            out[f"{at}self_attn.linear_{proj}.weight"] = (m, m)
        out[at + "self_attn.pos_bias_u"] = out[at + "self_attn.pos_bias_v"] = (HEADS, m // HEADS)
        out[at + "conv.pointwise_conv1.weight"] = (2 * m, 1, m)
        out[at + "conv.depthwise_conv.weight"] = (m, 9, 1)
        out[at + "conv.pointwise_conv2.weight"] = (m, 1, m)
    out["prompt_kernel.0.weight"], out["prompt_kernel.0.bias"] = (2 * m, m + PROMPTS), (2 * m,)
    out["prompt_kernel.2.weight"], out["prompt_kernel.2.bias"] = (m, 2 * m), (m,)
    out["decoder.prediction.embed.weight"] = (VOCAB + 1, p)
    for layer in (0, 1):
        rnn = f"decoder.prediction.dec_rnn.lstm.{layer}."
        out[rnn + "Wx"], out[rnn + "Wh"], out[rnn + "bias"] = (4 * p, p), (4 * p, p), (4 * p,)
    out["joint.enc.weight"], out["joint.enc.bias"] = (p, m), (p,)
    out["joint.pred.weight"], out["joint.pred.bias"] = (p, p), (p,)
    out["joint.joint_net.2.weight"], out["joint.joint_net.2.bias"] = (VOCAB + 1, p), (VOCAB + 1,)
    return out


def tensors(freq: int, pieces: list[str], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes(freq).items():
        if "norm" in name and name.endswith("weight"):
            t = np.ones(shape, np.float32)
        elif len(shape) == 1:
            t = np.zeros(shape, np.float32)
        else:
            fan_in = int(np.prod(shape[1:])) if "pos_bias" not in name else shape[1]
            t = rng.standard_normal(shape, np.float32) / np.float32(np.sqrt(fan_in))
        out[name] = t
    first = out["encoder.pre_encode.conv.0.weight"]
    first -= first.mean(axis=(1, 2), keepdims=True)
    out["decoder.prediction.embed.weight"][VOCAB] = 0.0  # the blank: the padding row
    out["joint.enc.weight"] *= 4.0  # frames lead the joint (scripts/nemotron_goldens.py's gains)
    out["joint.pred.weight"] *= 4.0
    out["joint.joint_net.2.weight"] *= 4.0
    bias = out["joint.joint_net.2.bias"]
    bias[[i for i, p in enumerate(pieces) if p.startswith("\u2581")]] = 3.0
    return out


def encoded(model, audio: np.ndarray) -> list[np.ndarray]:
    """The speech's prompted encoder frames, chunk by chunk at the native chunk (they do not depend on the joint)."""
    from omnid.engine.nemotron.stream import Stream

    chunks: list[np.ndarray] = []
    stream = Stream(model, model.streaming.contexts[0][1] + 1, 0,
                    on_chunk=lambda frames: chunks.append(model.prompted(frames, 0)))
    stream.push(audio)
    stream.finish()
    return chunks


def tokens_per_second(model, chunks: list[np.ndarray], seconds: float, blank_bias: float) -> float:
    model.transducer.joint.out_bias[VOCAB] = blank_bias
    state, tokens = model.transducer.start(), 0
    for frames in chunks:
        new, state = model.transducer.continue_greedy(frames, state)
        tokens += len(new)
    return tokens / seconds


def build(out: Path, speech: np.ndarray, seed: int = 0) -> Path:
    """Writes the folder; searches the blank bias on ``speech`` (16 kHz)."""
    with tempfile.TemporaryDirectory() as tmp:
        tiny_folder = to_mlx_folder(TINY, Path(tmp) / "tiny")
        tiny = json.loads((tiny_folder / "config.json").read_text())
        from omnid.engine.tensor_file import read_tensors

        tiny_out = read_tensors(tiny_folder / "model.safetensors")["encoder.pre_encode.out.weight"]
        freq = tiny_out.shape[1] // tiny["encoder"]["subsampling_conv_channels"]
    cfg = config(tiny)
    weights = tensors(freq, cfg["vocabulary"], seed)
    save_folder(out, cfg, weights)
    from omnid.engine.nemotron.checkpoint import load
    from omnid.engine.nemotron.model import Nemotron

    model = Nemotron(load(out))
    chunks, seconds = encoded(model, speech), len(speech) / 16000
    lo, hi = 0.0, 60.0  # the blank bias for about TOKENS_PER_S tokens a second: the last bias above it that emits
    best, rate = hi, 0.0
    for _ in range(10):
        mid = (lo + hi) / 2
        got = tokens_per_second(model, chunks, seconds, mid)
        if got > TOKENS_PER_S:
            lo = mid
        else:
            hi = mid
            if got > 0:
                best, rate = mid, got
    if rate == 0.0:
        best, rate = lo, tokens_per_second(model, chunks, seconds, lo)
    weights["joint.joint_net.2.bias"][VOCAB] = best
    save_folder(out, cfg, weights)
    print(f"nemotron checkpoint: {out} (blank bias {best:.2f}: {rate:.1f} tokens/s on the calibration speech)",
          flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from omnid.audio import decode_audio

    corpus = ROOT.parent / "shared" / "corpus"
    manifest = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines()]
    clip = next(m for m in manifest if m["language"] == "en" and m["duration_s"] >= 6)
    build(args.out, decode_audio(corpus / clip["path"])[: 6 * 16000], args.seed)


if __name__ == "__main__":
    main()
