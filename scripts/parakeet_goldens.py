"""Writes tests/goldens/parakeet_tiny/ with NVIDIA NeMo, Parakeet's own code: three tiny random checkpoints
(``tdt.nemo``, ``rnnt.nemo``, ``hybrid.nemo``: TDT, plain RNN-T, and a hybrid TDT-CTC), and ``goldens.json`` +
``goldens.npz``, what NeMo gives on four real English clips.

Not run by CI: it needs torch and NeMo, which omnid never imports. In a throwaway virtualenv outside the project
(a few minutes here):

    python3 -m venv /tmp/nemo
    /tmp/nemo/bin/pip install torch==2.13.0 'nemo_toolkit[asr]==3.0.0' av soxr structlog msgspec
    /tmp/nemo/bin/python scripts/parakeet_goldens.py            # from the repository root, OMNID_CORPUS=the full corpus

The models are Parakeet's architecture at toy sizes (the real v2/v3 configuration's kinds and switches: 128 mels,
per-feature normalisation, dw-striding x8 with its biases, a FastConformer without biases or xscaling, batch norm,
a 2-layer LSTM prediction network with the blank as its padding row, a ReLU joint, durations 0-4, greedy_batch with
max_symbols 10), a 64-piece SentencePiece BPE trained here on the corpus's English transcripts. Every parameter and
batch-norm statistic is re-randomised; the joint's output layer is then scaled up and its blank and duration biases
set so that greedy decoding on speech emits a mix of tokens and blanks with every duration (some zero, so several
tokens share a frame, and some runs reach max_symbols), words and punctuation, and ends at the last frame as the
real model does. NeMo's ``transcribe`` leaves the modules in train mode: ``eval()`` before every direct forward, and
the weights' hash is checked at the end.

Recorded per model and clip: NeMo's log-mel over the valid frames, the encoder output over its length, the greedy
token ids with their frames (and durations for TDT), the text, and the char, word and segment times of
``transcribe(timestamps=True)``; for the hybrid also its CTC decoding (ids, frames, text, times).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from omnid.audio import decode_audio  # noqa: E402

OUT = ROOT / "tests" / "goldens" / "parakeet_tiny"
# The goldens were made from the full evaluation corpus (its clip order and transcripts matter), not tests/corpus.
CORPUS = Path(os.environ.get("OMNID_CORPUS") or sys.exit("set OMNID_CORPUS to the corpus the goldens were made from"))
DURATIONS = [0, 1, 2, 3, 4]
SEED = 7
# Per model: (blank bias, joint output scale, word-start bias, sentence-end bias), found by trying (the stats line
# this script prints): tokens on about a third of the frames, every duration, words and sentences.
ZERO_DURATION_BIAS = 1.0
CTC_BLANK_BIAS = 2.0
SETTINGS = {"tdt": (6.0, 4.0, 3.0, 3.0), "rnnt": (12.0, 4.0, 6.0, 4.0), "hybrid": (6.0, 4.0, 3.0, 3.0)}


def read(name: str) -> np.ndarray:
    return decode_audio(CORPUS / "audio" / "en" / name)  # the same 16 kHz samples the tests decode


def clip_names() -> dict[str, list[str]]:
    """Each clip as the corpus files it joins: a short one, two medium ones, and LJSpeech clips joined past 20 s."""
    names = sorted(p.name for p in (CORPUS / "audio" / "en").glob("*.wav"))
    libri = next(n for n in names if n.startswith("librispeech"))
    joined, total = [], 0
    for n in (n for n in names if n.startswith("ljspeech")):
        joined.append(n)
        total += len(read(n))
        if total > 21 * 16000:
            break
    return {"short": ["an4_an104-mrcb-b.wav"], "ljspeech": ["ljspeech_LJ001-0001.wav"], "librispeech": [libri],
            "long": joined}


# The long-audio rule of the reference server (its parakeet/audio.py), at a small chunk length so that a test clip
# crosses boundaries: chunks of at most CHUNK_S cut at the middle of the quietest 100 ms window of the last 2 s
# before each boundary; chunks whose peak is under 1e-3 are not decoded.
CHUNK_S = 8.0
SEARCH_S = 2.0
SILENT_PEAK = 1e-3


def chunk_spans(audio: np.ndarray, chunk_s: float) -> list[tuple[int, int]]:
    chunk, search, window = int(chunk_s * 16000), int(SEARCH_S * 16000), 1600
    spans, start = [], 0
    while len(audio) - start > chunk:
        boundary = start + chunk
        region = audio[boundary - search : boundary].astype(np.float64)
        count = len(region) // window
        energy = (region[: count * window].reshape(count, window) ** 2).mean(axis=1)
        cut = boundary - search + int(np.argmin(energy)) * window + window // 2
        spans.append((start, cut))
        start = cut
    spans.append((start, len(audio)))
    return spans


def chunked_clip(long: np.ndarray) -> np.ndarray:
    """The long clip, then 9 s of near silence (peak 5e-4): the last chunks are skipped."""
    quiet = np.random.default_rng(3).uniform(-5e-4, 5e-4, 9 * 16000).astype(np.float32)
    return np.concatenate([long, quiet])


def tokenizer(folder: Path, vocab_size: int = 64, made_up: int = 0) -> Path:
    """A SentencePiece BPE trained on the corpus's English transcripts (``made_up`` user-defined pieces first, for a
    vocabulary larger than the transcripts give), with the vocab.txt NeMo's tokenizer folder wants."""
    import sentencepiece as spm

    manifest = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines() if line.strip()]
    lines = [m["text"] for m in manifest if m.get("language") == "en" and m.get("text")]
    folder.mkdir(parents=True, exist_ok=True)
    text = folder / "corpus.txt"
    text.write_text("\n".join(lines) + "\n")
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(folder / "tokenizer"), vocab_size=vocab_size,
                                   model_type="bpe", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0,
                                   user_defined_symbols=[f"\u2581w{i:04d}" for i in range(made_up)])
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    assert sp.get_piece_size() == vocab_size, sp.get_piece_size()
    (folder / "vocab.txt").write_text("\n".join(sp.id_to_piece(i) for i in range(sp.get_piece_size())) + "\n")
    return folder


