"""Qwen3-ASR speed: omnid's engine against the official code on torch's CPU (qwen-asr 0.0.6, when its throwaway
virtualenv is there: --torch-python, default /tmp/qref/bin/python; bench/qwen3_asr_torch.py is its worker) and the
reference MLX port mlx-qwen3-asr 0.4.4, same checkpoint, same input.

The checkpoint is random but has the real Qwen3-ASR-0.6B shapes and the original Qwen layout (``thinker.*`` names,
PyTorch conv layout, bf16, a stored copy of the tied ``lm_head``, the real special-token ids), written by this script
into a temporary folder (deleted at the end unless --keep DIR). The embedding rows of the two end tokens are zero, so
with the tied head their logit is exactly 0 while the maximum over 151,936 random logits is far above it: greedy
decoding never stops early, and every decode runs exactly --tokens tokens (asserted). The tokenizer is byte-level
without merges (one token per byte), so the text parts of the prompt are longer than with the real vocabulary.

The audio is real English speech: corpus clips (audio/en/*.wav, sorted) decoded with omnid.audio.decode_audio and
concatenated up to each --seconds length. The prompt ids are built once with omnid's prompt (no context, no forced
language) and handed to both systems. Both compute in float32; mlx_qwen3_asr's load_model(dtype=float32) leaves a
bf16 checkpoint's weights in bf16 (it casts only for other dtypes), so they are cast to float32 after loading, as
load_model itself casts for other dtypes, with the tied head re-tied (counted in its load time).

Every run is a fresh subprocess per system (load time and peak RSS, ru_maxrss, are its own): load; an untimed
warm-up on the first second of audio (encoder + 2 tokens; --no-warmup skips it); then, timed:

* encoder: log-mel + audio encoder, evaluated (omnid: engine.encode; reference: compute_features + audio_tower);
* prefill: a decode of one token (the prompt with the audio embeddings through the decoder, the first token read);
* one greedy decode of --tokens tokens (omnid: engine.generate(..., loop_guard=False) with loop_window=0;
  reference: generate_with_info with its repetition stop patched off). Its time minus the prefill's, divided by
  tokens - 1, is the time per generated token.
* total = encoder + the whole decode call (= prefill + decode).

The table shows the median of --runs processes for each figure, side by side, with the speed-up over each
reference (its time / omnid's) and the memory ratio (omnid peak RSS / the reference's). The targets: against
mlx-qwen3-asr, at least 1.5x its total speed at equal or lower peak memory; against the official code on torch,
every stage (encoder, prefill, per token) no slower and the total at least 1.5x its speed. On torch the prefill and
decode are its ``generate`` calls less the encoder time measured just before (generate encodes the audio again).

A realtime preview's cost in omnid (its own process, the first 10 s of the audio as one open segment): the median
time of engine.redecode(audio, TranscribeOptions(), previous) with previous None (a segment's first decode: no
forced prefix, no language) against a previous Hypothesis with decodes=2, language English and a 40-token raw
text (so the language header and the text minus its last 5 tokens are forced). With random weights every preview
generates preview_max_new_tokens (32) tokens, more than a real model would on 10 s of speech.

    .venv/bin/python bench/qwen3_asr_speed.py                      # 10 s and 60 s, 64 tokens, 3 runs each
    .venv/bin/python bench/qwen3_asr_speed.py --seconds 10 --tokens 8 --runs 1   # a quick check
    .venv/bin/python bench/qwen3_asr_speed.py --keep /tmp/qwen06-random          # keep (and later reuse) the checkpoint
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import omnid  # noqa: E402,F401  (OpenBLAS before mlx, in the parent and in every worker)
from omnid.evaluation.corpus import corpus_folder  # noqa: E402
from tests.qwen_vocab import KNOWN, byte_unicode, write_tokenizer_config  # noqa: E402

CORPUS = corpus_folder(ROOT / "tests" / "corpus")  # $OMNID_CORPUS, else the repository's small one
TINY_CONFIG = ROOT / "tests" / "goldens" / "qwen3_asr_tiny" / "config.json"
SYSTEMS = ("omnid", "torch", "mlx-qwen3-asr")
REFERENCES = ("torch", "mlx-qwen3-asr")
TORCH_PYTHON = Path(os.environ.get("OMNID_QWEN_REF_PYTHON", "/tmp/qref/bin/python"))
MODEL_ID = "qwen3-asr-0.6b-random"

# Qwen3-ASR-0.6B.
AUDIO = dict(num_mel_bins=128, d_model=896, encoder_layers=18, encoder_attention_heads=14, encoder_ffn_dim=3584,
             output_dim=1024, downsample_hidden_size=480, n_window=50, n_window_infer=800, conv_chunksize=500,
             max_source_positions=1500)
TEXT = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
            num_key_value_heads=8, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True)
MROPE_SECTION = [24, 20, 20]  # the real model's (sums to head_dim / 2)
FIRST_ADDED = 151643
NAMED = KNOWN  # the real added tokens' ids
ENDOFTEXT, IM_END, AUDIO_PAD, AUDIO_START = 151643, 151645, 151676, 151669
EOS = [IM_END, ENDOFTEXT]
PREVIEW_RAW_TOKENS = 40
STAMP = "bench_checkpoint.json"


# --- the checkpoint ---------------------------------------------------------------------------------------------


def write_config(folder: Path) -> None:
    config = json.loads(TINY_CONFIG.read_text())
    thinker = config["thinker_config"]
    thinker.update(audio_token_id=AUDIO_PAD, audio_start_token_id=AUDIO_START, dtype="bfloat16")
    thinker["audio_config"].update(AUDIO)
    thinker["text_config"].update(TEXT)
    thinker["text_config"]["rope_scaling"]["mrope_section"] = MROPE_SECTION
    (folder / "config.json").write_text(json.dumps(config, indent=2))


def write_tokenizer(folder: Path) -> None:
    """vocab.json: the 256 byte tokens, then unique fillers up to id 151642; no merges; every added id numbered."""
    chars = [c for _, c in sorted(byte_unicode().items())]
    vocab = {c: i for i, c in enumerate(chars)}
    fillers = (a + b for a in chars for b in chars)
    triples = (a + b + c for a in chars for b in chars for c in chars)
    for word in (*fillers, *triples):
        if len(vocab) == FIRST_ADDED:
            break
        vocab[word] = len(vocab)
    assert len(vocab) == FIRST_ADDED
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    write_tokenizer_config(folder, {i: NAMED.get(i, f"<|reserved_{i}|>") for i in range(FIRST_ADDED, max(NAMED) + 1)})


def dims():
    from omnid.engine.qwen3.checkpoint import AudioDims, TextDims

    a, t = AUDIO, TEXT
    audio = AudioDims(n_mels=a["num_mel_bins"], d_model=a["d_model"], layers=a["encoder_layers"],
                      heads=a["encoder_attention_heads"], ffn_dim=a["encoder_ffn_dim"], output_dim=a["output_dim"],
                      conv_channels=a["downsample_hidden_size"], n_window=a["n_window"], n_window_infer=a["n_window_infer"])
    text = TextDims(vocab_size=t["vocab_size"], hidden_size=t["hidden_size"], intermediate_size=t["intermediate_size"],
                    layers=t["num_hidden_layers"], heads=t["num_attention_heads"], kv_heads=t["num_key_value_heads"],
                    head_dim=t["head_dim"], rope_theta=t["rope_theta"], rms_norm_eps=t["rms_norm_eps"],
                    tied=t["tie_word_embeddings"])
    return audio, text


def write_weights(folder: Path, seed: int) -> int:
    """Every tensor omnid's loader expects, under its original name and PyTorch layout, stored bf16: weights
    N(0, 1/fan_in), norms 1 + N(0, 0.05^2), biases N(0, 0.02^2). Returns the parameter count (without lm_head)."""
    import mlx.core as mx

    from omnid.engine.qwen3.checkpoint import expected_shapes

    mx.random.seed(seed)
    weights: dict[str, mx.array] = {}
    count = 0
    for name, shape in expected_shapes(*dims()).items():
        disk = "thinker.audio_tower." + name[len("audio."):] if name.startswith("audio.") else "thinker.model." + name[len("text."):]
        if name.startswith("audio.conv2d") and name.endswith(".weight"):
            shape = (shape[0], shape[3], shape[1], shape[2])  # MLX (out, kH, kW, in) -> PyTorch (out, in, kH, kW)
        noise = mx.random.normal(shape)
        if name.endswith(".bias"):
            value = 0.02 * noise
        elif len(shape) == 1:  # every 1-D weight is a norm's
            value = 1.0 + 0.05 * noise
        else:
            value = noise / math.sqrt(math.prod(shape[1:]))
        value = value.astype(mx.bfloat16)
        if name == "text.embed_tokens.weight":
            value[ENDOFTEXT] = 0  # tied head: the end tokens' logits are exactly 0, far below the maximum
            value[IM_END] = 0
        mx.eval(value)
        weights[disk] = value
        count += math.prod(shape)
    weights["thinker.lm_head.weight"] = weights["thinker.model.embed_tokens.weight"]  # the real repos store the copy
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})
    del weights
    mx.clear_cache()
    return count


def build_checkpoint(folder: Path, seed: int) -> str:
    stamp = {"seed": seed, "audio": AUDIO, "text": TEXT}
    if (folder / STAMP).is_file() and json.loads((folder / STAMP).read_text()) == stamp:
        return f"reusing the checkpoint in {folder}"
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    write_config(folder)
    write_tokenizer(folder)
    count = write_weights(folder, seed)
    (folder / STAMP).write_text(json.dumps(stamp))
    os.sync()  # the first worker must not load while 1.7 GiB of dirty pages are still being written back
    size = (folder / "model.safetensors").stat().st_size / 2**30
    return (f"built a random checkpoint in {folder}: {count / 1e6:.0f} M parameters, model.safetensors {size:.2f} GiB, "
            f"{time.perf_counter() - started:.0f} s")


# --- the inputs --------------------------------------------------------------------------------------------------


def corpus_audio(seconds: float) -> tuple:
    """Sorted English corpus clips, concatenated and cut to ``seconds``; and their reference texts, joined."""
    import numpy as np

    from omnid.audio import SAMPLE_RATE, decode_audio

    manifest = {}
    if (CORPUS / "manifest.jsonl").is_file():
        for line in (CORPUS / "manifest.jsonl").read_text().splitlines():
            row = json.loads(line)
            manifest[row["path"]] = row["text"]
    want = int(round(seconds * SAMPLE_RATE))
    parts, texts, have = [], [], 0
    for path in sorted((CORPUS / "audio" / "en").glob("*.wav")):
        parts.append(decode_audio(path))
        texts.append(manifest.get(f"audio/en/{path.name}", ""))
        have += len(parts[-1])
        if have >= want:
            break
    if have < want:
        raise SystemExit(f"only {have / SAMPLE_RATE:.1f} s of English .wav audio in {CORPUS}")
    return np.concatenate(parts)[:want].astype(np.float32), " ".join(t for t in texts if t)


def with_audio_slots(ids: list[int], n: int) -> list[int]:
    """The same prompt with ``n`` audio slots."""
    first = ids.index(AUDIO_PAD)
    last = len(ids) - ids[::-1].index(AUDIO_PAD)
    return ids[:first] + [AUDIO_PAD] * n + ids[last:]


# --- workers (one fresh process per run) ---------------------------------------------------------------------------


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_omnid(folder: Path, audio_path: Path, ids_path: Path, tokens: int, warmup: bool) -> dict:
    import numpy as np

    from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions

    audio = np.load(audio_path)
    ids = json.loads(ids_path.read_text())
    started = time.perf_counter()
    engine = Qwen3AsrEngine(MODEL_ID, folder, options=QwenOptions(loop_window=0))
    load_s = time.perf_counter() - started
    assert engine.prompt("", ids.count(AUDIO_PAD)) == ids
    if warmup:
        f = engine.encode(audio[:16000])
        engine.generate(engine.prompt("", f.shape[0]), f, 2, loop_guard=False)

    started = time.perf_counter()
    features = engine.encode(audio)
    encoder_s = time.perf_counter() - started
    assert features.shape[0] == ids.count(AUDIO_PAD), (features.shape, ids.count(AUDIO_PAD))

    started = time.perf_counter()
    engine.generate(ids, features, 1, loop_guard=False)  # prefill and the first token
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    gen = engine.generate(ids, features, tokens, loop_guard=False)
    generate_s = time.perf_counter() - started
    assert len(gen.tokens) == tokens and gen.finish == "length", (len(gen.tokens), gen.finish)
    return _result("omnid", load_s, encoder_s, prefill_s, generate_s, tokens, gen.tokens, str(features.dtype))


def worker_reference(folder: Path, audio_path: Path, ids_path: Path, tokens: int, warmup: bool) -> dict:
    import mlx.core as mx
    import mlx_qwen3_asr.generate as G
    import numpy as np
    from mlx.utils import tree_flatten, tree_map
    from mlx_qwen3_asr.audio import compute_features
    from mlx_qwen3_asr.generate import GenerationConfig, generate_with_info
    from mlx_qwen3_asr.load_models import load_model

    G._detect_repetition = lambda tokens, threshold=G.REPETITION_THRESHOLD: False  # forced length: no repetition stop
    audio = np.load(audio_path)
    ids = json.loads(ids_path.read_text())
    started = time.perf_counter()
    model, _ = load_model(str(folder), dtype=mx.float32)
    loaded_as = str(model.model.embed_tokens.weight.dtype)
    # load_model casts only when dtype != float32: a bf16 checkpoint stays bf16. Cast as it does for other dtypes.
    params = tree_map(lambda x: x.astype(mx.float32) if isinstance(x, mx.array) and mx.issubdtype(x.dtype, mx.floating)
                      else x, model.parameters())
    model.load_weights(list(tree_flatten(params)))
    model.lm_head.weight = model.model.embed_tokens.weight  # re-tied before evaluation: no second copy is computed
    mx.eval(model.parameters())
    load_s = time.perf_counter() - started
    assert all(p.dtype == mx.float32 for _, p in tree_flatten(model.parameters()) if mx.issubdtype(p.dtype, mx.floating))

    def decode(prompt: list[int], features: mx.array, n: int):
        x = mx.array(prompt)[None]
        positions = mx.broadcast_to(mx.arange(x.shape[1])[None, None, :], (1, 3, x.shape[1]))
        return generate_with_info(model, x, features, positions, GenerationConfig(max_new_tokens=n, eos_token_ids=EOS))

    if warmup:
        mel, lens = compute_features(audio[:16000])
        f, _ = model.audio_tower(mel, lens)
        decode(with_audio_slots(ids, f.shape[1]), f, 2)

    started = time.perf_counter()
    mel, lens = compute_features(audio)
    features, _ = model.audio_tower(mel, lens)
    mx.eval(features)
    encoder_s = time.perf_counter() - started
    assert features.shape[1] == ids.count(AUDIO_PAD), (features.shape, ids.count(AUDIO_PAD))

    started = time.perf_counter()
    decode(ids, features, 1)  # prefill and the first token
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    result = decode(ids, features, tokens)
    generate_s = time.perf_counter() - started
    assert len(result.tokens) == tokens and result.finish_reason == "length", (len(result.tokens), result.finish_reason)
    out = _result("mlx-qwen3-asr", load_s, encoder_s, prefill_s, generate_s, tokens, result.tokens,
                  str(features.dtype))
    out["weights_as_loaded"] = loaded_as
    return out


def _result(system: str, load_s: float, encoder_s: float, prefill_s: float, generate_s: float, tokens: int,
            ids: list[int], dtype: str) -> dict:
    decode_ms = (generate_s - prefill_s) / (tokens - 1) * 1000 if tokens > 1 else float("nan")
    return {"system": system, "load_s": load_s, "encoder_s": encoder_s, "prefill_s": prefill_s, "decode_ms": decode_ms,
            "total_s": encoder_s + generate_s, "peak_rss_mb": rss_mb(), "tokens": list(ids), "dtype": dtype}


def worker_preview(folder: Path, audio_path: Path, text: str, runs: int, warmup: bool) -> dict:
    """omnid's redecode of a 10 s open segment: a first decode (no prefix) against a third (prefix forced)."""
    import numpy as np

    from omnid.engine.interface import Hypothesis
    from omnid.engine.options import TranscribeOptions
    from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions

    audio = np.load(audio_path)
    engine = Qwen3AsrEngine(MODEL_ID, folder, options=QwenOptions(loop_window=0))
    tok = engine.tokenizer
    raw_ids = tok.encode(text or "the quick brown fox jumps over the lazy dog " * 2)[:PREVIEW_RAW_TOKENS]
    raw = tok.decode(raw_ids)
    assert len(tok.encode(raw)) == PREVIEW_RAW_TOKENS
    previous = Hypothesis(text=raw, raw=f"language English<asr_text>{raw}", decodes=engine.options.stream_unfixed_decodes,
                          language="en", raw_language=None)
    opts = TranscribeOptions()
    if warmup:
        engine.redecode(audio[:16000], opts, None)
    times: dict[str, list[float]] = {"none": [], "prefix": []}
    generated: dict[str, int] = {}
    forced: dict[str, int] = {}
    for _ in range(runs):
        for name, prev in (("none", None), ("prefix", previous)):
            started = time.perf_counter()
            hyp = engine.redecode(audio, opts, prev)
            times[name].append(time.perf_counter() - started)
            # hyp.tokens = the forced prefix's tokens + the generated ones; the prefix is raw minus its last tokens
            prefix_len = 0 if prev is None else PREVIEW_RAW_TOKENS - engine.options.stream_rollback_tokens
            generated[name] = len(hyp.tokens) - prefix_len
            forced[name] = prefix_len
    n_audio = engine.encode(audio).shape[0]
    return {"times": times, "generated": generated, "forced_prefix": forced,
            "prompt_none": len(engine.prompt("", n_audio)),
            "prompt_prefix": len(engine.prompt("", n_audio, "en")) + forced["prefix"],
            "max_new": engine.options.preview_max_new_tokens, "seconds": len(audio) / 16000}


