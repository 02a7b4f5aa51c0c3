"""Throughput of one Whisper model running several jobs together, against the same jobs one at a time.

The jobs are what realtime sessions send: finals (a segment of up to 30 s, encoded as a padded 30 s window, as
files are) and previews (the segment so far, encoded at its own length). Each batch size keeps that many jobs
live, starting the next as one ends (as the runtime does), over the same English corpus clips; size 1 is the solo
path. The table shows the median wall time of --repeats runs, jobs per second, the speed-up over size 1, where
the time went (encoder calls, decode steps) and the texts identical to size 1's.

    python bench/batch_speed.py                 # 16 clips, sizes 1 2 4 8, 3 repeats
    python bench/batch_speed.py --jobs 32 --sizes 1 8 16
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one

import omnid  # noqa: E402,F401  (OpenBLAS before mlx)
from omnid.audio import decode_audio  # noqa: E402
from omnid.config import load_config, load_pins, model_folder  # noqa: E402
from omnid.engine.options import TranscribeOptions  # noqa: E402
from omnid.engine.whisper.batch import WhisperBatch  # noqa: E402
from omnid.engine.whisper.engine import WhisperEngine  # noqa: E402

KINDS = {
    "final": TranscribeOptions(window="full"),
    "preview": TranscribeOptions(window="content"),
}


def count_time(spent: Counter) -> None:
    """From now on, adds the seconds every WhisperBatch spends encoding and decoding to spent["encode"] and
    spent["decode"] (a program's own work between its requests counts where it resumed)."""

    def timed(name, fn):
        def inner(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0
        return inner

    WhisperBatch._encode = timed("encode", WhisperBatch._encode)  # type: ignore[method-assign]
    WhisperBatch._decode = timed("decode", WhisperBatch._decode)  # type: ignore[method-assign]


def run(engine: WhisperEngine, kind: str, audio: list, size: int) -> tuple[float, list[str]]:
    opts = KINDS[kind]

    def program(a):
        return engine.final_program(a, opts, "") if kind == "final" else engine.preview_program(a, opts)

    batch = engine.batch()
    texts: dict[int, str] = {}
    following = iter(enumerate(audio))
    started = time.perf_counter()
    for key, a in following:
        batch.add(key, program(a))
        if len(batch) >= size:
            break
    while len(texts) < len(audio):
        for key, text, error in batch.step(lambda keys, encoding: ()):
            if error is not None:
                raise error
            texts[key] = text
            nxt = next(following, None)
            if nxt is not None:
                batch.add(nxt[0], program(nxt[1]))
    wall = time.perf_counter() - started
    return wall, [texts[i] for i in range(len(audio))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=16, help="English clips (up to 30 s), every --every th")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    args = ap.parse_args()

    model = load_config().model("tiny.en")
    engine = WhisperEngine("tiny.en", model_folder(model), load_pins()["tiny.en"])
    rows = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["language"] == "en" and r["duration_s"] <= 30][:: args.every][: args.jobs]
    audio = [decode_audio(CORPUS / r["path"]) for r in rows]
    total_s = sum(len(a) for a in audio) / 16000

    spent: Counter[str] = Counter()
    count_time(spent)
    run(engine, "final", audio[:2], 2)  # warm-up

    print(f"{len(audio)} English clips, {total_s:.0f} s of audio; tiny.en; median of {args.repeats} runs")
    print(f"{'jobs':<8}{'batch':>6}{'wall s':>9}{'jobs/s':>8}{'speed-up':>10}{'encode s':>10}{'decode s':>10}"
          f"{'same text':>11}")
    for kind in args.kinds:
        solo: list[str] | None = None
        base = None
        for size in args.sizes:
            walls, splits = [], []
            for _ in range(args.repeats):
                spent.clear()
                wall, texts = run(engine, kind, audio, size)
                walls.append(wall)
                splits.append((spent["encode"], spent["decode"]))
            wall = statistics.median(walls)
            enc = statistics.median(s[0] for s in splits)
            dec = statistics.median(s[1] for s in splits)
            solo = solo or texts
            base = base or wall
            same = sum(a == b for a, b in zip(texts, solo))
            print(f"{kind:<8}{size:>6}{wall:>9.2f}{len(audio) / wall:>8.2f}{base / wall:>9.2f}x{enc:>10.2f}{dec:>10.2f}"
                  f"{same:>7}/{len(audio)}")


if __name__ == "__main__":
    main()
