"""Quantized checkpoints against float ones on this CPU (issue 44, "Speed and memory"): for every kind, its 4-bit and
8-bit mlx-community checkpoint against its float32 and float16 ones, loaded by omnid's production loader as the
daemon loads them here: load time, RSS after load, peak RSS, and real-time factor (seconds of compute per second of
audio: transcribed; for the aligner, aligned; for Sortformer, diarized as a file).

The checkpoints (built once under --work, default /tmp/omnid-bench-quantized, and reused by later runs):

* whisper: the real tiny.en (the built-in CTranslate2 weights) written in mlx-examples' ``convert.py`` layout
  (``config.json`` + ``weights.safetensors`` with ``alignment_heads``, no tokenizer: omnid's shipped ranks), float32
  and float16; its ``-q`` folders quantize the float16 model with ``nn.quantize`` at group 64 and 4 or 8 bits, as
  convert.py does. Real weights, so real transcripts.
* cohere_asr: bench/cohere_asr_torch.py's random checkpoint at the real Cohere Transcribe shapes (2.07 B
  parameters, bf16, the hub layout, built by its torch virtualenv: see bench/cohere_asr_speed.py), converted by
  mlx-audio 0.6.2's ``mlx_audio.convert.convert`` (float32, float16, ``-q 8/4``); decodes capped at 4 tokens a
  second of audio (random weights never stop).
* whisper_small: the same layout and variants at small.en's shapes (768 wide, 12 + 12 layers) with MLX's random
  initialisation: the narrowest Whisper whose encoder blocks the CPU keeps packed. Its decodes run without the
  temperature fallback and stop at 4 tokens a second of audio at most.
* qwen3_asr / qwen3_aligner: bench/qwen3_asr_speed.py's and bench/qwen3_aligner_speed.py's random checkpoints with
  the real Qwen3-ASR-0.6B / Qwen3-ForcedAligner-0.6B shapes (original layout, bf16), each converted by mlx-audio
  0.6.2's own ``mlx_audio.convert.convert`` (``--dtype float32`` / ``float16``, ``-q --q-bits 8`` / ``4``).
* parakeet: random, parakeet-tdt-0.6b-v3's shapes (24 FastConformer layers of 1024, 8192 pieces, TDT durations
  0-4), float32, the tensors named and shaped as mlx-audio's own Parakeet model has them (the mlx-community
  layout; tests/goldens/parakeet_tiny's config scaled up), the joint's blank bias bisected toward 4 tokens a
  second of speech (the random joint jumps from about 1 to a token on most frames; the nearest is kept); then
  ``mlx_audio.convert.convert`` (float16, -q 8/4). mlx-audio's detection takes a NeMo config without
  ``model_type`` for Phonon-2 (which refuses conversion), so the type is named: ``parakeet``, the type it writes
  into the folder.
* nemotron: bench/nemotron_checkpoint.py's random Nemotron 0.6B streaming folder (float32); float16 by a cast (as
  mlx-audio's ``nemotron_asr.convert --dtype float16`` casts); quantized by that converter's own ``_quantize``
  on the weights in its default dtype (bfloat16), as ``convert(..., quantize=True, q_bits=8|4)`` does after its
  .nemo reading (which needs torch).
* sortformer: bench/sortformer_speed.py's random Streaming Sortformer 4spk v2.1 folder (float32); then
  ``mlx_audio.convert.convert``'s code (float16, -q 8/4) with its model class named: its command line knows no
  ``vad`` domain and mlx-audio's own Sortformer converter does not quantize, so no public tool writes a quantized
  Sortformer folder, and omnid refuses one (its rows show the refusal).

The audio: three English corpus clips (LJ001-0001, LJ001-0004, jfk_inaugural_excerpt; 25.8 s; --quick: the first,
9.7 s), each its own request. Each cell (kind, checkpoint, choice) runs --runs times, each in a fresh child process
(so that load time and peak RSS, ru_maxrss, are that load's own): load through ``KIND.load`` with the default
configuration's options (the daemon's loader), RSS after load, an untimed warm-up on the first second of audio,
then the timed pass over the clips. Random weights never stop by themselves: Qwen3-ASR decodes are capped at 4
tokens a second of audio (``max_new_tokens``, about a real transcript's length); Parakeet and Nemotron stop by their
blank calibration and ``max_symbols``.

Choices: ``default`` is what the daemon runs on this CPU (quantized folders widened to float32 at load for the numpy
paths, except 4- and 8-bit affine modules that a numpy path multiplies packed, omnid/engine/cpu_packed.py: Qwen3's
decoder, Parakeet's and Nemotron's encoder layers, Cohere's encoder layers and its 8-bit decoder). Cohere's passes are also
shown split into the encoder and the rest (features and decoding), each against float32's. Where the engine offers
the other choice for a quantized folder it is measured too (unless ``--default-only``): ``packed`` (Whisper's
``keep_quantized`` weights in MLX's quantized layers: the encoder's blocks and a plain greedy decode in MLX, since
omnid's CPU paths read float weights; Parakeet's and Nemotron's ``keep_quantized``: every module their converter
packed kept so, the numpy layers widening those cpu_packed does not multiply, and Nemotron's subsampling and prompt
in MLX's quantized layers) and ``mlx`` (Qwen3's MLX decoder over the packed modules, Metal's path). A cell that fails
(a folder the loader refuses) prints its error in the table.

The table: medians of the runs, and each quantized or float16 row's ratio to the float32 row of its kind (the
daemon's path), measured in the same run, beside the share of the timed pass in which the machine's CPUs were
wanted by more work than they could run (/proc/pressure/cpu): on a shared 2-core machine another busy process
slows OpenBLAS's two threads several times over, and that column says which timings to distrust.

Time on the project's 2-core VM: building every checkpoint about 5 minutes the first time (--work keeps them; Cohere's
source checkpoint another 1-2 minutes in its torch virtualenv); --quick about 40 minutes, most of it in the cells that
run MLX's quantized kernels on the CPU (real-time factors of 4 to 30); ``--quick --runs 3 --default-only`` 1-5 minutes
a kind (Cohere's, the largest, 5); the full sweep (3 runs of 25.8 s) about 4 to 5 hours, so run it a kind at a time
(--kinds).

    .venv/bin/python bench/quantized.py                        # every kind, 3 runs per cell
    .venv/bin/python bench/quantized.py --quick                # every kind, 1 run, 9.7 s of audio
    .venv/bin/python bench/quantized.py --quick --runs 3 --default-only   # what the daemon runs, 3 runs: ~20 min
    .venv/bin/python bench/quantized.py --kinds whisper,parakeet --runs 1
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import inspect
import io
import json
import math
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import omnid  # noqa: E402,F401  (OpenBLAS before mlx, in the parent and in every worker)
from omnid.evaluation.corpus import corpus_folder  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")
GOLDENS = ROOT / "tests" / "goldens"
KINDS = ("whisper", "whisper_small", "qwen3_asr", "qwen3_aligner", "parakeet", "nemotron", "sortformer",
         "cohere_asr")
VARIANTS = ("float32", "float16", "q8", "q4")
CLIPS = ("ljspeech_LJ001-0001", "ljspeech_LJ001-0004", "jfk_inaugural_excerpt")
DONE = ".bench_built"  # written last into a finished folder
QWEN_TOKENS_PER_S = 4.0
COHERE_TOKENS_PER_S = 4.0
# bench/cohere_asr_speed.py's torch virtualenv, which builds Cohere Transcribe's real-size random checkpoint.
TORCH_PYTHON = Path("/tmp/cohere-ref/bin/python")
WHISPER_TOKENS_PER_S = 4.0
PARAKEET_TOKENS_PER_S = 4.0
# kind -> its descriptor's name in omnid.engine.kinds
DESCRIPTOR = {"qwen3_aligner": "qwen3_forced_aligner", "whisper_small": "whisper"}


# --- building the checkpoints --------------------------------------------------------------------------------------


def quiet() -> contextlib.AbstractContextManager:
    return contextlib.redirect_stdout(io.StringIO())


def finished(folder: Path) -> bool:
    return (folder / DONE).is_file()


def mark(folder: Path) -> Path:
    (folder / DONE).write_text("")
    return folder


def mlx_audio_convert(source: Path, dest: Path, *, model_type: str | None = None, module: str | None = None,
                      **kwargs: Any) -> Path:
    """``mlx_audio.convert.convert(source, dest, **kwargs)`` (``python -m mlx_audio.convert``), the model type (and
    class) named where its detection would pick another, without importing mlx-audio's whole registry."""
    from tests.nemotron_reference import stt_models_package

    stt_models_package()
    import mlx_audio.convert as mc

    if dest.exists():
        shutil.rmtree(dest)
    patches: list[Any] = []
    if model_type is not None:
        patches.append(mock.patch.object(mc, "get_model_type", lambda _c, _p, _d: model_type))
    if module is not None:
        patches.append(mock.patch.object(mc, "get_model_class", lambda _t, _d: importlib.import_module(module)))
    with contextlib.ExitStack() as stack, quiet():
        for p in patches:
            stack.enter_context(p)
        mc.convert(str(source), str(dest), model_domain="stt", **kwargs)
    return mark(dest)


