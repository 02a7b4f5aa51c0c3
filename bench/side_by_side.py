"""What the side-by-side benches share (omnid against a reference implementation in its own virtualenv, e.g.
cohere_asr_speed.py, sensevoice_speed.py): each measurement a fresh child process (its peak RSS its own), the
sides in turn for every run of every input (they see the same machine load), each child's last stdout line its
JSON row, and a line saying what the machine and its BLAS libraries were."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path


def child_row(cmd: list[str], label: str, cwd: Path, env: dict[str, str] | None = None) -> dict:
    """One measurement: the child's JSON row, with the 1-minute load average at its start and its process time."""
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})})
    if done.returncode:
        sys.exit(f"{label} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    row.update(load_avg=load_before, process_s=time.perf_counter() - started)
    return row


def alternate(inputs: list[str], runs: int, sides: list[str], measure: Callable[[str, str], dict],
              describe: Callable[[dict], str]) -> list[dict]:
    """Every side once per run of every input, in turn; each row printed as it comes (``describe``: its details)."""
    rows: list[dict] = []
    for name in inputs:
        for run in range(runs):
            for side in sides:
                row = {**measure(side, name), "side": side}
                rows.append(row)
                print(f"{side:<7} {name:>3} s run {run + 1}/{runs}: load {row['load_s']:.1f} s, total "
                      f"{row['total_s']:.2f} s, RTF {row['rtf']:.4f}, peak RSS {row['peak_rss_mib']:.0f} MiB, "
                      f"{describe(row)}, load avg {row['load_avg']:.1f}, process {row['process_s']:.0f} s", flush=True)
    return rows


def machine(reference: str) -> str:
    """The machine, MLX and the BLAS libraries threadpoolctl finds in this process, then ``reference``'s line."""
    import mlx.core as mx
    from threadpoolctl import threadpool_info

    blas = ", ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture') or '?'}, "
                     f"{i.get('num_threads')} threads)" for i in threadpool_info())
    return (f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} cores, "
            f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '-')}; mlx {mx.__version__}; "  # type: ignore[attr-defined]
            f"BLAS: {blas or 'none found'}; {reference}")


def chosen(parser: argparse.ArgumentParser, args: argparse.Namespace, inputs: Iterable[str], sides: Iterable[str],
           reference: str, setup: str) -> tuple[list[str], list[str]]:
    """--inputs and --sides as lists, each value checked; the reference side needs its virtualenv (``setup``: where
    its commands are)."""
    wanted = [s.strip() for s in args.inputs.split(",") if s.strip()]
    picked = [s.strip() for s in args.sides.split(",") if s.strip()]
    if bad := [s for s in wanted if s not in inputs] + [s for s in picked if s not in sides]:
        parser.error(f"unknown input or side: {', '.join(bad)} (inputs: {', '.join(inputs)})")
    if reference in picked and not args.torch_python.exists():
        parser.error(f"no {reference} virtualenv at {args.torch_python} ({setup} has its commands; --torch-python PY)")
    return wanted, picked


def build_once(ready: bool, work: Path, build: list[str], cwd: Path) -> None:
    """The reference's virtualenv builds the checkpoint and the audio into ``work`` where they are not there yet."""
    if not ready:
        print(f"building the checkpoint and audio in {work} (once)", flush=True)
        subprocess.run(build, check=True, cwd=cwd)


def medians(rows: list[dict], side: str, name: str, keys: Iterable[str]) -> tuple[list[dict], dict[str, float]]:
    """A side's rows for one input, and the median of each key over them (a key a row lacks counts as 0)."""
    mine = [r for r in rows if r["side"] == side and r["input"] == name]
    return mine, ({k: statistics.median(r.get(k, 0.0) for r in mine) for k in keys} if mine else {})


def result(name: str, audio_s: float, load_s: float, total_s: float, **extra: object) -> dict:
    """A child's JSON row: its input, times, real-time factor and peak RSS so far, and whatever else it reports."""
    import resource

    return {"input": name, "audio_s": audio_s, "load_s": load_s, "total_s": total_s, "rtf": total_s / audio_s,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, **extra}


def closing(rows: list[dict], reference: str, began: float, table: Callable[[], None]) -> None:
    """After the runs: the machine (with the reference side's torch, from its first row), the table, the wall time."""
    row = next((r for r in rows if r["side"] == reference), None)
    print("\n" + machine(f"torch {row['torch']} ({row['threads']} threads)" if row else f"{reference}: not run"))
    table()
    print(f"\nwall time {time.perf_counter() - began:.0f} s")


