"""What word times cost: Qwen3-ForcedAligner's time for a clip beside Qwen3-ASR's transcription of it, real 0.6B shapes.

The transcription checkpoint is bench/qwen3_asr_speed.py's random one (Qwen3-ASR-0.6B shapes, original layout, bf16);
the aligner's is the same network with the real aligner's head: 5000 time classes, untied, ``<timestamp>`` at id
151705, 80 ms a class (Qwen3-ForcedAligner-0.6B's config). Random weights do not stop by themselves, so each
transcription decodes exactly --tokens tokens (the end tokens' embedding rows are zero); the aligner times the clip's
real transcript (the corpus texts of the English clips that make it up), as it would time the transcription's text.

In one process, after a warm-up of each: --runs times, alternating, (a) a transcription: encode + prefill + --tokens
greedy tokens (``engine.encode`` + ``engine.generate``), and (b) an alignment: ``aligner.align`` (encode + one pass
over the audio and the transcript's units + the fix-up). It prints the medians and their ratio.

    .venv/bin/python bench/qwen3_aligner_speed.py                       # 60 s, 200 tokens, 3 runs
    .venv/bin/python bench/qwen3_aligner_speed.py --keep /tmp/qwen06     # reuse (or keep) the checkpoints there
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import qwen3_asr_speed as asr_bench  # noqa: E402

import omnid  # noqa: E402,F401  (OpenBLAS before mlx)

CLASSES, TIMESTAMP, SEGMENT_MS = 5000, 151705, 80


def build_aligner(asr: Path, folder: Path) -> str:
    """The aligner's checkpoint beside the transcription one: its config, tokenizer and weights with the new head."""
    import mlx.core as mx

    from tests.qwen_vocab import write_tokenizer_config

    stamp = {"from": json.loads((asr / asr_bench.STAMP).read_text()), "classes": CLASSES}
    if (folder / asr_bench.STAMP).is_file() and json.loads((folder / asr_bench.STAMP).read_text()) == stamp:
        return f"reusing the aligner checkpoint in {folder}"
    folder.mkdir(parents=True, exist_ok=True)
    config = json.loads((asr / "config.json").read_text())
    config["thinker_config"].update(model_type="qwen3_forced_aligner", classify_num=CLASSES)
    config["thinker_config"]["text_config"]["tie_word_embeddings"] = False
    config.update(timestamp_token_id=TIMESTAMP, timestamp_segment_time=SEGMENT_MS)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(asr / name, folder / name)
    added = {i: asr_bench.NAMED.get(i, f"<|reserved_{i}|>") for i in range(asr_bench.FIRST_ADDED, TIMESTAMP)}
    write_tokenizer_config(folder, added | {TIMESTAMP: "<timestamp>"})
    weights = mx.load(str(asr / "model.safetensors"))
    mx.random.seed(1)
    weights["thinker.lm_head.weight"] = (mx.random.normal((CLASSES, 1024)) / 32).astype(mx.bfloat16)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})
    (folder / asr_bench.STAMP).write_text(json.dumps(stamp))
    return f"built the aligner checkpoint in {folder}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--tokens", type=int, default=200, help="tokens every transcription decodes (default 200)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep (and reuse) the transcription checkpoint in DIR and "
                                                            "the aligner's in DIR-aligner")
    args = p.parse_args()
    print(asr_bench.machine())
    work = Path(tempfile.mkdtemp(prefix="qwen3-aligner-bench-"))
    asr = args.keep or work / "asr"
    aligner_folder = Path(f"{asr}-aligner")
    try:
        print(asr_bench.build_checkpoint(asr, 0), flush=True)
        print(build_aligner(asr, aligner_folder), flush=True)
        from omnid.engine.qwen3_aligner.engine import Qwen3AlignerEngine
        from omnid.engine.qwen3_aligner.words import units
        from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions

        audio, text = asr_bench.corpus_audio(args.seconds)
        engine = Qwen3AsrEngine("asr", asr, options=QwenOptions(loop_window=0))
        aligner = Qwen3AlignerEngine("aligner", aligner_folder)

        def transcription() -> None:
            features = engine.encode(audio)
            gen = engine.generate(engine.prompt("", features.shape[0]), features, args.tokens, loop_guard=False)
            assert len(gen.tokens) == args.tokens

        def alignment() -> None:
            assert len(aligner.align(audio, text, "English")) == len(units(text, "English"))

        transcription(), alignment()  # warm-up
        times: dict[str, list[float]] = {"transcription": [], "alignment": []}
        for _ in range(args.runs):
            for name, run in (("transcription", transcription), ("alignment", alignment)):
                started = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - started)
        t, a = statistics.median(times["transcription"]), statistics.median(times["alignment"])
        print(f"\n{args.seconds:g} s of English speech, {len(units(text, 'English'))} words to align; median of "
              f"{args.runs} runs each (s): " + "; ".join(f"{k} " + ", ".join(f"{v:.2f}" for v in vs)
                                                      for k, vs in times.items()))
        print(f"  transcription (encode + prefill + {args.tokens} tokens): {t:.2f} s")
        print(f"  alignment (encode + one pass + fix-up):             {a:.2f} s  ({a / t:.2f}x the transcription; "
              f"{args.seconds / a:.0f}x real time)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
