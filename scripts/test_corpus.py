"""Writes tests/corpus, the real speech the test suite reads, from a larger corpus: the clips named in
tests/corpus/clips.txt (one id a line, in the source manifest's order), their manifest lines, the reference
systems' outputs for them, and SOURCES.md with each clip's source and licence. Only clips whose licence is
permissive (public domain, CC0, CC BY, Apache, MIT, BSD) are taken; any other licence stops the script.

    .venv/bin/python scripts/test_corpus.py /path/to/corpus      # or OMNID_CORPUS=/path/to/corpus

Run it again after editing clips.txt; it rewrites everything under tests/corpus except clips.txt."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from pathlib import Path

import av
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "corpus"
# The licence of the recording itself, as the source corpus states it (after the repository's own licence, which
# covers the repository's code: a public-domain recording in a GPL repository is still public domain).
PERMISSIVE = ("public domain", "CC BY 4.0", "Apache-2.0", "MIT", "BSD", "free for any use", "CC0")
REFUSED = ("NC", "ND", "unknown", "no licence")
# Datasets whose own terms are non-commercial, whatever the repository that ships a clip of them says.
# Kept as WAV (the decoder's tests need one of every container); every other 16-bit WAV is stored as FLAC.
KEEP_WAV = ("an4_an369-mtos-b",)
REFUSED_DATASETS = ("AISHELL-2", "WenetSpeech", "TIMIT", "podcast")


def recording_licence(stated: str) -> str:
    """The part of a stated licence that covers the audio: after ';' where the dataset has terms of its own."""
    return stated.split(";", 1)[1].strip() if ";" in stated else stated


def _names(words: tuple[str, ...], text: str) -> bool:
    return any(re.search(rf"\b{re.escape(word)}\b", text) for word in words)


def is_permissive(row: dict) -> bool:
    """Copyleft or non-commercial terms anywhere (the repository's, the recording's or its dataset's) refuse it."""
    stated = row["source_license"]
    if _names(REFUSED, stated) or _names(REFUSED_DATASETS, row.get("dataset", "") + " " + stated):
        return False
    return _names(PERMISSIVE, recording_licence(stated))


def main(source: Path) -> int:
    wanted = [line.split("#")[0].strip() for line in (OUT / "clips.txt").read_text().splitlines()]
    wanted_set = {w for w in wanted if w}
    rows = [json.loads(line) for line in (source / "manifest.jsonl").read_text().splitlines() if line.strip()]
    chosen = [r for r in rows if r["id"] in wanted_set]
    missing = wanted_set - {r["id"] for r in chosen}
    if missing:
        print(f"not in {source}: {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    refused = [f"{r['id']}: {r['source_license']}" for r in chosen if not is_permissive(r)]
    if refused:
        print("not permissively licensed:\n  " + "\n  ".join(refused), file=sys.stderr)
        return 1
    shutil.rmtree(OUT / "audio", ignore_errors=True)
    for r in chosen:
        (OUT / r["path"]).parent.mkdir(parents=True, exist_ok=True)
        if r["path"].endswith(".wav") and r["id"] not in KEEP_WAV:
            flac = r["path"][: -len(".wav")] + ".flac"
            as_flac(source / r["path"], OUT / flac)
            data = (OUT / flac).read_bytes()
            r.update(path=flac, bytes=len(data), md5=hashlib.md5(data).hexdigest(), converted="from 16-bit WAV, losslessly")
        else:
            shutil.copyfile(source / r["path"], OUT / r["path"])
    (OUT / "manifest.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in chosen))
    (OUT / "reference").mkdir(exist_ok=True)
    for ref in sorted((source / "reference").glob("*.jsonl")):
        lines = [line for line in ref.read_text().splitlines() if line.strip() and json.loads(line)["id"] in wanted_set]
        (OUT / "reference" / ref.name).write_text("".join(line + "\n" for line in lines))
    (OUT / "SOURCES.md").write_text(sources(chosen))
    size = sum((OUT / r["path"]).stat().st_size for r in chosen)
    print(f"{len(chosen)} clips, {sum(r['duration_s'] for r in chosen):.0f} s, {size / 1e6:.1f} MB in {OUT}")
    return 0


def as_flac(wav: Path, flac: Path) -> None:
    """The same samples in FLAC (about half the bytes): checked sample for sample after writing."""
    with av.open(str(wav)) as src:
        stream = src.streams.audio[0]
        if stream.codec_context.name != "pcm_s16le":
            raise SystemExit(f"{wav}: {stream.codec_context.name}, not 16-bit PCM")
        rate, layout = stream.rate, stream.layout.name
        frames = [frame.to_ndarray() for frame in src.decode(stream)]
    samples = np.concatenate(frames, axis=1)
    with av.open(str(flac), "w", format="flac") as out:
        encoder = out.add_stream("flac", rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout=layout)
        frame.sample_rate = rate
        for packet in encoder.encode(frame):
            out.mux(packet)
        for packet in encoder.encode(None):
            out.mux(packet)
    with av.open(str(flac)) as back:
        again = np.concatenate([f.to_ndarray() for f in back.decode(back.streams.audio[0])], axis=1)
    if again.shape != samples.shape or not np.array_equal(again, samples):
        raise SystemExit(f"{flac}: the FLAC does not hold the WAV's samples")


def sources(rows: list[dict]) -> str:
    head = (
        "# The test suite's speech\n\n"
        "Real recordings with their reference transcripts, taken from the public repositories and datasets below by\n"
        "`scripts/test_corpus.py`. 16-bit WAV files are stored as FLAC (the same samples in about half the bytes), but\n"
        "for one WAV kept for the decoder's tests; every other file is as its source ships it. Each recording is in the\n"
        "public domain or under a permissive licence (CC0, CC BY 4.0, Apache-2.0, MIT, BSD); the licence column gives\n"
        "the repository's licence, then, after `;`, the recording's own where the dataset states one. The CC BY 4.0\n"
        "recordings are attributed here: LibriSpeech (Vassil Panayotov, Guoguo Chen, Daniel Povey, Sanjeev\n"
        "Khudanpur; from LibriVox's public-domain readings) and Multilingual LibriSpeech (Vineel Pratap et al.).\n"
        "`reference/` holds two other recognizers' outputs for these clips (faster-whisper and mlx-whisper, tiny.en),\n"
        "which the tests compare against.\n\n"
        "| clip | language | seconds | dataset | source (repository @ commit, path) | licence |\n"
        "|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['id']} | {r['language']} | {r['duration_s']:.1f} | {r.get('dataset', '')} | "
        f"{r['source_repo']} @ {r['source_commit'][:10]}, `{r['source_path']}` | {r['source_license']} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    given = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OMNID_CORPUS")
    if not given:
        sys.exit("usage: scripts/test_corpus.py CORPUS (or set OMNID_CORPUS)")
    sys.exit(main(Path(given)))