@dataclass(frozen=True)
class Sizes:
    layers: int = 2
    d_model: int = 64
    heads: int = 4
    subsampling_channels: int = 16
    pred: int = 32  # the prediction network's width, and the joint's


V3 = Sizes(layers=24, d_model=1024, heads=8, subsampling_channels=256, pred=640)  # parakeet-tdt-0.6b-v3's


def config(tokdir: Path, kind: str, sizes: Sizes = Sizes()) -> dict:
    encoder = {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": 128, "feat_out": -1,
        "n_layers": sizes.layers, "d_model": sizes.d_model, "use_bias": False, "subsampling": "dw_striding",
        "subsampling_factor": 8, "subsampling_conv_channels": sizes.subsampling_channels, "causal_downsampling": False,
        "ff_expansion_factor": 4, "self_attention_model": "rel_pos", "n_heads": sizes.heads,
        "att_context_size": [-1, -1], "att_context_style": "regular",
        "xscaling": False, "untie_biases": True, "pos_emb_max_len": 5000, "conv_kernel_size": 9,
        "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0.1, "dropout_pre_encoder": 0.1,
        "dropout_emb": 0.0, "dropout_att": 0.1,
    }
    d, p = sizes.d_model, sizes.pred
    tdt = kind in ("tdt", "hybrid")
    cfg = {
        "sample_rate": 16000,
        "tokenizer": {"dir": str(tokdir), "type": "bpe"},
        "model_defaults": {"enc_hidden": d, "pred_hidden": p, "joint_hidden": p},
        "preprocessor": {
            "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor", "sample_rate": 16000,
            "normalize": "per_feature", "window_size": 0.025, "window_stride": 0.01, "window": "hann",
            "features": 128, "n_fft": 512, "log": True, "frame_splicing": 1, "dither": 1e-5, "pad_to": 0,
            "pad_value": 0.0,
        },
        "encoder": encoder,
        "decoder": {"_target_": "nemo.collections.asr.modules.RNNTDecoder", "normalization_mode": None,
                    "random_state_sampling": False, "blank_as_pad": True,
                    "prednet": {"pred_hidden": p, "pred_rnn_layers": 2, "t_max": None, "dropout": 0.2}},
        "joint": {"_target_": "nemo.collections.asr.modules.RNNTJoint", "log_softmax": None, "preserve_memory": False,
                  "fuse_loss_wer": True, "fused_batch_size": 4, "num_extra_outputs": len(DURATIONS) if tdt else 0,
                  "jointnet": {"joint_hidden": p, "activation": "relu", "dropout": 0.2, "encoder_hidden": d,
                               "pred_hidden": p}},
        "decoding": {"strategy": "greedy_batch", "model_type": "tdt" if tdt else "rnnt", "greedy": {"max_symbols": 10},
                     **({"durations": DURATIONS} if tdt else {})},
        "loss": ({"loss_name": "tdt", "tdt_kwargs": {"fastemit_lambda": 0.0, "clamp": -1.0, "durations": DURATIONS,
                                                     "sigma": 0.02, "omega": 0.1}}
                 if tdt else {"loss_name": "default"}),
    }
    if tdt:
        cfg["model_defaults"] |= {"tdt_durations": DURATIONS, "num_tdt_durations": len(DURATIONS)}
    if kind == "hybrid":
        cfg["aux_ctc"] = {"ctc_loss_weight": 0.3, "use_cer": False, "ctc_reduction": "mean_batch",
                          "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": d,
                                      "num_classes": -1, "vocabulary": []},
                          "decoding": {"strategy": "greedy_batch"}}
    return cfg


