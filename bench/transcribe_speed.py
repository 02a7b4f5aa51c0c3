"""Offline transcription speed: omnid against faster-whisper (int8, float32) and mlx-whisper, same weights.

Each system runs in its own subprocess (so load time and peak RSS are its own) over the same English corpus
clips, decoded once up front, greedy at temperature 0 with no fallback, language forced to English, no VAD and
no previous-text conditioning (the reference settings of ../shared/spec/evaluation.md). Every system repeats the
whole set --repeats times; the table shows the median audio-seconds per wall-second, WER and the clips
identical to the faster-whisper reference file.

    python bench/transcribe_speed.py                  # every 5th English clip, 3 repeats
    python bench/transcribe_speed.py --every 1 --repeats 1   # the whole English corpus once
    python bench/transcribe_speed.py --baseline REV --systems omnid-full faster-whisper-int8
        # also omnid-full as of git revision REV (its own copy of this script, in a temporary worktree)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one
SYSTEMS = ["omnid-full", "omnid-content", "faster-whisper-int8", "faster-whisper-float32", "mlx-whisper"]


def clips(every: int, limit: int | None) -> list[dict]:
    rows = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["language"] == "en"][::every]
    return rows[:limit] if limit else rows


def load_audio(rows: list[dict]) -> list:
    from omnid.audio import decode_audio

    return [decode_audio(CORPUS / r["path"]) for r in rows]


def worker(system: str, every: int, limit: int | None, repeats: int, threads: int, fallback: bool) -> dict:
    rows = clips(every, limit)
    audio = load_audio(rows)
    started = time.perf_counter()
    transcribe = _system(system, threads, fallback)
    if transcribe is None:
        return {"system": system, "skipped": "not installed"}
    load_s = time.perf_counter() - started
    transcribe(audio[0])  # warm-up: first-call allocations and kernel set-up
    runs, texts = [], {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        for row, a in zip(rows, audio):
            texts[row["id"]] = transcribe(a)
        runs.append(time.perf_counter() - t0)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"system": system, "load_s": load_s, "runs": runs, "texts": texts, "peak_rss_mb": rss_mb}


FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def _system(system: str, threads: int, fallback: bool):
    if system.startswith("omnid"):
        import omnid  # noqa: F401  (OpenBLAS preload before mlx)
        from omnid.config import load_config, load_pins, model_folder
        from omnid.engine.options import TranscribeOptions
        from omnid.engine.whisper.engine import WhisperEngine

        folder = model_folder(load_config().model("tiny.en"))
        engine = WhisperEngine("tiny.en", folder, load_pins()["tiny.en"])
        opts = TranscribeOptions(temperature=0.0, fallback=fallback, window=system.split("-")[1])
        return lambda a: engine.transcribe(a, opts).text
    if system.startswith("faster-whisper"):
        from faster_whisper import WhisperModel

        from omnid.config import load_config, model_folder

        folder = model_folder(load_config().model("tiny.en"))
        model = WhisperModel(str(folder), device="cpu", compute_type=system.rsplit("-", 1)[1], cpu_threads=threads)

        def run(a):
            segments, _ = model.transcribe(
                a, language="en", beam_size=1, temperature=list(FALLBACK) if fallback else 0.0,
                condition_on_previous_text=False, vad_filter=False,
            )
            return "".join(s.text for s in segments).strip()

        return run
    if system == "mlx-whisper":
        try:
            import mlx_whisper  # noqa: F401
        except ImportError:
            return None
        return _mlx_whisper(fallback)
    raise ValueError(system)


def _mlx_whisper(fallback: bool):
    """mlx-whisper on the same tiny.en weights, converted to its folder format."""
    import tempfile

    import mlx.core as mx
    import mlx_whisper

    from omnid.config import load_config, model_folder
    from omnid.engine.whisper.checkpoint import load_checkpoint

    ckpt = load_checkpoint(model_folder(load_config().model("tiny.en")))
    out = Path(tempfile.mkdtemp(prefix="mlxw-"))
    (out / "config.json").write_text(json.dumps({**ckpt.dims.__dict__, "model_type": "whisper"}))
    weights = {k: v for k, v in ckpt.weights.items() if k != "encoder.positional_embedding"}
    mx.save_safetensors(str(out / "weights.safetensors"), weights)
    return lambda a: mlx_whisper.transcribe(
        a, path_or_hf_repo=str(out), language="en", temperature=FALLBACK if fallback else 0.0,
        condition_on_previous_text=False,
    )["text"].strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--every", type=int, default=5, help="take every Nth English clip (default 5)")
    p.add_argument("--limit", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--systems", nargs="*", default=SYSTEMS)
    p.add_argument("--fallback", action="store_true",
                   help="Whisper's temperature fallback (0.0, 0.2, ... 1.0) for every system instead of greedy only")
    p.add_argument("--baseline", metavar="REV", help="also run omnid-full as of this git revision, first")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.every, args.limit, args.repeats, args.threads, args.fallback)))
        return

    from omnid.evaluation.scoring import ErrorRate

    rows = clips(args.every, args.limit)
    audio_s = sum(r["duration_s"] for r in rows)
    ref_lines = (CORPUS / "reference" / "faster-whisper-tiny.en.jsonl").read_text().splitlines()
    ref = {d["id"]: d["text"].strip() for d in map(json.loads, ref_lines)}
    ref_rate = ErrorRate()
    for r in rows:
        ref_rate.add(r["text"], ref[r["id"]], "en")
    mode = "temperature fallback 0.0-1.0" if args.fallback else "greedy, temperature 0, no fallback"
    print(f"{len(rows)} English clips, {audio_s:.1f} s of audio, {mode}, {args.repeats} repeats, {args.threads} threads, "
          f"{os.cpu_count()} cores; reference file WER {ref_rate.percent:.2f} %\n")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(system, Path(__file__), system) for system in args.systems]
        if args.baseline:
            tree = Path(tmp) / "baseline"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.baseline], cwd=ROOT, check=True,
                           capture_output=True)
            runs.insert(0, ("omnid-full", tree / "bench" / Path(__file__).name, f"omnid-full@{args.baseline}"))
        try:
            for system, script, label in runs:
                cmd = [sys.executable, str(script), "--worker", system, "--every", str(args.every), "--repeats",
                       str(args.repeats), "--threads", str(args.threads)] + (
                           ["--limit", str(args.limit)] if args.limit else []) + (["--fallback"] if args.fallback else [])
                done = subprocess.run(cmd, capture_output=True, text=True,
                                      env={**os.environ, "OMNID_CORPUS": str(CORPUS)})
                if done.returncode != 0:
                    print(f"{label}: failed\n{done.stderr[-2000:]}")
                    continue
                res = {**json.loads(done.stdout.strip().splitlines()[-1]), "system": label}
                results.append(res)
                print(f"  ran {res['system']}", file=sys.stderr)
        finally:
            if args.baseline:
                subprocess.run(["git", "worktree", "remove", "--force", str(Path(tmp) / "baseline")], cwd=ROOT,
                               check=False)
    header = f"{'system':<32} {'audio s / wall s':>17} {'runs (s)':>24} {'WER %':>7} {'identical':>10} {'load s':>7} {'peak RSS MB':>12}"
    print(header)
    print("-" * len(header))
    base = None
    for res in results:
        if "skipped" in res:
            print(f"{res['system']:<32} skipped: {res['skipped']}")
            continue
        med = statistics.median(res["runs"])
        speed = audio_s / med
        if res["system"] == "faster-whisper-int8":
            base = speed
        rate = ErrorRate()
        for r in rows:
            rate.add(r["text"], res["texts"][r["id"]], "en")
        same = sum(res["texts"][r["id"]] == ref[r["id"]] for r in rows)
        runs = ", ".join(f"{x:.1f}" for x in res["runs"])
        print(f"{res['system']:<32} {speed:>17.2f} {runs:>24} {rate.percent:>7.2f} {same:>6}/{len(rows):<3} "
              f"{res['load_s']:>7.2f} {res['peak_rss_mb']:>12.0f}")
    if base:
        print()
        for res in results:
            if "runs" in res:
                print(f"{res['system']:<32} {audio_s / statistics.median(res['runs']) / base:5.2f}x faster-whisper int8")


if __name__ == "__main__":
    main()