def build_whisper(root: Path) -> None:
    """tiny.en in mlx-examples' layout: float32, float16, and ``convert.py -q`` of the float16 model."""
    import mlx.core as mx
    import numpy as np

    from omnid.config import load_config, model_folder
    from omnid.engine.whisper.checkpoint import build_model, load_checkpoint

    ckpt = load_checkpoint(model_folder(load_config().model("tiny.en")))
    heads = mx.array(np.array(ckpt.alignment_heads or [[0, 0]], np.int64))
    write_whisper(root, ckpt.dims, lambda: build_model(ckpt), heads)


# small.en's dimensions (openai-whisper's): its encoder is wide enough to be kept packed on the CPU.
SMALL_EN = {"n_mels": 80, "n_audio_ctx": 1500, "n_audio_state": 768, "n_audio_head": 12, "n_audio_layer": 12,
            "n_vocab": 51864, "n_text_ctx": 448, "n_text_state": 768, "n_text_head": 12, "n_text_layer": 12}


def build_whisper_small(root: Path) -> None:
    """small.en's shapes with MLX's random initialisation (the same seed for every variant), in the same layout."""
    import mlx.core as mx

    from omnid.engine.whisper.model import ModelDims, Whisper

    dims = ModelDims(**SMALL_EN)

    def model() -> Any:
        mx.random.seed(0)
        return Whisper(dims)

    write_whisper(root, dims, model, mx.array([[8, 0]]))