def reference_main(doc: str | None, work: Path, build: Callable[[Path], None], child: Callable[[Path, str], None],
                   inputs: Iterable[str]) -> None:
    """A reference venv's script: ``--build`` the checkpoint and speech into --work, ``--child INPUT`` one
    measurement (one JSON line)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=work)
    p.add_argument("--build", action="store_true")
    p.add_argument("--child", choices=sorted(inputs))
    args = p.parse_args()
    if args.build:
        build(args.work)
    if args.child:
        child(args.work, args.child)


def side_command(side: str, name: str, args: argparse.Namespace, reference: str, reference_script: Path,
                 own_script: str) -> list[str]:
    """A measurement's child: the reference's script in its virtualenv (``--child``), or this bench's own
    ``--worker`` in omnid's."""
    if side == reference:
        return [str(args.torch_python), str(reference_script), "--work", str(args.work), "--child", name]
    return [sys.executable, own_script, "--work", str(args.work), "--worker", name]


def token_table(rows: list[dict], inputs: list[str], sides: Iterable[str], reference: str,
                more: Callable[[str, dict, dict], None] | None = None) -> None:
    """The medians of a decoding bench (load, total, real-time factor, peak RSS, tokens each side decoded), and per
    input omnid's speed and peak RSS against the reference's (``more`` adds lines for an input after them)."""
    width = max(8, max(len(s) for s in sides) + 2)
    print(f"\n{'side':<{width}}{'input':>7}{'runs':>6}{'load s':>9}{'total s':>10}{'RTF':>8}{'peak RSS MiB':>14}"
          f"{'tokens':>9}{'load avg':>10}")
    med = {}
    for name in inputs:
        for side in sides:
            mine, m = medians(rows, side, name, ("load_s", "total_s", "rtf", "peak_rss_mib", "load_avg"))
            if not mine:
                continue
            med[side, name] = m
            tokens = sorted({sum(r["tokens"]) for r in mine})
            print(f"{side:<{width}}{name + ' s':>7}{len(mine):>6}{m['load_s']:>9.1f}{m['total_s']:>10.2f}"
                  f"{m['rtf']:>8.3f}{m['peak_rss_mib']:>14.0f}{','.join(map(str, tokens)):>9}{m['load_avg']:>10.1f}")
        if ("omnid", name) in med and (reference, name) in med:
            o, t = med["omnid", name], med[reference, name]
            speed = t["total_s"] / o["total_s"]
            print(f"{name} s: omnid {speed:.2f}x {reference}'s speed (target >= 1.5x: "
                  f"{'met' if speed >= 1.5 else 'NOT met'}), peak RSS {o['peak_rss_mib'] / t['peak_rss_mib']:.2f}x "
                  f"{reference}'s")
            if more is not None:
                more(name, o, t)


def corpus_speech(work: Path, seconds: dict[str, float], root: Path) -> None:
    """The repository corpus's English and Chinese clips joined (repeated where short) and cut to each input's
    length, saved as ``audio_{name}s.npy`` in ``work`` where missing."""
    import numpy as np

    from omnid.audio import decode_audio

    corpus = root / "tests" / "corpus"
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines() if line.strip()]
    for name, length in seconds.items():
        out = work / f"audio_{name}s.npy"
        if not out.is_file():
            speech = np.concatenate([decode_audio(corpus / r["path"]) for r in rows if r["language"] in ("en", "zh")])
            speech = np.tile(speech, int(length * 16000 // len(speech)) + 1)
            np.save(out, speech[: int(length * 16000)].astype(np.float32))


def token_main(doc: str | None, own_script: str, work: Path, torch_python: Path, seconds: dict[str, float],
               sides: tuple[str, ...], reference: str, reference_script: Path, setup: str, default_inputs: str,
               built: str, prepare: Callable[[Path], None], worker: Callable[[Path, str], dict], root: Path,
               more: Callable[[list[dict]], Callable[[str, dict, dict], None] | None] = lambda rows: None) -> None:
    """A decoding bench's command line: ``--worker`` measures omnid in this process; otherwise the checkpoint is
    built once by the reference (``built`` names the file that says it is), then every run of every input has each
    side in a child of its own, and the table closes it."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=work)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--inputs", default=default_inputs)
    p.add_argument("--sides", default=",".join(sides))
    p.add_argument("--torch-python", type=Path, default=torch_python)
    p.add_argument("--worker", choices=sorted(seconds), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.work, args.worker)), flush=True)
        return
    inputs, picked = chosen(p, args, seconds, sides, reference, setup)
    prepare(args.work)
    build_once((args.work / "checkpoint" / built).is_file(), args.work,
               [str(args.torch_python), str(reference_script), "--work", str(args.work), "--build"], root)
    began = time.perf_counter()
    rows = alternate(inputs, args.runs, picked,
                     lambda side, name: child_row(side_command(side, name, args, reference, reference_script,
                                                               own_script), f"{side} {name} s", root),
                     lambda r: f"tokens {r['tokens']}")
    closing(rows, reference, began, lambda: token_table(rows, inputs, sides, reference, more(rows)))
