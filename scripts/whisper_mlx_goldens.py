"""Writes tests/goldens/whisper_mlx_tiny/ with mlx-examples' own ``whisper/convert.py`` and mlx-whisper 0.4.3.

Not run by CI. In a throwaway virtualenv outside the project (a minute here):

    python3 -m venv /tmp/mlxw-venv
    /tmp/mlxw-venv/bin/pip install --no-deps mlx-whisper==0.4.3
    /tmp/mlxw-venv/bin/pip install 'mlx[cpu]==0.32.4' numpy tiktoken==0.14.0 tqdm
    git clone https://github.com/ml-explore/mlx-examples /tmp/mlx-examples     # read at 7ddca42f
    /tmp/mlxw-venv/bin/python scripts/whisper_mlx_goldens.py /tmp/mlx-examples  # from the repository root

It writes two tiny random Whisper checkpoints in Hugging Face's transformers layout (``config.json`` +
``model.safetensors``, the names and torch shapes ``WhisperForConditionalGeneration`` saves), one English-only
(n_vocab 51864, 80 mels) and one shaped as large-v3 (n_vocab 51866, 128 mels), and converts each with convert.py
itself (``--torch-name-or-path FOLDER --mlx-path OUT``, float16 and float32): what it writes is what
mlx-community's Whisper folders hold, ``config.json`` + ``weights.safetensors`` and no tokenizer file.

convert.py imports torch and ``mlx_whisper.torch_whisper`` at the top but converts a transformers folder with
``mx.load`` alone; the script stands in empty modules for those two (and for mlx_whisper's ``__init__``, which
imports its transcription stack: numba, scipy), so convert.py and mlx_whisper's own ``whisper.py`` and
``tokenizer.py`` run unchanged.

``logits.npz`` records, for each converted folder loaded by mlx-whisper's own ``load_model`` (float32), the logits
its model gives for a start sequence and a few text tokens over a seeded random log-mel window (``MEL_SEED``), at
every 13th token id and every special and timestamp id.

Quantized folders (``en-q4``, ``en-q8``, ``v3-q4``: three, since the 8-bit vocabulary alone is 3.3 MB): convert.py
``-q`` (``nn.quantize`` of every Linear and Embedding, its default group size 64, ``--q-bits`` 4 or 8, float16
scales and biases), on tiny random checkpoints of width 64 (``QSTATE``: a group of 64 must divide every quantized
input). ``quantized.npz`` records mlx-whisper's logits on each quantized folder and on the float32 conversion of the
same checkpoint (``*_float``), over the same mel window and tokens, so that a test knows mlx-whisper's own
float-versus-quantized difference; and its greedy tokens on each quantized folder with their margins (``*_greedy``).

``tokens.json`` records what mlx-whisper's tokenizer (``get_tokenizer``, its shipped rank files) gives for each
vocabulary size (51864, 51865, 51866): the ids of many texts in several languages, their decoding, the special
tokens, every language token, the non-speech tokens and the start sequences.
"""

from __future__ import annotations

import importlib.util
import json
import runpy
import shutil
import sys
import tempfile
import types
from pathlib import Path

import mlx.core as mx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "goldens" / "whisper_mlx_tiny"

# name -> (n_mels, n_vocab, convert.py's --dtype)
MODELS = {"en": (80, 51864, "float16"), "v3": (128, 51866, "float32")}
STATE, HEADS, LAYERS = 16, 2, 2