# --- the parent ----------------------------------------------------------------------------------------------------


def spawn(args: list[str], python: str = sys.executable, script: str = __file__) -> dict:
    done = subprocess.run([python, script, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"worker {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> str:
    import mlx.core as mx

    from omnid.blas import status

    try:
        from mlx_qwen3_asr import __version__ as ref_version
    except ImportError:
        ref_version = "not installed"
    blas = status()
    return (f"{platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} CPUs, mlx {mx.__version__} "
            f"({mx.default_device()}), BLAS {blas.name}; mlx-qwen3-asr {ref_version}")


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def agreement(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def table(seconds: float, n_audio: int, prompt_len: int, tokens: int, results: dict[str, list[dict]]) -> bool | None:
    om = results.get("omnid")
    refs = [r for r in REFERENCES if results.get(r)]
    print(f"\n{seconds:g} s of audio: {n_audio} audio tokens, a {prompt_len}-id prompt, {tokens} tokens generated; "
          f"median of {max(len(v) for v in results.values())} fresh processes")
    header = f"{'':<18} {'omnid':>10}" + "".join(f" {r:>14} {'ratio':>7}" for r in refs)
    print(header)
    print("-" * len(header))
    rows = [("load s", "load_s", "{:.2f}"), ("encoder s", "encoder_s", "{:.3f}"), ("prefill s", "prefill_s", "{:.3f}"),
            ("decode ms/token", "decode_ms", "{:.1f}"), ("total s", "total_s", "{:.3f}"),
            ("peak RSS MB", "peak_rss_mb", "{:.0f}")]
    for label, key, fmt in rows:
        a = median(om, key) if om else None
        line = f"{label:<18} {fmt.format(a) if a is not None else '-':>10}"
        for r in refs:
            b = median(results[r], key)
            ratio = (f"{a / b:.2f}" if key == "peak_rss_mb" else f"{b / a:.2f}x") if a else ""
            line += f" {fmt.format(b):>14} {ratio:>7}"
        print(line)
    print("ratio: reference time / omnid time (speed-up); for peak RSS, omnid / reference")
    if not om or not refs:
        return None
    met = True
    for r in refs:
        ref = results[r]
        same = agreement(om[0]["tokens"], ref[0]["tokens"])
        print(f"{r}: the first {same} of {tokens} greedy tokens agree with omnid's (float32: omnid {om[0]['dtype']}, "
              f"{r} {ref[0]['dtype']}" + (f", its weights loaded as {ref[0]['weights_as_loaded']} and cast"
                                          if "weights_as_loaded" in ref[0] else "") + ")")
        print("  total s per run: omnid " + ", ".join(f"{x['total_s']:.2f}" for x in om) + f"; {r} "
              + ", ".join(f"{x['total_s']:.2f}" for x in ref))
        speedup = median(ref, "total_s") / median(om, "total_s")
        if r == "torch":
            stages = {k: median(ref, k) / median(om, k) for k in ("encoder_s", "prefill_s", "decode_ms")}
            ok = speedup >= 1.5 and all(v >= 1.0 for v in stages.values())
            print(f"  target (every stage no slower than torch's, total >= 1.5x): {'MET' if ok else 'NOT MET'} "
                  f"(total {speedup:.2f}x; " + ", ".join(f"{k.split('_')[0]} {v:.2f}x" for k, v in stages.items()) + ")")
        else:
            memory = median(om, "peak_rss_mb") / median(ref, "peak_rss_mb")
            ok = speedup >= 1.5 and memory <= 1.0
            print(f"  target (omnid >= 1.5x {r}'s total speed, peak RSS <= its): {'MET' if ok else 'NOT MET'} "
                  f"({speedup:.2f}x, memory {memory:.2f})")
        met = met and ok
    return met


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0], help="audio lengths (default 10 60)")
    p.add_argument("--tokens", type=int, default=64, help="tokens every decode generates (default 64)")
    p.add_argument("--runs", type=int, default=3, help="fresh processes per system and length (default 3)")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument("--seed", type=int, default=0, help="seed of the random checkpoint")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="build the checkpoint in DIR and keep it (a DIR built with the same seed is reused)")
    p.add_argument("--no-preview", dest="preview", action="store_false", help="skip omnid's preview cost")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="an untimed warm-up (1 s of audio, 2 tokens) after loading (default on)")
    p.add_argument("--torch-python", type=Path, default=TORCH_PYTHON,
                   help="the python of the official code's virtualenv (default $OMNID_QWEN_REF_PYTHON or "
                        "/tmp/qref/bin/python); torch is skipped without it")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--audio", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--ids", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--text", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.tokens < 2:
        p.error("--tokens must be at least 2 (prefill and per-token time are split at the first token)")
    if args.worker:
        if args.worker == "omnid":
            out = worker_omnid(args.folder, args.audio, args.ids, args.tokens, args.warmup)
        elif args.worker == "mlx-qwen3-asr":
            out = worker_reference(args.folder, args.audio, args.ids, args.tokens, args.warmup)
        else:
            out = worker_preview(args.folder, args.audio, args.text, args.runs, args.warmup)
        print(json.dumps(out))
        return

    if "torch" in args.systems and not args.torch_python.exists():
        print(f"torch skipped: no {args.torch_python} (scripts/qwen3_asr_goldens.py says how to make that virtualenv)",
              file=sys.stderr)
        args.systems = [s for s in args.systems if s != "torch"]
    print(machine())
    work = Path(tempfile.mkdtemp(prefix="qwen3-asr-bench-"))
    folder = args.keep if args.keep else work / "checkpoint"
    failed = False
    try:
        print(build_checkpoint(folder, args.seed), flush=True)
        import numpy as np

        from omnid.engine.qwen3.model import audio_token_count
        from omnid.engine.qwen3.tokenizer import QwenTokenizer
        from omnid.engine.qwen3_asr.prompt import prompt_ids

        tok = QwenTokenizer.from_folder(folder)
        verdicts = []
        common = ["--folder", str(folder), "--tokens", str(args.tokens), "--warmup" if args.warmup else "--no-warmup"]
        for seconds in args.seconds:
            audio, _ = corpus_audio(seconds)
            audio_path, ids_path = work / f"audio_{seconds:g}.npy", work / f"ids_{seconds:g}.json"
            np.save(audio_path, audio)
            n_audio = audio_token_count(len(audio) // 160)
            ids = prompt_ids(tok, "", n_audio)
            ids_path.write_text(json.dumps(ids))
            results: dict[str, list[dict]] = {s: [] for s in args.systems}
            for run in range(args.runs):
                for system in args.systems:  # interleaved, so that drift in the machine hits both alike
                    try:
                        if system == "torch":
                            res = spawn(["--folder", str(folder), "--audio", str(audio_path), "--ids", str(ids_path),
                                         "--tokens", str(args.tokens), "--eos", *map(str, EOS),
                                         "--warmup" if args.warmup else "--no-warmup"],
                                        str(args.torch_python), str(ROOT / "bench" / "qwen3_asr_torch.py"))
                        else:
                            res = spawn(["--worker", system, "--audio", str(audio_path), "--ids", str(ids_path),
                                         *common])
                    except RuntimeError as exc:
                        print(exc, file=sys.stderr)
                        failed = True
                        continue
                    results[system].append(res)
                    print(f"  {seconds:g} s, run {run + 1}, {system}: total {res['total_s']:.2f} s, "
                          f"peak RSS {res['peak_rss_mb']:.0f} MB", file=sys.stderr, flush=True)
            results = {k: v for k, v in results.items() if v}
            if results:
                verdicts.append(table(seconds, n_audio, len(ids), args.tokens, results))
        if args.preview and "omnid" in args.systems:
            audio, text = corpus_audio(10.0)
            audio_path = work / "audio_preview.npy"
            np.save(audio_path, audio)
            try:
                res = spawn(["--worker", "preview", "--audio", str(audio_path), "--text", text, "--runs", str(args.runs),
                             *common])
            except RuntimeError as exc:
                print(exc, file=sys.stderr)
                failed = True
            else:
                none, prefix = statistics.median(res["times"]["none"]), statistics.median(res["times"]["prefix"])
                print(f"\nomnid realtime preview, one {res['seconds']:g} s open segment (engine.redecode), median of "
                      f"{args.runs}:")
                print(f"  first decode, no prefix:        {none:.3f} s  (prompt {res['prompt_none']} ids, "
                      f"{res['generated']['none']} tokens generated)")
                print(f"  third decode, rollback prefix:  {prefix:.3f} s  (prompt {res['prompt_prefix']} ids: language "
                      f"header + {res['forced_prefix']['prefix']} forced tokens; {res['generated']['prefix']} generated)")
                print(f"  prefix / no prefix: {prefix / none:.2f}. With random weights a preview always generates "
                      f"preview_max_new_tokens ({res['max_new']}) tokens; the byte-level tokenizer spells the language "
                      "header in 17 tokens (3 with the real vocabulary).")
        if verdicts and all(v is not None for v in verdicts):
            print(f"\nproject target over all lengths: {'MET' if all(verdicts) else 'NOT MET'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.keep:
            print(f"removed {folder}", file=sys.stderr)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