def build(tokdir: Path, kind: str, blank_bias: float, scale: float, word_bias: float, stop_bias: float):
    from nemo.collections.asr.models import EncDecHybridRNNTCTCBPEModel, EncDecRNNTBPEModel
    from omegaconf import OmegaConf, open_dict

    cls = EncDecHybridRNNTCTCBPEModel if kind == "hybrid" else EncDecRNNTBPEModel
    model = cls(cfg=OmegaConf.create(config(tokdir, kind))).eval()
    randomize(model)
    with torch.no_grad():
        sp = model.tokenizer.tokenizer  # the SentencePieceProcessor
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
        vocab = len(pieces)  # the blank's id; TDT's duration outputs follow it
        # Word starts and sentence ends made likelier, so that texts have words and segments; the blank too.
        lift = torch.zeros(vocab + 1)
        lift[[i for i, p in enumerate(pieces) if p.startswith("\u2581")]] = word_bias
        lift[[i for i, p in enumerate(pieces) if p in (".", "?", "!", "\u2581.")]] = stop_bias
        lift[vocab] = blank_bias
        lift[sp.unk_id()] = -20.0  # never the unknown piece (it decodes as " \u2047 ")
        out = model.joint.joint_net[2]
        out.weight.mul_(scale)
        out.bias[: vocab + 1] += lift
        if kind != "rnnt":
            out.bias[vocab + 1] += ZERO_DURATION_BIAS  # duration 0: blanks with it too (NeMo counts those as 1)
        if kind == "hybrid":
            ctc = model.ctc_decoder.decoder_layers[0]
            ctc.weight.mul_(0.3)  # the encoder's output is wide (tens): its logits would swamp the lifts
            ctc_lift = lift.clone()
            ctc_lift[vocab] = CTC_BLANK_BIAS
            ctc.bias += ctc_lift
    with open_dict(model.cfg):
        model.cfg.validation_ds = {"use_start_end_token": False}
    return model


def randomize(model) -> None:
    """Every parameter random (weights scaled by their fan-in, norms' weights around 1) and every batch-norm
    statistic too, from SEED."""
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan_in = max(1, p.shape[-1]) if p.ndim > 1 else 1
            p.copy_(torch.randn(p.shape, generator=g) * (1.0 / fan_in**0.5 if p.ndim > 1 else 0.1)
                    + (1.0 if name.endswith("norm_out.weight") or "norm" in name and name.endswith("weight") else 0.0))
        for name, b in model.named_buffers():
            if name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)