TEXTS = [
    "",
    " ",
    "Hello world",
    " Hello world!",
    " And so, my fellow Americans: ask not what your country can do for you.",
    "  two  spaces,\ttabs\nand\n\nnewlines  ",
    " It's 3.14159 and they'll say 1,000,000 isn't much; we've 42%.",
    " Der schnelle braune Fuchs springt über den faulen Hund. Größe, Straße.",
    " ¿Qué tal? El niño comió paella en Valencia.",
    " Le cœur a ses raisons que la raison ne connaît point.",
    " Привет, как дела? Съешь же ещё этих мягких французских булок.",
    " 東京は日本の首都です。",
    "我们今天去公园散步吧。",
    " 안녕하세요, 만나서 반갑습니다.",
    " مرحبا بالعالم",
    " שלום עולם",
    " नमस्ते दुनिया",
    " สวัสดีครับ",
    " Γειά σου Κόσμε",
    " ♪♪ -- ((music)) [laughs] {{x}} ♫ «quotes» “curly” – — …",
    " emoji 🎉👍🏽 and ZWJ 👨‍👩‍👧",
    " <|endoftext|> <|en|> written as text",
    " Ærøskøbing, Łódź, Şişli, Dvořák, naïve café",
    "\u00a0non-breaking\u2009thin\u200bzero-width",
    " 0.5 1e-9 0x1F #hashtag @user a/b\\c",
]


# name -> (n_mels, n_vocab, --q-bits): quantized with convert.py -q at its default group size (64)
# Made (their results stay in the .npz files) but not kept: tests/goldens/ stays under 32 MiB in all.
NOT_KEPT = ("v3", "en-q8")
QUANTIZED = {"en-q4": (80, 51864, 4), "en-q8": (80, 51864, 8), "v3-q4": (128, 51866, 4)}
QSTATE = 64


def tiny_hf(folder: Path, n_mels: int, n_vocab: int, seed: int, n: int = STATE) -> None:
    """A random WhisperForConditionalGeneration checkpoint: its config keys, tensor names and torch shapes."""
    rng = np.random.default_rng(seed)
    scale = 0.5 * (STATE / n) ** 0.5  # the same spread of activations at any width
    w: dict[str, np.ndarray] = {}

    def add(name: str, *shape: int) -> None:
        w[name] = rng.normal(0, scale, shape).astype(np.float32)

    add("model.encoder.conv1.weight", n, n_mels, 3)
    add("model.encoder.conv1.bias", n)
    add("model.encoder.conv2.weight", n, n, 3)
    add("model.encoder.conv2.bias", n)
    add("model.encoder.embed_positions.weight", 1500, n)
    add("model.decoder.embed_tokens.weight", n_vocab, n)
    add("model.decoder.embed_positions.weight", 448, n)
    for side in ("encoder", "decoder"):
        for i in range(LAYERS):
            p = f"model.{side}.layers.{i}"
            for attn in ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",):
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    add(f"{p}.{attn}.{proj}.weight", n, n)
                    if proj != "k_proj":
                        add(f"{p}.{attn}.{proj}.bias", n)
                add(f"{p}.{attn}_layer_norm.weight", n)
                add(f"{p}.{attn}_layer_norm.bias", n)
            add(f"{p}.fc1.weight", 4 * n, n)
            add(f"{p}.fc1.bias", 4 * n)
            add(f"{p}.fc2.weight", n, 4 * n)
            add(f"{p}.fc2.bias", n)
            add(f"{p}.final_layer_norm.weight", n)
            add(f"{p}.final_layer_norm.bias", n)
        add(f"model.{side}.layer_norm.weight", n)
        add(f"model.{side}.layer_norm.bias", n)
    w["proj_out.weight"] = w["model.decoder.embed_tokens.weight"]
    folder.mkdir(parents=True)
    mx.save_safetensors(str(folder / "model.safetensors"), {k: mx.array(v) for k, v in w.items()})
    config = {
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"], "num_mel_bins": n_mels,
        "max_source_positions": 1500, "d_model": n, "encoder_attention_heads": HEADS, "encoder_layers": LAYERS,
        "vocab_size": n_vocab, "max_target_positions": 448, "decoder_attention_heads": HEADS,
        "decoder_layers": LAYERS,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))


MEL_SEED = 7
TEXT = " hello world"  # the text tokens after the start sequence in logits.npz


