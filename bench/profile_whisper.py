"""Where omnid's Whisper time goes on this machine: encoder by window length, the softmax that dominates a full
window (MLX beside numpy on the same scores), the decoder step split into layers and vocabulary projection (MLX
beside the numpy step omnid runs on the CPU), and encode/decode totals over corpus clips in both window modes.
Medians of --repeats.

    python bench/profile_whisper.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one

import omnid  # noqa: E402,I001  (OpenBLAS before mlx)
import mlx.core as mx  # noqa: E402
from bench.batch_speed import count_time  # noqa: E402
from omnid.audio import decode_audio  # noqa: E402
from omnid.config import load_config, load_pins, model_folder  # noqa: E402
from omnid.engine import cpu_math  # noqa: E402
from omnid.engine.options import TranscribeOptions  # noqa: E402
from omnid.engine.whisper.engine import WhisperEngine  # noqa: E402

ATTENTION_ROWS, GELU_SLICE = cpu_math.ATTENTION_ROWS, cpu_math.GELU_SLICE


def timed(fn, repeats: int) -> float:
    fn()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs) * 1000


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--every", type=int, default=5, help="every Nth English clip for the totals")
    args = p.parse_args()
    engine = WhisperEngine("tiny.en", model_folder(load_config().model("tiny.en")), load_pins()["tiny.en"])
    print(f"omnid.blas: {omnid.blas.status().name}; mlx {mx.__version__} on {mx.default_device()}; "
          f"{os.cpu_count()} cores; medians of {args.repeats}\n")

    encoder = engine.model.encoder

    def mlx_blocks(mel: mx.array) -> None:
        """The encoder with model.py's MLX blocks (what Metal runs), beside omnid's CPU path (cpu_encoder.py)."""
        x = encoder.front(mel)
        for block in encoder.blocks:
            x, _ = block(x)
        mx.eval(encoder.ln_post(x))

    print("encoder forward (ms) by mel frames: as omnid runs on the CPU (numpy blocks), and with MLX's blocks")
    for frames in (3000, 2000, 1000, 500):
        mel = mx.random.normal((1, frames, engine.dims.n_mels))
        ours = timed(lambda: mx.eval(encoder(mel)), args.repeats)
        theirs = timed(lambda: mlx_blocks(mel), args.repeats)
        print(f"  {frames:>5} frames ({frames / 100:>4.0f} s): numpy blocks {ours:8.1f}   MLX blocks {theirs:8.1f}")

    scores = mx.random.normal((engine.dims.n_audio_head, 1500, 1500))
    mx.eval(scores)
    as_np = np.array(scores)
    print("\none full-window attention softmax, 6 x 1500 x 1500 scores (ms)")
    print(f"  mlx softmax {timed(lambda: mx.eval(mx.softmax(scores, axis=-1)), args.repeats):8.1f}")
    print(f"  mlx exp     {timed(lambda: mx.eval(mx.exp(scores)), args.repeats):8.1f}")
    print(f"  numpy exp   {timed(lambda: np.exp(as_np), args.repeats):8.1f}")

    # omnid.engine.cpu_math works in cache-sized slices on the CPU; the same call with one slice shows the gain.
    q, k, v = (mx.random.normal((1, engine.dims.n_audio_head, 1500, 64)) for _ in range(3))
    hidden = mx.random.normal((1, 1500, 4 * engine.dims.n_audio_state))
    mx.eval(q, k, v, hidden)
    print("\none layer's attention (6 heads x 1500) and MLP GELU (1500 x 1536), cpu_math's MLX path (Qwen3-ASR's encoder) (ms)")
    for label, rows, gelu_slice in (("sliced (as omnid runs)", cpu_math.ATTENTION_ROWS, cpu_math.GELU_SLICE),
                                    ("whole arrays", 1500, hidden.size)):
        cpu_math.ATTENTION_ROWS, cpu_math.GELU_SLICE = rows, gelu_slice
        att = timed(lambda: mx.eval(cpu_math.attention(q, k, v, 0.125)), args.repeats)
        act = timed(lambda: mx.eval(cpu_math.gelu(hidden)), args.repeats)
        print(f"  {label:<24} attention {att:7.1f}  gelu {act:7.1f}")
    cpu_math.ATTENTION_ROWS, cpu_math.GELU_SLICE = ATTENTION_ROWS, GELU_SLICE

    dec = engine.model.decoder
    print("\ndecoder step, one token after a 1-token prompt (ms)")
    for frames in (3000, 1000):
        features = engine.model.encoder(mx.zeros((1, frames, engine.dims.n_mels)))
        cross = dec.cross_kv(features)
        hidden, cache = dec(mx.array([[engine.tokenizer.sot]]), None, kv_cache=cross)
        mx.eval(hidden, cache)
        token = mx.array([[400]])
        layers = timed(lambda: mx.eval(dec(token, None, kv_cache=cache)[0]), args.repeats * 6)
        whole = timed(lambda: np.array(dec.logits(dec(token, None, kv_cache=cache)[0][0, -1])), args.repeats * 6)
        print(f"  {frames // 2:>4} audio positions: MLX layers {layers:6.2f}, layers + vocabulary projection {whole:6.2f}")
        # What omnid runs on the CPU (engine/whisper/cpu_decoder.py): the same step in numpy, alone and for 4 rows.
        rows = [dec.cpu_step.row([c[0] for c in cache], cross) for _ in range(4)]

        def numpy_step(n: int) -> None:
            for r in rows[:n]:
                r.length = 1
            dec.cpu_step.step([400] * n, rows[:n])

        one, four = (timed(lambda n=n: numpy_step(n), args.repeats * 6) for n in (1, 4))
        print(f"  {frames // 2:>4} audio positions: numpy step with projection {one:6.2f}, 4 rows at once {four:6.2f}")
    row = mx.random.normal((1, engine.dims.n_text_state))
    mx.eval(row)
    tied = dec.token_embedding.weight
    print(f"  projection alone: contiguous (state, vocab) copy {timed(lambda: mx.eval(dec.logits(row)), args.repeats * 6):6.2f}"
          f", transposed embedding view {timed(lambda: mx.eval(row @ tied.T), args.repeats * 6):6.2f}")

    rows = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["language"] == "en"][:: args.every]
    audio = [decode_audio(CORPUS / r["path"]) for r in rows]
    total_s = sum(len(a) for a in audio) / 16000
    print(f"\ntotals over {len(rows)} English clips ({total_s:.0f} s of audio), greedy, no fallback (s)")
    spent: Counter[str] = Counter()
    count_time(spent)
    for window in ("full", "content"):
        spent.clear()
        tokens = 0
        t0 = time.perf_counter()
        for a in audio:
            tokens += engine.transcribe(a, TranscribeOptions(window=window, fallback=False)).generated_tokens
        wall = time.perf_counter() - t0
        print(f"  {window:<8} wall {wall:6.1f}  encode {spent['encode']:6.1f}  decode {spent['decode']:6.1f}  "
              f"tokens {tokens}  ms/token {1000 * spent['decode'] / max(tokens, 1):5.1f}")


if __name__ == "__main__":
    main()