def weights_hash(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def run(model, audio: dict[str, np.ndarray], folder: Path, ctc: bool = False) -> dict:
    """NeMo's own outputs on each clip: the log-mel and encoder output by direct forwards (in eval mode), the
    greedy hypothesis and its times by transcribe(timestamps=True)."""
    results = {}
    for name, clip in audio.items():
        model.eval()
        with torch.no_grad():
            signal = torch.from_numpy(clip)[None]
            length = torch.tensor([len(clip)])
            mel, mel_len = model.preprocessor(input_signal=signal, length=length)
            enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
        path = folder / f"{name}.wav"
        sf.write(path, clip, 16000, subtype="FLOAT")
        hyp = model.transcribe([str(path)], timestamps=True, batch_size=1, return_hypotheses=True, verbose=False)[0]
        model.eval()
        ts = hyp.timestamp
        if ctc:  # its hypothesis holds the frames' log-probabilities: the ids are their collapsed argmax
            best = hyp.y_sequence.argmax(-1).tolist()
            blank = hyp.y_sequence.shape[-1] - 1
            ids = [b for i, b in enumerate(best) if b != blank and (i == 0 or b != best[i - 1])]
        else:
            ids = [int(i) for i in hyp.y_sequence]
        results[name] = {
            "mel": mel[0, :, : int(mel_len[0])].T.numpy(), "encoder": enc[0, :, : int(enc_len[0])].T.numpy(),
            "ids": ids, "frames": [int(t) for t in ts["timestep"]],
            "durations": [int(d) for d in hyp.token_duration] if hyp.token_duration is not None else None,
            "text": hyp.text, "char": _times(ts.get("char", []), "char"), "word": _times(ts.get("word", []), "word"),
            "segment": _times(ts.get("segment", []), "segment"),
        }
    return results


def _times(entries: list[dict], key: str) -> list[dict]:
    out = []
    for e in entries:
        value = e[key]
        out.append({key: value if isinstance(value, str) else list(value), "start_offset": int(e["start_offset"]),
                    "end_offset": int(e["end_offset"]), "start": float(e["start"]), "end": float(e["end"])})
    return out


def stats(results: dict) -> str:
    parts = []
    for name, r in results.items():
        d = r["durations"] or []
        same = sum(1 for a, b in zip(r["frames"], r["frames"][1:]) if a == b)
        parts.append(f"{name}: {len(r['ids'])} tokens/{len(r['encoder'])} frames, {len(r['word'])} words, "
                     f"{len(r['segment'])} segments, "
                     f"durations {sorted(set(d))}, same-frame {same}")
    return "; ".join(parts)


def main() -> None:
    torch.manual_seed(SEED)
    names = clip_names()
    audio = {name: np.concatenate([read(n) for n in files]) for name, files in names.items()}
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        tokdir = tokenizer(folder / "tok")
        meta: dict = {"clips": names, "models": {}}
        arrays: dict[str, np.ndarray] = {}
        for kind, settings in SETTINGS.items():
            model = build(tokdir, kind, *settings)
            path = OUT / f"{kind}.nemo"
            model.save_to(str(path))
            before = weights_hash(model)
            results = run(model, audio, folder)
            print(kind, stats(results), flush=True)
            if kind == "hybrid":
                model.change_decoding_strategy(decoder_type="ctc")
                ctc = run(model, audio, folder, ctc=True)
                print("hybrid ctc", stats(ctc), flush=True)
                model.change_decoding_strategy(decoder_type="rnnt")
            if kind == "tdt":  # the long-audio rule: each chunk transcribed on its own
                clip = chunked_clip(audio["long"])
                spans = chunk_spans(clip, CHUNK_S)
                loud = {f"chunk{i}": clip[a:b] for i, (a, b) in enumerate(spans)
                        if float(np.abs(clip[a:b]).max()) >= SILENT_PEAK}
                chunks = run(model, loud, folder)
                meta["chunked"] = {"clip": "long", "quiet_s": 9, "chunk_s": CHUNK_S, "spans": spans,
                                   "decoded": sorted(loud), "results": {n: {k: v for k, v in r.items()
                                                                            if k not in ("mel", "encoder")}
                                                                        for n, r in chunks.items()}}
                print("chunked", spans, sorted(loud), flush=True)
            assert weights_hash(model) == before, "NeMo changed the weights while decoding"
            entry = {}
            for name, r in results.items():
                mel = r.pop("mel")
                if f"mel/{name}" in arrays:  # one front end for all three
                    assert np.array_equal(arrays[f"mel/{name}"], mel)
                arrays[f"mel/{name}"] = mel
                arrays[f"encoder/{kind}/{name}"] = r.pop("encoder")
                entry[name] = r
                if kind == "hybrid":
                    c = ctc[name]
                    c.pop("mel"), c.pop("encoder")
                    entry[name]["ctc"] = c
            meta["models"][kind] = entry
    np.savez_compressed(OUT / "goldens.npz", **{k: v.astype(np.float32) for k, v in arrays.items()})
    (OUT / "goldens.json").write_text(json.dumps(meta, ensure_ascii=False, separators=(",", ":")) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