def write_whisper(root: Path, model_dims: Any, make_model: Callable[[], Any], heads: Any) -> None:
    """float32, float16 and ``convert.py -q`` (of the float16 model) folders of ``make_model()``'s weights."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten, tree_map

    dims = dataclasses.asdict(model_dims)
    for variant in VARIANTS:
        out = root / variant
        if finished(out):
            continue
        out.mkdir(parents=True, exist_ok=True)
        model = make_model()
        config: dict[str, Any] = dict(dims)
        dtype = mx.float32 if variant == "float32" else mx.float16
        model.update(tree_map(lambda a: a.astype(dtype), model.parameters()))
        if variant.startswith("q"):
            bits = int(variant[1:])
            nn.quantize(model, group_size=64, bits=bits)
            config["quantization"] = {"group_size": 64, "bits": bits}
        config["model_type"] = "whisper"
        weights = dict(tree_flatten(model.parameters()))
        weights["alignment_heads"] = heads
        mx.save_safetensors(str(out / "weights.safetensors"), weights)
        (out / "config.json").write_text(json.dumps(config, indent=4))
        mark(out)


def build_qwen(root: Path, aligner: bool) -> None:
    import qwen3_aligner_speed
    import qwen3_asr_speed

    source = root.parent / "qwen3_asr" / "source"
    print(qwen3_asr_speed.build_checkpoint(source, 0), flush=True)
    if aligner:
        asr_source, source = source, root / "source"
        print(qwen3_aligner_speed.build_aligner(asr_source, source), flush=True)
    for variant in VARIANTS:
        if not finished(root / variant):
            kwargs = {"dtype": variant} if variant.startswith("float") else {"quantize": True, "q_bits": int(variant[1:])}
            mlx_audio_convert(source, root / variant, **kwargs)


def speech(seconds: float) -> Any:
    from omnid.audio import decode_audio

    rows = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r["id"] == CLIPS[0])
    return decode_audio(CORPUS / row["path"])[: int(seconds * 16000)]


def build_parakeet(root: Path) -> None:
    """parakeet-tdt-0.6b-v3's shapes in the mlx-community layout (mlx-audio's own model names the tensors)."""
    out = root / "float32"
    if not finished(out):
        import mlx.core as mx
        import numpy as np
        from mlx.utils import tree_flatten

        from omnid.engine.parakeet.convert import to_mlx_folder
        from tests.nemotron_reference import stt_models_package

        with tempfile.TemporaryDirectory() as tmp:
            cfg = json.loads((to_mlx_folder(GOLDENS / "parakeet_tiny" / "tdt.nemo", Path(tmp)) / "config.json")
                             .read_text())
        d, p, vocab = 1024, 640, 8192
        cfg["encoder"].update(n_layers=24, d_model=d, n_heads=8, subsampling_conv_channels=256, ff_expansion_factor=4)
        cfg["model_defaults"].update(enc_hidden=d, pred_hidden=p, joint_hidden=p)
        cfg["decoder"]["prednet"]["pred_hidden"] = p
        cfg["decoder"]["vocab_size"] = vocab
        cfg["joint"]["jointnet"].update(joint_hidden=p, encoder_hidden=d, pred_hidden=p)
        cfg["joint"]["num_classes"] = vocab
        pieces = list(cfg["joint"]["vocabulary"])
        cfg["joint"]["vocabulary"] = pieces + [f"\u2581w{i}" if i % 2 else f"x{i}" for i in range(vocab - len(pieces))]
        stt_models_package()
        module = importlib.import_module("mlx_audio.stt.models.parakeet")
        model = module.Model(module.ModelConfig.from_dict(cfg))
        rng = np.random.default_rng(0)
        weights: dict[str, np.ndarray] = {}
        for name, value in tree_flatten(model.parameters()):
            shape = tuple(value.shape)
            if name.endswith("running_var") or (len(shape) == 1 and "norm" in name and name.endswith("weight")):
                w = np.ones(shape, np.float32)
            elif len(shape) == 1 or name.endswith("running_mean"):
                w = np.zeros(shape, np.float32)
            else:
                fan_in = shape[-1] if "pos_bias" in name else int(np.prod(shape[1:]))
                w = rng.standard_normal(shape, np.float32) / np.float32(math.sqrt(fan_in))
            weights[name] = w
        del model
        first = next(k for k in weights if k.startswith("encoder.pre_encode.conv.0.weight"))
        weights[first] -= weights[first].mean(axis=(1, 2), keepdims=True)  # follows the speech, not the offset
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(cfg, indent=1))
        calibrate_parakeet(out, weights, vocab)
        mx.save_safetensors(str(out / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()})
        mark(out)
    for variant in VARIANTS[1:]:
        if not finished(root / variant):
            kwargs = {"dtype": "float16"} if variant == "float16" else {"quantize": True, "q_bits": int(variant[1:])}
            mlx_audio_convert(out, root / variant, model_type="parakeet", **kwargs)


def calibrate_parakeet(out: Path, weights: dict, vocab: int) -> None:
    """The blank's joint bias, bisected so that greedy decoding of 10 s of speech emits about PARAKEET_TOKENS_PER_S
    tokens a second (a random joint otherwise emits on every frame, up to max_symbols)."""
    import mlx.core as mx

    from omnid.engine.parakeet.engine import ParakeetEngine

    mx.save_safetensors(str(out / "model.safetensors"), {k: mx.array(v) for k, v in weights.items()})
    engine = ParakeetEngine("calibration", out)
    model = engine.model
    audio = speech(10.0)
    encoded = model.encode(model.features(audio))
    bias = model.transducer.joint.out_bias
    lo, hi, tried = -20.0, 60.0, []
    for _ in range(12):
        mid = (lo + hi) / 2
        bias[vocab] = mid
        rate = len(model.decode(encoded, ctc=False)) / 10.0
        tried.append((abs(rate - PARAKEET_TOKENS_PER_S), mid, rate))
        if rate > PARAKEET_TOKENS_PER_S:
            lo = mid
        else:
            hi = mid
    _, best, rate = min(tried)
    weights["joint.joint_net.2.bias"][vocab] = best
    print(f"parakeet: blank bias {best:.2f} ({rate:.1f} tokens/s on 10 s of speech)", flush=True)


def build_nemotron(root: Path) -> None:
    import mlx.core as mx

    out = root / "float32"
    if not finished(out):
        import nemotron_checkpoint

        nemotron_checkpoint.build(out, speech(6.0))
        mark(out)
    config = json.loads((out / "config.json").read_text())
    weights = dict(mx.load(str(out / "model.safetensors")))
    for variant in VARIANTS[1:]:
        dest = root / variant
        if finished(dest):
            continue
        dest.mkdir(parents=True, exist_ok=True)
        cfg, tensors = config, {k: v.astype(mx.float16) for k, v in weights.items()}
        if variant.startswith("q"):
            from tests.nemotron_reference import stt_models_package

            stt_models_package()
            from mlx_audio.stt.models.nemotron_asr import convert as nemotron_convert

            base = {k: v.astype(mx.bfloat16) for k, v in weights.items()}  # convert()'s default dtype
            with quiet():
                cfg, tensors = nemotron_convert._quantize(json.loads(json.dumps(config)), base, int(variant[1:]), 64)
        (dest / "config.json").write_text(json.dumps(cfg, ensure_ascii=False, indent=2))
        mx.save_safetensors(str(dest / "model.safetensors"), tensors)
        mark(dest)


def build_sortformer(root: Path) -> None:
    out = root / "float32"
    if not finished(out):
        import sortformer_speed

        sortformer_speed.make_checkpoint(out)
        mark(out)
    from tests.sortformer_reference import modules

    modules()  # mlx_audio.vad.models as bare packages
    for variant in VARIANTS[1:]:
        if not finished(root / variant):
            kwargs = {"dtype": "float16"} if variant == "float16" else {"quantize": True, "q_bits": int(variant[1:])}
            mlx_audio_convert(out, root / variant, model_type="sortformer",
                              module="mlx_audio.vad.models.sortformer", **kwargs)


def build_cohere(root: Path) -> None:
    """bench/cohere_asr_torch.py's real-size random checkpoint (transformers' own classes, bf16, the hub layout),
    built by its torch virtualenv where missing; then mlx-audio 0.6.2's converter (float32, float16, -q 8/4)."""
    source = root / "hub"
    if not (source / "checkpoint" / "model.safetensors").is_file():
        if not TORCH_PYTHON.is_file():
            raise SystemExit(f"{TORCH_PYTHON}: no torch virtualenv to build the Cohere checkpoint (see "
                             "bench/cohere_asr_speed.py)")
        subprocess.run([str(TORCH_PYTHON), str(ROOT / "bench" / "cohere_asr_torch.py"), "--build", "--work",
                        str(source)], check=True, cwd=ROOT)
    for variant in VARIANTS:
        if not finished(root / variant):
            kwargs = {"dtype": variant} if variant.startswith("float") else {"quantize": True, "q_bits": int(variant[1:])}
            mlx_audio_convert(source / "checkpoint", root / variant, **kwargs)


