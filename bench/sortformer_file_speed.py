"""Sortformer file route: omnid against NVIDIA NeMo's ``forward_streaming`` (the model's own code, torch on the
CPU), same weights, same audio, the very-high preset (340-frame chunks, 40 frames of right context, FIFO 40,
cache update every 300 frames, cache 188).

NeMo is not a dependency of omnid. This bench needs the throwaway virtualenv of scripts/sortformer_goldens.py:

    python3 -m venv /tmp/nemo-venv
    /tmp/nemo-venv/bin/pip install torch==2.13.0 'nemo_toolkit[asr]==3.0.0'
    .venv/bin/python bench/sortformer_file_speed.py --nemo-python /tmp/nemo-venv/bin/python

Under NeMo's Python it builds the real v2.1 shapes (17 FastConformer layers of 512, 18 Transformer layers of
192) from the v2 configuration of scripts/sortformer_goldens.py, re-randomises every parameter with that script's
rule, and saves the model with NeMo's own ``save_to``. omnid loads that ``.nemo`` through its production loader,
so both systems run the same weights. The audio is 300 s of two synthetic voices taking turns
(tests/sortformer_clips.py).

Each system runs in its own fresh processes; each process loads the model once, then diarizes the whole file
--repeats times (the first pass warms caches and is not counted). Printed: load s, the median pass in seconds, the
real-time factor (pass time / audio time), peak RSS (ru_maxrss), omnid's median against NeMo's, how far
omnid's probabilities are from NeMo's (max abs over every frame and speaker), and where one pass of each goes:
pre-encode, Conformer, Transformer and head (the rest is the front end and the streaming state updates).

    .venv/bin/python bench/sortformer_file_speed.py --nemo-python /tmp/nemo-venv/bin/python   # ~15 min here
    .venv/bin/python bench/sortformer_file_speed.py --nemo-python ... --seconds 60 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# chunk_len, chunk_right_context, fifo_len, spkcache_update_period, spkcache_len: the model card's very-high
VERY_HIGH = (340, 40, 40, 300, 188)


def real_shapes(config: dict) -> dict:
    """The goldens script's v2 configuration at the released v2.1 model's sizes."""
    config = json.loads(json.dumps(config))
    config["model_defaults"] = {"fc_d_model": 512, "tf_d_model": 192}
    config["sortformer_modules"].update(fc_d_model=512, tf_d_model=192)
    config["encoder"].update(n_layers=17, d_model=512, n_heads=8, subsampling_conv_channels=256)
    config["transformer_encoder"].update(num_layers=18, hidden_size=192, inner_size=768, num_attention_heads=8)
    return config


def nemo_worker(nemo_file: Path, seconds: float, repeats: int, out: Path) -> dict:
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    from nemo.collections.asr.models import SortformerEncLabelModel
    from omegaconf import OmegaConf
    from sortformer_goldens import CONFIG, randomise

    from tests.sortformer_clips import two_voices

    started = time.perf_counter()
    if nemo_file.exists():
        model = SortformerEncLabelModel.restore_from(str(nemo_file), map_location="cpu")
    else:
        torch.manual_seed(0)
        model = SortformerEncLabelModel(cfg=OmegaConf.create(real_shapes(CONFIG)))
        randomise(model)
        model.save_to(str(nemo_file))
    model.eval()
    load_s = time.perf_counter() - started
    mods = model.sortformer_modules
    (mods.chunk_len, mods.chunk_right_context, mods.fifo_len, mods.spkcache_update_period,
     mods.spkcache_len) = VERY_HIGH
    stages: dict[str, float] = {}
    pre_started: list[float] = []
    model.encoder.pre_encode.register_forward_pre_hook(lambda *_: pre_started.append(time.perf_counter()))
    model.encoder.pre_encode.register_forward_hook(lambda *_: _add(stages, "pre-encode", pre_started.pop()))
    model.frontend_encoder = _timed(model.frontend_encoder, stages, "Conformer")
    model.forward_infer = _timed(model.forward_infer, stages, "Transformer and head")
    audio = torch.from_numpy(two_voices(seconds))[None]
    length = torch.tensor([audio.shape[1]])
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            stages.clear()
            t = time.perf_counter()
            mel, mel_len = model.process_signal(audio_signal=audio, audio_signal_length=length)
            probs = model.forward_streaming(mel[:, :, : int(mel_len.max())], mel_len)[0].numpy()
            times.append(time.perf_counter() - t)
    np.save(out, probs.astype(np.float32))
    return {"load_s": load_s, "times": times, "stages": stages, "threads": torch.get_num_threads()}


def _add(stages: dict[str, float], name: str, started: float) -> None:
    stages[name] = stages.get(name, 0.0) + time.perf_counter() - started


def _timed(fn, stages: dict[str, float], name: str, sync=lambda out: None):
    """fn, adding its wall time (after ``sync`` of its output, for lazy MLX arrays) to stages[name]."""

    def call(*args, **kwargs):
        started = time.perf_counter()
        out = fn(*args, **kwargs)
        sync(out)
        _add(stages, name, started)
        return out

    return call


def omnid_worker(nemo_file: Path, seconds: float, repeats: int, out: Path) -> dict:
    import numpy as np

    import omnid  # noqa: F401  (OpenBLAS before MLX)
    from omnid.engine.sortformer.engine import PRESETS, SortformerEngine
    from tests.sortformer_clips import two_voices

    started = time.perf_counter()
    engine = SortformerEngine("bench", nemo_file)
    load_s = time.perf_counter() - started
    model, stages = engine.model, {}
    model.pre_encode = _timed(model.pre_encode, stages, "pre-encode", np.asarray)  # np.asarray: evaluates
    model.fc_encoder.encode = _timed(model.fc_encoder.encode, stages, "Conformer", np.asarray)
    model.tf_encoder = _timed(model.tf_encoder, stages, "Transformer and head", np.asarray)
    audio = two_voices(seconds)
    times = []
    for _ in range(repeats):
        stages.clear()
        t = time.perf_counter()
        probs = engine.diarize(audio, PRESETS["very_high"])
        times.append(time.perf_counter() - t)
    np.save(out, probs.astype(np.float32))
    return {"load_s": load_s, "times": times, "stages": stages}


def run_worker(python: str, system: str, nemo_file: Path, args: argparse.Namespace, out: Path) -> dict:
    cmd = [python, __file__, "--worker", system, str(nemo_file), str(out),
           "--seconds", str(args.seconds), "--repeats", str(args.repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{system} worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemo-python", required=False, help="the Python of a virtualenv with torch and NeMo 3.0.0")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--repeats", type=int, default=3, help="passes per process; the first is a warm-up")
    ap.add_argument("--runs", type=int, default=1, help="processes per system")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the random real-shape .nemo here")
    ap.add_argument("--worker", nargs=3, metavar=("SYSTEM", "NEMO", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        system, nemo_file, out = args.worker[0], Path(args.worker[1]), Path(args.worker[2])
        work = nemo_worker if system == "nemo" else omnid_worker
        row = work(nemo_file, args.seconds, args.repeats, out)
        row["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(row))
        return
    if not args.nemo_python or not Path(args.nemo_python).exists():
        raise SystemExit("--nemo-python: give the Python of a virtualenv with torch==2.13.0 and nemo_toolkit[asr]==3.0.0 "
                         "(see this script's docstring)")
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        nemo_file = args.keep or Path(tmp) / "sortformer-v2.1-random.nemo"
        rows: dict[str, list[dict]] = {"NeMo forward_streaming (torch CPU)": [], "omnid file route (MLX)": []}
        probs = {}
        for run in range(args.runs):
            for system, python, name in (("nemo", args.nemo_python, "NeMo forward_streaming (torch CPU)"),
                                         ("omnid", sys.executable, "omnid file route (MLX)")):
                out = Path(tmp) / f"{system}.npy"
                rows[name].append(run_worker(python, system, nemo_file, args, out))
                probs[system] = np.load(out)
                print(f"run {run + 1} {name}: {rows[name][-1]}", file=sys.stderr, flush=True)
    print(f"\n{args.seconds:.0f} s of two voices, random v2.1-shape checkpoint (one .nemo for both), very-high preset; "
          f"{args.runs} process(es) per system, {args.repeats} passes each, the first not counted\n")
    print("| system | load s | pass median s | RTF | peak RSS MB |\n|---|---|---|---|---|")
    med = {}
    for name, runs in rows.items():
        passes = [t for r in runs for t in r["times"][1:]] or [t for r in runs for t in r["times"]]
        med[name] = statistics.median(passes)
        print(f"| {name} | {statistics.median(r['load_s'] for r in runs):.2f} | {med[name]:.2f} | "
              f"{med[name] / args.seconds:.3f} | {statistics.median(r['rss_mb'] for r in runs):.0f} |")
    print("\nWhere a pass goes (s, the last counted pass of each system's first process; NeMo's Transformer row is its"
          " forward_infer, which also holds the small speaker head):\n")
    print("| stage | NeMo | omnid |\n|---|---|---|")
    firsts = {name: runs[0]["stages"] for name, runs in rows.items()}
    nemo_stages, omnid_stages = firsts["NeMo forward_streaming (torch CPU)"], firsts["omnid file route (MLX)"]
    for stage in nemo_stages:
        print(f"| {stage} | {nemo_stages[stage]:.2f} | {omnid_stages.get(stage, float('nan')):.2f} |")
    nemo, mine = med["NeMo forward_streaming (torch CPU)"], med["omnid file route (MLX)"]
    frames = min(len(probs["nemo"]), len(probs["omnid"]))
    diff = float(np.abs(probs["nemo"][:frames] - probs["omnid"][:frames]).max())
    print(f"\nomnid / NeMo: {mine / nemo:.2f}x the time (target <= 1x, and RTF <= 0.35); frames "
          f"{len(probs['omnid'])} vs {len(probs['nemo'])}; probabilities max abs {diff:.2e}")


if __name__ == "__main__":
    main()