def stand_ins(mlx_whisper_dir: Path) -> None:
    """Empty torch and mlx_whisper.torch_whisper, and mlx_whisper as a bare package (its own files, no __init__);
    an empty huggingface_hub for load_models.py's import (its download is never called: the folders are local)."""
    hub = types.ModuleType("huggingface_hub")
    hub.snapshot_download = None  # type: ignore[attr-defined]
    sys.modules["huggingface_hub"] = hub
    torch = types.ModuleType("torch")
    torch.Tensor = type("Tensor", (), {})  # type: ignore[attr-defined]
    sys.modules["torch"] = torch
    package = types.ModuleType("mlx_whisper")
    package.__path__ = [str(mlx_whisper_dir)]  # type: ignore[attr-defined]
    sys.modules["mlx_whisper"] = package
    torch_whisper = types.ModuleType("mlx_whisper.torch_whisper")
    torch_whisper.Whisper = type("Whisper", (), {})  # type: ignore[attr-defined]  (an annotation convert.py reads)
    sys.modules["mlx_whisper.torch_whisper"] = torch_whisper


def convert(convert_py: Path, hf: Path, out: Path, dtype: str, bits: int | None = None) -> None:
    argv = sys.argv
    sys.argv = [str(convert_py), "--torch-name-or-path", str(hf), "--mlx-path", str(out), "--dtype", dtype]
    if bits is not None:
        sys.argv += ["-q", "--q-bits", str(bits)]
    try:
        runpy.run_path(str(convert_py), run_name="__main__")
    finally:
        sys.argv = argv


def logits(folder: Path, get_tokenizer) -> dict[str, np.ndarray]:
    """mlx-whisper's logits on the folder: its load_model, its encoder and decoder, in float32."""
    from mlx_whisper.load_models import load_model

    model = load_model(str(folder), mx.float32)
    dims = model.dims
    multilingual = dims.n_vocab >= 51865
    tok = get_tokenizer(multilingual, num_languages=model.num_languages, language="de" if multilingual else None)
    ids = [*tok.sot_sequence, tok.no_timestamps, *tok.encode(TEXT)]
    mel = np.random.default_rng(MEL_SEED).standard_normal((1, 2 * dims.n_audio_ctx, dims.n_mels)).astype(np.float32)
    out = np.array(model.logits(mx.array([ids]), model.embed_audio(mx.array(mel)))[0].astype(mx.float32))
    # Every 13th token and every special and timestamp (kept small): each row of the embedding is the output's.
    vocab = np.unique(np.r_[0 : dims.n_vocab : 13, 50250 : dims.n_vocab])
    return {"ids": np.array(ids, np.int64), "vocab": vocab, "logits": out[:, vocab]}


GREEDY_STEPS = 16


def greedy(folder: Path, get_tokenizer) -> dict[str, np.ndarray]:
    """mlx-whisper's greedy tokens on the folder (the plain argmax, no suppression) after the start sequence and
    ``<|notimestamps|>``, over the same mel window, each with its margin over the runner-up."""
    from mlx_whisper.load_models import load_model

    model = load_model(str(folder), mx.float32)
    dims = model.dims
    multilingual = dims.n_vocab >= 51865
    tok = get_tokenizer(multilingual, num_languages=model.num_languages, language="de" if multilingual else None)
    ids = [*tok.sot_sequence, tok.no_timestamps]
    mel = np.random.default_rng(MEL_SEED).standard_normal((1, 2 * dims.n_audio_ctx, dims.n_mels)).astype(np.float32)
    audio = model.embed_audio(mx.array(mel))
    sampled, margins = [], []
    for _ in range(GREEDY_STEPS):
        last = np.array(model.logits(mx.array([ids + sampled]), audio)[0, -1].astype(mx.float32))
        top = np.sort(last)
        sampled.append(int(last.argmax()))
        margins.append(float(top[-1] - top[-2]))
    return {"greedy": np.array(sampled, np.int64), "greedy_margin": np.array(margins, np.float32)}