def build(kind: str, work: Path) -> None:
    root = work / kind
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    {"whisper": build_whisper, "whisper_small": build_whisper_small, "qwen3_asr": lambda r: build_qwen(r, False),
     "qwen3_aligner": lambda r: build_qwen(r, True), "parakeet": build_parakeet, "nemotron": build_nemotron,
     "sortformer": build_sortformer, "cohere_asr": build_cohere}[kind](root)
    os.sync()
    print(f"{kind}: checkpoints ready in {root} ({time.perf_counter() - started:.0f} s)", flush=True)


# --- measuring, in a child process per run ----------------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_stall_s() -> float:
    """Seconds some runnable task of this machine waited for a CPU (Linux's pressure stall information), or NaN."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except (OSError, IndexError):
        return float("nan")
    return int(line.rsplit("total=", 1)[1]) / 1e6


def clips(quick: bool) -> list[tuple[Any, str]]:
    from omnid.audio import decode_audio

    rows = {r["id"]: r for r in map(json.loads, (CORPUS / "manifest.jsonl").read_text().splitlines())}
    return [(decode_audio(CORPUS / rows[c]["path"]), rows[c]["text"]) for c in (CLIPS[:1] if quick else CLIPS)]


def load_engine(kind: str, folder: Path, choice: str) -> Any:
    """The engine as the daemon loads it (``default``), or with the other choice its constructor offers."""
    from omnid.config import load_config
    from omnid.engine import kinds
    from omnid.runtime.models import sections

    descriptor = kinds.named(DESCRIPTOR.get(kind, kind))
    options = descriptor.options(sections(load_config()))
    if choice == "default":
        return descriptor.load(f"bench-{kind}", folder, {}, options)
    if choice == "mlx":  # Qwen3: the MLX decoder over the packed modules (Metal's path)
        if kind == "qwen3_asr":
            from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine

            return Qwen3AsrEngine(f"bench-{kind}", folder, {}, options, cpu_decoder=False)
        from omnid.engine.qwen3_aligner.engine import Qwen3AlignerEngine

        return Qwen3AlignerEngine(f"bench-{kind}", folder, {}, cpu_decoder=False, segment_max_s=options)
    # packed: the engine's keep_quantized, where its constructor takes it
    engine_class = {"parakeet": "omnid.engine.parakeet.engine:ParakeetEngine",
                    "nemotron": "omnid.engine.nemotron.engine:NemotronEngine",
                    "sortformer": "omnid.engine.sortformer.engine:SortformerEngine",
                    "cohere_asr": "omnid.engine.cohere_asr.engine:CohereAsrEngine"}[kind]
    module, name = engine_class.split(":")
    cls = getattr(importlib.import_module(module), name)
    if "keep_quantized" not in inspect.signature(cls).parameters:
        raise NotImplementedError(f"{name} takes no keep_quantized")
    args = (options,) if kind in ("parakeet", "cohere_asr") else ()
    return cls(f"bench-{kind}", folder, {}, *args, keep_quantized=True)


class WhisperPacked:
    """tiny.en's quantized folder kept packed (``load_checkpoint(keep_quantized=True)`` + ``build_model``: what the
    engine loads on Metal) run on the CPU through MLX's quantized layers: the encoder's blocks over the clip's
    30 s window (as the engine's default "full" window), then a plain greedy decode with the KV cache until end of
    text (at most 224 tokens)."""

    def __init__(self, folder: Path):
        from omnid.engine.whisper.checkpoint import VOCABULARY_KEY, build_model, load_checkpoint
        from omnid.engine.whisper.tokenizer import WhisperTokenizer

        ckpt = load_checkpoint(folder, keep_quantized=True)
        self.model = build_model(ckpt)
        self.dims = ckpt.dims
        self.tok = WhisperTokenizer.for_model(folder, ckpt.dims.n_vocab, folder / "config.json",
                                              VOCABULARY_KEY[ckpt.format])

    def transcribe(self, audio: Any, max_tokens: int = 224) -> int:
        import mlx.core as mx
        import numpy as np

        from omnid.engine.logmel import log_mel_spectrogram

        window = np.zeros(30 * 16000, np.float32)  # padded to the 30 s window, as the engine's "full" window
        window[: len(audio)] = audio[: len(window)]
        mel = log_mel_spectrogram(window, self.dims.n_mels)[:3000][None]
        x = self.model.encoder.front(mel)
        for block in self.model.encoder.blocks:
            x, _ = block(x)
        xa = self.model.encoder.ln_post(x)
        decoder = self.model.decoder
        prompt = self.tok.sot_sequence(None) + [self.tok.no_timestamps]
        hidden, caches = decoder(mx.array([prompt]), None, kv_cache=decoder.cross_kv(xa))
        tokens: list[int] = []
        for _ in range(max_tokens):
            token = int(decoder.logits(hidden[:, -1]).argmax().item())
            if token == self.tok.eot:
                break
            tokens.append(token)
            hidden, caches = decoder(mx.array([[token]]), None, kv_cache=caches)
        return len(tokens)


def run_once(kind: str, engine: Any, audio: Any, text: str, warmup: bool = False) -> int:
    """One request; returns a size of its output (tokens, words, frames)."""
    from omnid.engine.options import TranscribeOptions

    seconds = len(audio) / 16000
    if isinstance(engine, WhisperPacked):
        return engine.transcribe(audio, 4 if warmup else 224)
    if kind == "whisper":
        return len(engine.transcribe(audio, TranscribeOptions(language="en")).text.split())
    if kind == "whisper_small":  # random weights: no fallback, a transcript's length of tokens at most
        cap = 4 if warmup else max(8, round(WHISPER_TOKENS_PER_S * seconds))
        options = TranscribeOptions(language="en", fallback=False, max_new_tokens=cap)
        return len(engine.transcribe(audio, options).text.split())
    if kind == "qwen3_asr":
        cap = 4 if warmup else max(8, round(QWEN_TOKENS_PER_S * seconds))
        return len(engine.transcribe(audio, TranscribeOptions(language="en", max_new_tokens=cap)).text)
    if kind == "qwen3_aligner":
        return len(engine.align(audio, " ".join(text.split()[:2]) if warmup else text, "English"))
    if kind in ("parakeet", "nemotron"):
        return len(engine.transcribe(audio, TranscribeOptions()).text.split())
    if kind == "cohere_asr":  # random weights never stop: a transcript's length of tokens
        cap = 4 if warmup else max(8, round(COHERE_TOKENS_PER_S * seconds))
        return len(engine.transcribe(audio, TranscribeOptions(language="en", max_new_tokens=cap)).text.split())
    return int(engine.diarize(audio).shape[0])


def worker(kind: str, folder: Path, choice: str, quick: bool) -> dict:
    from omnid.engine.errors import CheckpointError

    items = clips(quick)
    before = rss_mb()
    started = time.perf_counter()
    try:
        whisper_packed = kind.startswith("whisper") and choice == "packed"
        engine = WhisperPacked(folder) if whisper_packed else load_engine(kind, folder, choice)
    except (CheckpointError, NotImplementedError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    load_s = time.perf_counter() - started
    result = {"load_s": load_s, "rss_load_mb": rss_mb(), "peak_load_mb": peak_mb(), "rss_before_mb": before}
    encoding = split_encoder(kind, engine)
    try:
        run_once(kind, engine, items[0][0][:16000], items[0][1], warmup=True)
        encoding.clear()
        stalled, started = cpu_stall_s(), time.perf_counter()
        sizes = [run_once(kind, engine, audio, text) for audio, text in items]
        compute_s = time.perf_counter() - started
        result["cpu_wait"] = (cpu_stall_s() - stalled) / compute_s
        if encoding:
            result["encode_s"] = sum(encoding)
    except Exception as e:  # noqa: BLE001  (a path that cannot compute is a cell's result, not the bench's end)
        return {**result, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    audio_s = sum(len(a) for a, _ in items) / 16000
    return {**result, "compute_s": compute_s, "audio_s": audio_s, "rtf": compute_s / audio_s, "peak_mb": peak_mb(),
            "outputs": sizes}


def split_encoder(kind: str, engine: Any) -> list[float]:
    """Cohere's encoder passes timed apart (the list fills as they run): its decoder, packed on the CPU, is what a
    quantized folder speeds up; the encoder's products over a clip's frames run at the BLAS's full speed in float32,
    which a packed product (widened before the BLAS) cannot beat."""
    times: list[float] = []
    if kind != "cohere_asr" or not hasattr(engine, "model"):
        return times
    encode = engine.model.encode

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return encode(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - started)

    engine.model.encode = timed
    return times


def spawn(args: list[str], timeout: float) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"worker exited {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


# --- the table ----------------------------------------------------------------------------------------------------


def machine() -> str:
    import mlx.core as mx

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    from omnid import blas

    status = blas.status()
    kernels = os.environ.get("OPENBLAS_CORETYPE") or blas.coretype(blas._cpu_flags(), platform.machine().lower())
    try:
        from importlib.metadata import version

        audio = version("mlx-audio")
    except Exception:  # noqa: BLE001
        audio = "?"
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}; Python "
            f"{platform.python_version()}, MLX {mx.__version__} ({mx.default_device()}), mlx-audio {audio}; BLAS: "
            f"{status.name} ({status.path or status.reason}), kernels {kernels or 'its own choice'}")


def choices(kind: str, variant: str) -> tuple[str, ...]:
    if not variant.startswith("q"):
        return ("default",)
    other = {"whisper": "packed", "whisper_small": "packed", "qwen3_asr": "mlx", "qwen3_aligner": "mlx", "parakeet": "packed",
             "nemotron": "packed", "sortformer": "packed", "cohere_asr": "packed"}[kind]
    return ("default", other)


def median(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


def describe(kind: str, variant: str, choice: str) -> str:
    if choice == "packed":
        return "packed (MLX quantized layers)"
    if choice == "mlx":
        return "MLX packed decoder"
    if kind in ("qwen3_asr", "qwen3_aligner"):
        return "numpy decoder, packed" if variant.startswith("q") else "numpy decoder"
    if kind == "cohere_asr" and variant == "q8":
        return "encoder layers, decoder packed"
    if kind in ("parakeet", "nemotron", "cohere_asr") and variant.startswith("q"):
        return "encoder layers packed"
    if kind.startswith("whisper") and variant.startswith("q"):
        return "encoder, tokens packed" if kind == "whisper_small" else "tokens packed, rest wide"
    return "widened to f32" if variant.startswith("q") else "as the daemon"


def table(results: dict[tuple[str, str, str], list[dict]], runs: int) -> None:
    head = (f"{'kind':<14}{'checkpoint':<11}{'path':<31}{'load s':>8}{'RSS MB':>8}{'peak MB':>9}{'RTF':>8}"
            f"{'output':>8}{'wait':>6}   {'vs float32 (load / RSS / peak / RTF)'}")
    before = [r["rss_before_mb"] for rows in results.values() for r in rows if "rss_before_mb" in r]
    print(f"\nmedians of {runs} run(s), each a fresh process; RSS: after load (before it, with Python, MLX and omnid "
          f"imported: {statistics.median(before) if before else float('nan'):.0f} MB); peak: ru_maxrss over load and "
          "run; RTF: compute seconds per second of audio; output: words (Whisper, Parakeet, Nemotron; Whisper's "
          "packed path: tokens), characters (Qwen3-ASR), aligned units, or Sortformer frames (random weights: garbage "
          "of varying length); wait: the share of the timed pass in which some task of this machine waited for a "
          "CPU (/proc/pressure/cpu: other work on the cores slows the timings)\n")
    print(head)
    print("-" * len(head))
    for (kind, variant, choice), rows in results.items():
        label = f"{kind:<14}{variant:<11}{describe(kind, variant, choice):<31}"
        errors = [r["error"] for r in rows if "error" in r]
        good = [r for r in rows if "error" not in r]
        if not good:
            print(f"{label}FAILED: {errors[0] if errors else '?'}")
            continue
        base = [r for r in results.get((kind, "float32", "default"), []) if "error" not in r]
        cells = [median(good, "load_s"), median(good, "rss_load_mb"), median(good, "peak_mb"), median(good, "rtf")]
        output = statistics.median(sum(r["outputs"]) for r in good)
        wait = median(good, "cpu_wait")
        line = f"{label}{cells[0]:>8.2f}{cells[1]:>8.0f}{cells[2]:>9.0f}{cells[3]:>8.3f}{output:>8.0f}{wait:>6.0%}"
        if base and (variant != "float32" or choice != "default"):
            ref = [median(base, k) for k in ("load_s", "rss_load_mb", "peak_mb", "rtf")]
            line += "   " + " / ".join(f"{c / r:.2f}x" if r else "-" for c, r in zip(cells, ref))
        if errors:
            line += f"   ({len(errors)} of {len(rows)} runs failed: {errors[0]})"
        print(line)
    split = [(key, rows) for key, rows in results.items() if any("encode_s" in r for r in rows)]
    if split:
        print("\nthe same passes split (medians): encoder, and the rest (features and decoding), seconds per second "
              "of audio")
    for (kind, variant, choice), rows in split:
        good = [r for r in rows if "encode_s" in r]
        encoder = statistics.median(r["encode_s"] / r["audio_s"] for r in good)
        rest = statistics.median((r["compute_s"] - r["encode_s"]) / r["audio_s"] for r in good)
        line = f"{kind:<14}{variant:<11}{describe(kind, variant, choice):<31}encoder {encoder:.3f}, rest {rest:.3f}"
        base = [r for r in results.get((kind, "float32", "default"), []) if "encode_s" in r]
        if base and (variant != "float32" or choice != "default"):
            ref_encoder = statistics.median(r["encode_s"] / r["audio_s"] for r in base)
            ref_rest = statistics.median((r["compute_s"] - r["encode_s"]) / r["audio_s"] for r in base)
            line += f"   vs float32: {encoder / ref_encoder:.2f}x, {rest / ref_rest:.2f}x"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated, of {', '.join(KINDS)}")
    ap.add_argument("--runs", type=int, default=None, help="runs (fresh processes) per cell (default 3; --quick 1)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/omnid-bench-quantized"),
                    help="where the checkpoints are built and kept for later runs")
    ap.add_argument("--quick", action="store_true", help="1 run per cell and one 9.7 s clip")
    ap.add_argument("--default-only", action="store_true",
                    help="only what the daemon runs here, not the other choice (MLX's quantized kernels: the slow cells)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--build", help=argparse.SUPPRESS)
    ap.add_argument("--worker", nargs=3, metavar=("KIND", "FOLDER", "CHOICE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        build(args.build, args.work)
        return
    if args.worker:
        kind, folder, choice = args.worker
        print(json.dumps(worker(kind, Path(folder), choice, args.quick)), flush=True)
        return
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"unknown kind(s): {', '.join(sorted(unknown))} (of {', '.join(KINDS)})")
    variants = [v for v in args.variants.split(",") if v]
    runs = args.runs or (1 if args.quick else 3)
    print(machine(), flush=True)
    started = time.perf_counter()
    results: dict[tuple[str, str, str], list[dict]] = {}
    for kind in kinds:
        proc = subprocess.run([sys.executable, __file__, "--build", kind, "--work", str(args.work)], cwd=ROOT)
        if proc.returncode != 0:
            for variant in variants:
                results[kind, variant, "default"] = [{"error": f"building the checkpoints failed ({proc.returncode})"}]
            continue
        cells = [(kind, variant, choice) for variant in variants for choice in choices(kind, variant)
                 if choice == "default" or not args.default_only]
        for cell in cells:
            results[cell] = []
        refused: set[tuple[str, str, str]] = set()
        for run in range(runs):  # round by round, so that whatever else loads the machine meets every cell alike
            for cell in cells:
                if cell in refused:
                    continue
                _, variant, choice = cell
                extra = ["--quick"] if args.quick else []
                row = spawn(["--worker", kind, str(args.work / kind / variant), choice, *extra], timeout=1800)
                results[cell].append(row)
                shown = row.get("error") or (f"load {row['load_s']:.2f} s, RSS {row['rss_load_mb']:.0f} MB, "
                                             f"peak {row['peak_mb']:.0f} MB, RTF {row['rtf']:.3f}, "
                                             f"outputs {row['outputs']}")
                print(f"  {kind} {variant} {choice} run {run + 1}: {shown}", flush=True)
                if "error" in row and "load_s" not in row:
                    refused.add(cell)  # a refused load is refused every time
    table(results, runs)
    print(f"\n{time.perf_counter() - started:.0f} s in all", flush=True)


if __name__ == "__main__":
    main()
