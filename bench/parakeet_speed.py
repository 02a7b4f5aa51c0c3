"""Parakeet speed and memory: omnid's engine against parakeet-mlx 0.7.0 (the reference MLX port) and NVIDIA NeMo
3.0.0 on torch's CPU (when its throwaway virtualenv is there: --nemo-python, default /tmp/nemo/bin/python;
bench/parakeet_nemo.py is its worker), same checkpoint, same audio.

The checkpoint is random with parakeet-tdt-0.6b-v3's shapes (627 M parameters: 24 FastConformer layers of 1024,
8192 pieces, TDT durations 0-4), built by NeMo's own classes (bench/parakeet_nemo.py build, which says how) into a
temporary folder (deleted at the end unless --keep DIR, which is reused when it holds one); omnid and parakeet-mlx
read it converted to the mlx-community layout (omnid.engine.parakeet.convert, float32), NeMo the .nemo itself.

The audio is real English speech: corpus clips (audio/en/*, sorted) concatenated up to each --seconds length.
Each system runs as a user runs it, in float32 on this machine's CPU, in a fresh subprocess per run (its load time
and peak RSS, ru_maxrss, are its own): load; an untimed warm-up on the first second of the audio; then, timed, one
transcription of the whole audio from samples in memory (NeMo: from the file, as its transcribe() takes it):

* omnid: ParakeetEngine.transcribe (chunks of at most 120 s cut at quiet points, as the daemon serves a file);
* parakeet-mlx: Parakeet.transcribe with its command line's defaults, 120 s chunks overlapping by 15 s (one pass up
  to 120 s), dtype float32; its audio loader (ffmpeg) is replaced by the decoded samples, and librosa's mel filter
  bank, which its front end imports, by omnid's (NeMo's Slaney filters, the same values);
* NeMo: ASRModel.transcribe, the whole file in one pass (NeMo's own default).

Printed per length: the median of --runs runs of load s, total s, real-time factor (total / audio length) and peak
RSS MB for each system, with omnid's speed-up over each (its total / omnid's) and memory ratio (omnid's / its),
and how much of the texts agree (words in common, by edit distance). Targets: >= 1.5x parakeet-mlx's speed and no
slower than NeMo's, peak RSS no higher than parakeet-mlx's.

    .venv/bin/python bench/parakeet_speed.py                          # 60 s and 600 s, 3 runs each
    .venv/bin/python bench/parakeet_speed.py --seconds 60 --runs 1    # a quick look
    .venv/bin/python bench/parakeet_speed.py --keep /tmp/pk06         # keep (and later reuse) the checkpoint
    .venv/bin/python bench/parakeet_speed.py --seconds 600 --at-most parakeet-mlx=1   # its one run: over an hour
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one
NEMO_PYTHON = Path("/tmp/nemo/bin/python")
SYSTEMS = ("omnid", "parakeet-mlx", "nemo")
CHUNK_S, OVERLAP_S = 120.0, 15.0  # parakeet-mlx's command-line defaults


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def corpus_audio(seconds: float):
    import numpy as np

    from omnid.audio import SAMPLE_RATE, decode_audio

    want, parts, have = int(seconds * SAMPLE_RATE), [], 0
    for path in sorted((CORPUS / "audio" / "en").glob("*.*")):
        parts.append(decode_audio(path))
        have += len(parts[-1])
        if have >= want:
            return np.concatenate(parts)[:want].astype(np.float32)
    raise SystemExit(f"only {have / SAMPLE_RATE:.0f} s of English speech in {CORPUS}")


# --- workers (one fresh process per run) ---------------------------------------------------------------------------


def worker_omnid(folder: Path, audio_path: Path) -> dict:
    import numpy as np

    from omnid.engine.parakeet.engine import ParakeetEngine

    audio = np.load(audio_path)
    started = time.perf_counter()
    engine = ParakeetEngine("bench", folder)
    load_s = time.perf_counter() - started
    engine.transcribe(audio[:16000])
    started = time.perf_counter()
    text = engine.transcribe(audio).text
    return {"load_s": load_s, "total_s": time.perf_counter() - started, "text": text, "rss_mb": rss_mb()}


def worker_parakeet_mlx(folder: Path, audio_path: Path) -> dict:
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_map

    from omnid.engine.nemo.features import FrontEnd, mel_filterbank

    def mel(sr: int, n_fft: int, n_mels: int, **_: object) -> np.ndarray:
        return mel_filterbank(FrontEnd(sample_rate=sr, n_mels=n_mels, n_fft=n_fft, win_length=400, hop_length=160))

    sys.modules["librosa"] = types.ModuleType("librosa")
    sys.modules["librosa"].filters = types.SimpleNamespace(mel=mel)  # type: ignore[attr-defined]
    import parakeet_mlx.parakeet as parakeet_module
    from parakeet_mlx.utils import from_config

    audio = np.load(audio_path)
    started = time.perf_counter()
    model = from_config(json.loads((folder / "config.json").read_text()))
    model.load_weights(str(folder / "model.safetensors"), strict=True)
    model.update(tree_map(lambda a: a.astype(mx.float32), model.parameters()))
    mx.eval(model.parameters())
    load_s = time.perf_counter() - started
    samples = {"all": audio, "warm-up": audio[:16000]}
    parakeet_module.load_audio = lambda path, sr, dtype: mx.array(samples[str(path)], dtype=dtype)  # type: ignore
    model.transcribe("warm-up", dtype=mx.float32, chunk_duration=CHUNK_S, overlap_duration=OVERLAP_S)
    started = time.perf_counter()
    text = model.transcribe("all", dtype=mx.float32, chunk_duration=CHUNK_S, overlap_duration=OVERLAP_S).text
    return {"load_s": load_s, "total_s": time.perf_counter() - started, "text": text, "rss_mb": rss_mb()}


def spawn(args: list[str], python: str = sys.executable, script: str = __file__) -> dict:
    done = subprocess.run([python, script, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"worker {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker_convert(nemo: Path, folder: Path) -> dict:
    from omnid.engine.parakeet.convert import to_mlx_folder

    to_mlx_folder(nemo, folder)
    return {}


def run_nemo(python: Path, nemo: Path, wav: Path) -> dict:
    return spawn(["run", str(nemo), str(wav)], python=str(python), script=str(ROOT / "bench" / "parakeet_nemo.py"))


# --- the comparison --------------------------------------------------------------------------------------------------


def machine(nemo_python: Path | None) -> str:
    import mlx.core as mx

    from omnid.blas import status

    torch = "no NeMo virtualenv"
    if nemo_python:
        done = subprocess.run([str(nemo_python), "-c", "import torch, nemo; print(torch.__version__, "
                               "torch.get_num_threads(), nemo.__version__)"], capture_output=True, text=True)
        torch = "torch {} ({} threads), NeMo {}".format(*done.stdout.split()) if done.returncode == 0 else torch
    from importlib.metadata import version
    return (f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, mlx {mx.__version__} "
            f"({mx.default_device()}), BLAS {status().name}; parakeet-mlx {version('parakeet-mlx')}; {torch}")


def word_agreement(a: str, b: str) -> float:
    from omnid.evaluation.scoring import edit_distance

    x, y = a.split(), b.split()
    return 1.0 - edit_distance(x, y) / max(1, len(x), len(y))


def table(seconds: float, results: dict[str, list[dict]]) -> None:
    med = {s: {k: statistics.median(r[k] for r in rows) for k in ("load_s", "total_s", "rss_mb")}
           for s, rows in results.items()}
    others = [s for s in SYSTEMS if s in results and s != "omnid"]
    runs = ", ".join(f"{s} {len(rows)}" for s, rows in results.items())
    print(f"\n{seconds:g} s of speech, median of fresh processes per system ({runs})")
    header = f"{'':<16}{'omnid':>10}" + "".join(f"{s:>14}{'ratio':>8}" for s in others)
    print(header + "\n" + "-" * len(header))
    om = med.get("omnid")
    for label, key, fmt in (("load s", "load_s", "{:.2f}"), ("total s", "total_s", "{:.2f}"),
                            ("real-time factor", "rtf", "{:.3f}"), ("peak RSS MB", "rss_mb", "{:.0f}")):
        def value(s: str) -> float:
            return med[s]["total_s"] / seconds if key == "rtf" else med[s][key]

        line = f"{label:<16}{fmt.format(value('omnid')) if om else '-':>10}"
        for s in others:
            ratio = ""
            if om:
                ratio = f"{value('omnid') / value(s):.2f}" if key == "rss_mb" else f"{value(s) / value('omnid'):.2f}x"
            line += f"{fmt.format(value(s)):>14}{ratio:>8}"
        print(line)
    print("ratio: its time / omnid's (omnid's speed-up); for peak RSS omnid's / its")
    for s, rows in results.items():
        print(f"  {s} total s per run: " + ", ".join(f"{r['total_s']:.2f}" for r in rows))
    if om:
        for s in others:
            print(f"  words of {s}'s text in omnid's: {word_agreement(results[s][0]['text'], results['omnid'][0]['text']):.1%}"
                  f" ({len(results[s][0]['text'].split())} vs {len(results['omnid'][0]['text'].split())} words)")
        if "parakeet-mlx" in med:
            speed = med["parakeet-mlx"]["total_s"] / om["total_s"]
            memory = om["rss_mb"] / med["parakeet-mlx"]["rss_mb"]
            print(f"  target >= 1.5x parakeet-mlx, RSS <= its: {'MET' if speed >= 1.5 and memory <= 1 else 'NOT MET'}"
                  f" ({speed:.2f}x, memory {memory:.2f})")
        if "nemo" in med:
            speed = med["nemo"]["total_s"] / om["total_s"]
            print(f"  target no slower than NeMo: {'MET' if speed >= 1 else 'NOT MET'} ({speed:.2f}x)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, nargs="+", default=[60.0, 600.0], help="audio lengths (default 60 600)")
    p.add_argument("--runs", type=int, default=3, help="fresh processes per system and length (default 3)")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--at-most", nargs="+", default=[], metavar="SYSTEM=N",
                   help="fewer runs for a slow system (parakeet-mlx=1: its 10 minutes take over an hour on 2 cores)")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep the checkpoint here (reused if it is there)")
    p.add_argument("--nemo-python", type=Path, default=NEMO_PYTHON, help="NeMo's virtualenv's python")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)  # (convert: the .nemo; --audio: the folder out)
    p.add_argument("--audio", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        work = {"omnid": worker_omnid, "parakeet-mlx": worker_parakeet_mlx, "convert": worker_convert}[args.worker]
        print(json.dumps(work(args.folder, args.audio)))
        return
    import numpy as np

    from omnid.audio import decode_audio, wav_bytes

    nemo_python = args.nemo_python if args.nemo_python.exists() else None
    systems = [s for s in args.systems if s != "nemo" or nemo_python]
    at_most = {s: int(n) for s, n in (item.split("=") for item in args.at_most)}
    if set(at_most) - set(SYSTEMS):
        raise SystemExit(f"--at-most names a system that is not one of {', '.join(SYSTEMS)}")
    if "nemo" in args.systems and not nemo_python:
        print(f"NeMo left out: no {args.nemo_python} (see bench/parakeet_nemo.py)")
    print(machine(nemo_python))
    work = args.keep or Path(tempfile.mkdtemp(prefix="parakeet-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        nemo, folder = work / "model.nemo", work / "mlx"
        if not nemo.is_file():
            if not nemo_python:
                raise SystemExit("the checkpoint is built with NeMo's classes: give --nemo-python")
            started = time.perf_counter()
            built = spawn(["build", str(nemo)], python=str(nemo_python), script=str(ROOT / "bench" / "parakeet_nemo.py"))
            print(f"built {nemo} ({built['parameters'] / 1e6:.0f} M parameters) in {time.perf_counter() - started:.0f} s")
        if not (folder / "model.safetensors").is_file():  # in a worker: ru_maxrss survives fork and exec, so
            spawn(["--worker", "convert", "--folder", str(nemo), "--audio", str(folder)])  # this process stays small
        for seconds in args.seconds:
            (work / "audio.wav").write_bytes(wav_bytes(corpus_audio(seconds)))
            np.save(work / "audio.npy", decode_audio(work / "audio.wav"))  # every system gets the same 16-bit samples
            results: dict[str, list[dict]] = {s: [] for s in systems}
            for run in range(args.runs):  # interleaved, so that drift in the machine's speed hits every system alike
                for s in [s for s in systems if run < at_most.get(s, args.runs)]:
                    if s == "nemo":
                        assert nemo_python is not None
                        row = run_nemo(nemo_python, nemo, work / "audio.wav")
                    else:
                        row = spawn(["--worker", s, "--folder", str(folder), "--audio", str(work / "audio.npy")])
                    results[s].append(row)
                    print(f"  {seconds:g} s {s}: total {row['total_s']:.2f} s, load {row['load_s']:.2f} s, "
                          f"RSS {row['rss_mb']:.0f} MB", flush=True)
            table(seconds, results)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
