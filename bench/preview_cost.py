"""What a live preview costs, with and without the stable prefix (not part of the unit suite).

Replays the realtime session's preview schedule on English corpus clips: a preview of the segment so far after
every second of audio, decoded as the session decodes it (content window, greedy, no timestamps). Once the
previews agree (LocalAgreement, the last word held back, from 1.5 s of speech on) the agreed words are forced as
the decoder's prefix. Prints, side by side and on the same clips, the time per preview and the tokens sampled
with the prefix and without it, and how much the two previews' texts differ.

    .venv/bin/python bench/preview_cost.py [--clips 12] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401  (OpenBLAS before mlx)
from omnid.audio import decode_audio  # noqa: E402
from omnid.config import load_config, load_pins, model_folder  # noqa: E402
from omnid.engine.options import TranscribeOptions  # noqa: E402
from omnid.engine.whisper.engine import WhisperEngine  # noqa: E402
from omnid.evaluation.corpus import corpus_folder  # noqa: E402
from omnid.realtime.text import LocalAgreement  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    config = load_config()
    model = config.model(config.transcription.default_model)
    engine = WhisperEngine(model.id, model_folder(model), load_pins().get(model.id, {}))
    manifest = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    clips = [m for m in manifest if m["language"] == "en" and 6.0 <= m["duration_s"] <= 15.0][: args.clips]
    opts = TranscribeOptions(window=config.realtime.preview_window, fallback=False)
    engine.preview(decode_audio(CORPUS / clips[0]["path"])[:32000], opts)  # warm-up

    timings = {"prefix": [], "none": []}
    words = {"prefix": 0, "none": 0}
    for _ in range(args.repeats):
        for clip in clips:
            audio = decode_audio(CORPUS / clip["path"])
            agree = LocalAgreement(hold_back=1)
            for end in range(16000, len(audio) + 1, 16000):
                piece = audio[:end]
                prefix = agree.text()
                t = time.perf_counter()
                text = engine.preview(piece, opts, prefix)
                timings["prefix"].append(time.perf_counter() - t)
                t = time.perf_counter()
                free = engine.preview(piece, opts, "")
                timings["none"].append(time.perf_counter() - t)
                if end >= 1.5 * 16000:
                    agree.update(text)
                words["prefix"] += len(text.split())
                words["none"] += len(free.split())
    n = len(timings["prefix"])
    print(f"{len(clips)} clips x {args.repeats} repeats, {n} previews each way, window={opts.window}")
    print("| preview decode | median ms | p90 ms | total s | words shown |")
    print("|---|---|---|---|---|")
    for key, label in (("none", "no prefix"), ("prefix", "stable prefix forced")):
        ts = sorted(timings[key])
        print(f"| {label} | {1000 * statistics.median(ts):.0f} | {1000 * ts[int(0.9 * (n - 1))]:.0f} | "
              f"{sum(ts):.1f} | {words[key]} |")
    print(f"prefix / none, median time: {statistics.median(timings['prefix']) / statistics.median(timings['none']):.2f}x")


if __name__ == "__main__":
    main()