def tokens(get_tokenizer) -> dict:
    result = {}
    for n_vocab in (51864, 51865, 51866):
        multilingual = n_vocab >= 51865
        languages = n_vocab - 51765 - int(multilingual)  # mlx-whisper's Whisper.num_languages
        tok = get_tokenizer(multilingual, num_languages=languages)
        specials = ("eot", "sot", "sot_prev", "sot_lm", "no_speech", "no_timestamps", "timestamp_begin", "transcribe",
                    "translate")
        entry = {
            "encoding": tok.encoding.name,
            "n_vocab": tok.encoding.n_vocab,
            "specials": {name: getattr(tok, name) for name in specials},
            "languages": {tok.decode([t]).strip("<|>"): t for t in sorted(tok.all_language_tokens)},
            "non_speech_tokens": list(tok.non_speech_tokens),
            "texts": [{"text": t, "ids": tok.encode(t), "decoded": tok.decode(tok.encode(t))} for t in TEXTS
                      if "<|" not in t],
            # mlx-whisper's encode refuses special tokens written in text (tiktoken's default); encode_ordinary reads
            # them as text, as omnid does with a prompt.
            "ordinary": [{"text": t, "ids": tok.encoding.encode_ordinary(t)} for t in TEXTS if "<|" in t],
            "decode_with_timestamps": tok.decode([tok.timestamp_begin, *tok.encode(" hi there"), tok.eot,
                                                  tok.timestamp_begin + 50]),
        }
        if multilingual:
            entry["sot_sequences"] = {
                f"{lang}/{task}": list(get_tokenizer(True, num_languages=languages, language=lang,
                                                     task=task).sot_sequence)
                for lang in ("en", "de", "ja", "haw", "su", *(["yue"] if languages == 100 else []))
                for task in ("transcribe", "translate")
            }
        result[str(n_vocab)] = entry
    return result


def main() -> None:
    examples = Path(sys.argv[1])
    convert_py = examples / "whisper" / "convert.py"
    spec = importlib.util.find_spec("mlx_whisper")
    if spec is None or spec.submodule_search_locations is None:
        sys.exit("mlx-whisper is not installed in this interpreter")
    mlx_whisper_dir = Path(next(iter(spec.submodule_search_locations)))
    stand_ins(mlx_whisper_dir)
    from mlx_whisper.tokenizer import get_tokenizer

    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        for seed, (name, (n_mels, n_vocab, dtype)) in enumerate(MODELS.items()):
            hf = Path(tmp) / f"hf-{name}"
            tiny_hf(hf, n_mels, n_vocab, seed)
            convert(convert_py, hf, (Path(tmp) if name in NOT_KEPT else OUT) / name, dtype)
        arrays = {f"{name}_{key}": value for name in MODELS
                  for key, value in logits((Path(tmp) if name in NOT_KEPT else OUT) / name, get_tokenizer).items()}
        np.savez_compressed(OUT / "logits.npz", **arrays)
        quantized: dict[str, np.ndarray] = {}
        for seed, (name, (n_mels, n_vocab, bits)) in enumerate(QUANTIZED.items(), start=len(MODELS)):
            hf = Path(tmp) / f"hf-{name}"
            tiny_hf(hf, n_mels, n_vocab, seed // 2 * 2, QSTATE)  # q4 and q8 of one model quantize the same weights
            folder = (Path(tmp) if name in NOT_KEPT else OUT) / name
            convert(convert_py, hf, folder, "float16", bits)
            convert(convert_py, hf, Path(tmp) / f"{name}-float", "float32")
            for key, value in {**logits(folder, get_tokenizer), **greedy(folder, get_tokenizer)}.items():
                quantized[f"{name}_{key}"] = value
            quantized[f"{name}_float"] = logits(Path(tmp) / f"{name}-float", get_tokenizer)["logits"]
        np.savez_compressed(OUT / "quantized.npz", **quantized)
    (OUT / "tokens.json").write_text(json.dumps(tokens(get_tokenizer), ensure_ascii=False, indent=1) + "\n")
    for path in sorted(OUT.rglob("*")):
        if path.is_file():
            print(path.relative_to(ROOT), path.stat().st_size)


if __name__ == "__main__":
    main()
