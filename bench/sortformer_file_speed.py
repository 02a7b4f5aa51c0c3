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

Each system runs in one process that loads the model, diarizes the whole file once to warm up, then once more
whenever asked; the counted passes alternate between the two systems in adjacent pairs, so that this shared
machine's changes of speed (often tens of percent within minutes) fall on both alike. Printed: load s, the median
pass in seconds, the real-time factor (pass time / audio time), peak RSS (ru_maxrss), omnid's median against
NeMo's and the ratio within each pair, how far omnid's probabilities are from NeMo's (max abs over every frame and
speaker), and where a pass of each goes: pre-encode, Conformer, Transformer and head (the rest is the front end
and the streaming state updates).

    .venv/bin/python bench/sortformer_file_speed.py --nemo-python /tmp/nemo-venv/bin/python   # ~12 min here
    .venv/bin/python bench/sortformer_file_speed.py --nemo-python ... --seconds 60 --pairs 3
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

Pass = tuple  # (seconds, {stage: seconds}, probabilities)

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


def load_nemo(nemo_file: Path, seconds: float) -> tuple[float, Callable[[], Pass]]:
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

    def one_pass() -> Pass:
        stages.clear()
        with torch.no_grad():
            t = time.perf_counter()
            mel, mel_len = model.process_signal(audio_signal=audio, audio_signal_length=length)
            probs = model.forward_streaming(mel[:, :, : int(mel_len.max())], mel_len)[0].numpy()
            return time.perf_counter() - t, dict(stages), probs

    return load_s, one_pass


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


def load_omnid(nemo_file: Path, seconds: float) -> tuple[float, Callable[[], Pass]]:
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

    def one_pass() -> Pass:
        stages.clear()
        t = time.perf_counter()
        probs = engine.diarize(audio, PRESETS["very_high"])
        return time.perf_counter() - t, dict(stages), probs

    return load_s, one_pass


def worker(system: str, nemo_file: Path, seconds: float, out: Path) -> None:
    """Loads one system, runs one warm-up pass, then one counted pass per "pass" line on stdin, answering each
    with a JSON line; "quit" saves the last probabilities to ``out`` and answers load time and peak RSS."""
    import numpy as np

    load_s, one_pass = (load_nemo if system == "nemo" else load_omnid)(nemo_file, seconds)
    probs = one_pass()[2]
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if line.strip() != "pass":
            break
        t, stages, probs = one_pass()
        print(json.dumps({"time": t, "stages": stages}), flush=True)
    np.save(out, np.asarray(probs, np.float32))
    print(json.dumps({"load_s": load_s, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}),
          flush=True)


class Worker:
    """One system's worker process, driven pass by pass."""

    def __init__(self, python: str, system: str, nemo_file: Path, seconds: float, out: Path):
        self.out, self.log = out, out.with_suffix(".log")
        with self.log.open("w") as log:  # NeMo's warnings and progress bars
            self.proc = subprocess.Popen(
                [python, __file__, "--worker", system, str(nemo_file), str(out), "--seconds", str(seconds)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)
        self._answer()  # loaded and warmed up

    def _answer(self) -> dict:
        """The worker's next JSON line (anything else a library printed is skipped)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise SystemExit(f"a worker failed (exit {self.proc.wait()}):\n{self.log.read_text()[-3000:]}")

    def one_pass(self) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write("pass\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        row = self._answer()
        self.proc.wait()
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nemo-python", required=False, help="the Python of a virtualenv with torch and NeMo 3.0.0")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--pairs", type=int, default=5, help="counted passes per system, taken in adjacent pairs")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the random real-shape .nemo here")
    ap.add_argument("--worker", nargs=3, metavar=("SYSTEM", "NEMO", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker[0], Path(args.worker[1]), args.seconds, Path(args.worker[2]))
        return
    if not args.nemo_python or not Path(args.nemo_python).exists():
        raise SystemExit("--nemo-python: give the Python of a virtualenv with torch==2.13.0 and nemo_toolkit[asr]==3.0.0 "
                         "(see this script's docstring)")
    import numpy as np

    names = {"nemo": "NeMo forward_streaming (torch CPU)", "omnid": "omnid file route (MLX)"}
    with tempfile.TemporaryDirectory() as tmp:
        nemo_file = args.keep or Path(tmp) / "sortformer-v2.1-random.nemo"
        workers = {"nemo": Worker(args.nemo_python, "nemo", nemo_file, args.seconds, Path(tmp) / "nemo.npy")}
        workers["omnid"] = Worker(sys.executable, "omnid", nemo_file, args.seconds, Path(tmp) / "omnid.npy")
        passes: dict[str, list[dict]] = {"nemo": [], "omnid": []}
        for i in range(args.pairs):
            for system in ("nemo", "omnid") if i % 2 == 0 else ("omnid", "nemo"):
                passes[system].append(workers[system].one_pass())
            print(f"pair {i + 1}: NeMo {passes['nemo'][-1]['time']:.2f} s, omnid {passes['omnid'][-1]['time']:.2f} s",
                  file=sys.stderr, flush=True)
        closing = {system: w.close() for system, w in workers.items()}
        probs = {system: np.load(w.out) for system, w in workers.items()}
    print(f"\n{args.seconds:.0f} s of two voices, random v2.1-shape checkpoint (one .nemo for both), very-high preset; "
          f"one process per system, a warm-up pass each, then {args.pairs} counted passes each, taken in adjacent "
          "pairs (NeMo first in odd pairs, omnid first in even ones)\n")
    print("| system | load s | pass median s (min-max) | RTF | peak RSS MB |\n|---|---|---|---|---|")
    med = {}
    for system, runs in passes.items():
        times = [p["time"] for p in runs]
        med[system] = statistics.median(times)
        print(f"| {names[system]} | {closing[system]['load_s']:.2f} | {med[system]:.2f} ({min(times):.2f}-"
              f"{max(times):.2f}) | {med[system] / args.seconds:.3f} | {closing[system]['rss_mb']:.0f} |")
    ratios = [o["time"] / n["time"] for n, o in zip(passes["nemo"], passes["omnid"])]
    print("\nWhere a pass goes (s, medians over the counted passes; NeMo's Transformer row is its forward_infer, "
          "which also holds the small speaker head):\n")
    print("| stage | NeMo | omnid |\n|---|---|---|")
    for stage in passes["nemo"][0]["stages"]:
        nemo_s, omnid_s = (statistics.median(p["stages"].get(stage, float("nan")) for p in passes[s])
                           for s in ("nemo", "omnid"))
        print(f"| {stage} | {nemo_s:.2f} | {omnid_s:.2f} |")
    frames = min(len(probs["nemo"]), len(probs["omnid"]))
    diff = float(np.abs(probs["nemo"][:frames] - probs["omnid"][:frames]).max())
    print(f"\nomnid / NeMo: {med['omnid'] / med['nemo']:.2f}x the time by medians; per pair "
          f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}x); target <= 1x, and "
          f"RTF <= 0.35. Frames {len(probs['omnid'])} vs {len(probs['nemo'])}; probabilities max abs {diff:.2e}")


if __name__ == "__main__":
    main()
