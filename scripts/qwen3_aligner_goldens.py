"""Builds the tiny random Qwen3-ForcedAligner checkpoint and its goldens with the OFFICIAL implementation (qwen-asr
0.0.6's Qwen3ForcedAligner, its word splitters and fix_timestamp, its 180 s split for timed transcription).

Run once on a developer machine, never in CI, in the throwaway virtualenv of scripts/qwen3_asr_goldens.py plus the
official word splitters qwen-asr pins:

    /tmp/qref/bin/pip install nagisa==0.2.11 soynlp==0.0.493
    /tmp/qref/bin/python scripts/qwen3_aligner_goldens.py

It writes tests/goldens/qwen3_aligner_tiny/: the checkpoint in the original Qwen layout (the tiny Qwen3-ASR
network of scripts/qwen3_asr_goldens.py with the aligner's head: ``thinker_config.model_type``
``qwen3_forced_aligner``, 64 time classes, ``timestamp_token_id`` and ``timestamp_segment_time`` 80 ms), its
tokenizer (the tiny vocabulary plus ``<timestamp>``, the next id as in the real one), and goldens.json: for each
case the official word list, input ids, the classes predicted at the ``<timestamp>`` slots, and the aligned items
(text, start and end seconds) as ``Qwen3ForcedAligner.align`` returns them. Cases: English (one window and two),
Chinese (characters, and Latin mixed in), Korean (soynlp's L-tokenizer), Japanese (nagisa), Swedish (a language the
aligner was not trained on: the official code splits it at spaces like any other), the texts the tiny Qwen3-ASR
checkpoint transcribes (for the served tests), and 200 s of audio cut as the official timed transcription cuts it
(``split_audio_into_chunks`` at 180 s), each chunk aligned on its own and shifted onto the file's timeline.

The random weights are left random: the classes at the slots jump about, so the official monotonic fix-up meets
both of its cases (runs of at most two anomalies take a neighbour, longer runs are interpolated), which the
script asserts. The encoder's attention is windowed as trained (the patch in scripts/qwen3_asr_goldens.py).
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import qwen3_asr_goldens as A  # noqa: E402  (stubs the package, patches the windowed attention, the tiny model)
from qwen_asr.core.transformers_backend import Qwen3ASRProcessor  # noqa: E402
from qwen_asr.inference.qwen3_asr import Qwen3ASRModel  # noqa: E402
from qwen_asr.inference.qwen3_forced_aligner import Qwen3ForceAlignProcessor, Qwen3ForcedAligner  # noqa: E402
from qwen_asr.inference.utils import MAX_FORCE_ALIGN_INPUT_SECONDS, split_audio_into_chunks  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import Qwen2TokenizerFast, WhisperFeatureExtractor  # noqa: E402

OUT = A.ROOT / "tests/goldens/qwen3_aligner_tiny"
CLASSES = 64
SEGMENT_MS = 80
SLOT_SCALE = float(A.os.environ.get("SLOT_SCALE", 0.05))
ATTN_SCALE = float(A.os.environ.get("ATTN_SCALE", 3.0))
ASR_GOLDENS = A.ROOT / "tests/goldens/qwen3_asr_tiny/goldens.json"


def manifest() -> dict[str, dict]:
    rows = (json.loads(line) for line in (A.CORPUS / "manifest.jsonl").read_text().splitlines() if line.strip())
    return {r["id"]: r for r in rows}


def corpus(clip_id: str) -> tuple[np.ndarray, str]:
    row = manifest()[clip_id]
    return A.decode_audio(A.CORPUS / row["path"]).astype(np.float32), row["text"]


CASES = [  # name, corpus clip, language as the official transcribe passes it (the ASR's language name)
    ("en_short", "ljspeech_LJ001-0002", "English"),
    ("en_two_windows", "ljspeech_LJ001-0001", "English"),
    ("zh", "aishell1_BAC009S0724W0121", "Chinese"),
    ("zh_spaced", "fireredasr_BAC009S0764W0121", "Chinese"),
    ("ko", "picovoice_leopard_test_ko", "Korean"),
    ("ja", "picovoice_leopard_test_ja", "Japanese"),
    ("sv_unsupported", "mfa_se10x016-08071999-1334_u0016002", "Swedish"),
]
SERVED = [("mid_en", "mid", "English"), ("short_en", "short", "English")]  # the tiny ASR's own transcripts
LONG_S = 200.0  # English corpus clips concatenated (in manifest order, again from the first if need be)


def build(ids: dict[str, int], vocab_size: int):
    model = A.build_model(ids, vocab_size, aligner_classes=CLASSES)
    with torch.no_grad():  # the slots' hidden states follow their context, not the one token they all hold
        t = model.thinker
        t.model.embed_tokens.weight[ids["<timestamp>"]].mul_(SLOT_SCALE)
        for layer in t.model.layers:  # sharp attention: each slot reads its neighbourhood, which differs
            layer.self_attn.q_norm.weight.mul_(ATTN_SCALE)
            layer.self_attn.k_norm.weight.mul_(ATTN_SCALE)
    assert "forced_aligner" in model.thinker.config.model_type
    assert model.thinker.lm_head.weight.shape == (CLASSES, 64)
    return model


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    A.ADDED.append("<timestamp>")  # the real vocabulary's next added token (151705 after <asr_text> 151704)
    ids = A.write_tokenizer(OUT)
    tok = Qwen2TokenizerFast.from_pretrained(str(OUT))
    assert tok.convert_tokens_to_ids("<timestamp>") == ids["<timestamp>"]
    model = build(ids, max(ids.values()) + 1)
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(OUT / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    # to_dict writes the class's model_type; the real config.json names the aligner, as the loader reads it
    config["thinker_config"]["model_type"] = "qwen3_forced_aligner"
    config["thinker_config"]["classify_num"] = CLASSES
    config["timestamp_token_id"] = ids["<timestamp>"]
    config["timestamp_segment_time"] = SEGMENT_MS
    (OUT / "config.json").write_text(json.dumps(config, indent=2))
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=30,
                                 padding_value=0.0, return_attention_mask=True)
    fe.save_pretrained(OUT)
    model.config.timestamp_token_id = ids["<timestamp>"]
    model.config.timestamp_segment_time = SEGMENT_MS
    aligner = Qwen3ForcedAligner(model, Qwen3ASRProcessor(feature_extractor=fe, tokenizer=tok),
                                 Qwen3ForceAlignProcessor())

    captured: dict[str, torch.Tensor] = {}
    forward = model.thinker.forward

    def recording(*args, **kwargs):
        out = forward(*args, **kwargs)
        captured["input_ids"] = kwargs["input_ids"]
        captured["classes"] = out.logits.argmax(-1)
        top = out.logits.topk(2, dim=-1).values
        captured["margins"] = top[..., 0] - top[..., 1]
        return out

    model.thinker.forward = recording
    meta: dict = {"ids": ids, "classes": CLASSES, "segment_ms": SEGMENT_MS, "cases": {}, "served": {},
                  "pins": {"qwen-asr": "0.0.6", "transformers": "4.57.6", "torch": torch.__version__,
                           "nagisa": "0.2.11", "soynlp": "0.0.493"}}
    fixups = {"near": 0, "interpolated": 0}

    def align(audio: np.ndarray, text: str, language: str) -> dict:
        words, _ = aligner.aligner_processor.encode_timestamp(text, language)
        result = aligner.align(audio=(audio, 16000), text=text, language=language)[0]
        input_ids = captured["input_ids"][0]
        slots = input_ids == ids["<timestamp>"]
        classes = captured["classes"][0][slots].tolist()
        margins = captured["margins"][0][slots].tolist()
        _count_fixups(classes, fixups)
        return {"text": text, "language": language, "words": words, "input_ids": input_ids.tolist(),
                "slot_classes": classes, "slot_margins": [round(m, 6) for m in margins],
                "items": [[it.text, it.start_time, it.end_time] for it in result.items]}

    with torch.no_grad():
        for name, clip_id, language in CASES:
            audio, text = corpus(clip_id)
            meta["cases"][name] = {"clip": clip_id, "samples": len(audio), **align(audio, text, language)}
        asr = json.loads(ASR_GOLDENS.read_text())
        for name, clip, language in SERVED:
            meta["served"][name] = {"clip": clip, **align(A.clip_audio(clip), asr["cases"][name]["text"], language)}
        meta["long"] = long_case(align)
    meta["splits"] = splits()
    assert fixups["near"] and fixups["interpolated"], fixups  # both branches of the official fix-up are exercised
    meta["fixups"] = fixups
    (OUT / "goldens.json").write_text(json.dumps(meta, ensure_ascii=False, separators=(",", ":")))
    distinct = [len(set(c["slot_classes"])) for c in meta["cases"].values()]
    print(f"wrote {OUT}: {len(meta['cases'])} cases, fix-ups {fixups}, distinct classes per case {distinct}")


def splits() -> list[list]:
    """The official units of every corpus transcript in its language, of a variant with capitals, abbreviations,
    numbers, an ideograph run and a control separator, and of random Korean sentences built from the official word
    list; for Japanese, nagisa's own words too (the test feeds them to omnid's splitter when nagisa is absent)."""
    import random

    import nagisa

    proc = Qwen3ForceAlignProcessor()
    names = {"en": "English", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "de": "German", "fr": "French",
             "es": "Spanish", "it": "Italian", "pt": "Portuguese", "ru": "Russian", "sv": "Swedish", "et": "Estonian"}
    texts = []
    for row in manifest().values():
        texts.append((names[row["language"]], row["text"]))
        texts.append((names[row["language"]], row["text"].upper() + " U.S. don't 3.5%, 東京\x1etest 한국어를 공부하다"))
    rng = random.Random(5)
    listed = sorted(proc.ko_score)
    for _ in range(300):
        words = [rng.choice(listed) + rng.choice(["", "은", "는", "을", "으로", "하다", "에서", "!"])
                 for _ in range(rng.randint(1, 6))]
        texts.append(("Korean", " ".join(words)))
    out = []
    for language, text in texts:
        words, _ = proc.encode_timestamp(text, language)
        out.append([language, text, words] + ([nagisa.tagging(text).words] if language == "Japanese" else []))
    return out


def long_case(align) -> dict:
    """200 s of speech as the official timed transcription handles it: split at 180 s, each chunk aligned (here with
    the corpus texts of the clips it holds, in place of an ASR transcript), shifted by its offset, merged."""
    english = [r for r in manifest().values() if r["language"] == "en"]
    rows: list[dict] = []
    while sum(r["duration_s"] for r in rows) < LONG_S:
        rows.append(english[len(rows) % len(english)])
    parts, starts = [], []
    for r in rows:
        starts.append(sum(len(p) for p in parts))
        parts.append(A.decode_audio(A.CORPUS / r["path"]).astype(np.float32))
    audio = np.concatenate(parts)
    assert len(audio) > MAX_FORCE_ALIGN_INPUT_SECONDS * 16000
    chunks = split_audio_into_chunks(wav=audio, sr=16000, max_chunk_sec=MAX_FORCE_ALIGN_INPUT_SECONDS)
    out = {"clips": [r["id"] for r in rows], "samples": len(audio), "chunks": []}
    aligned = []
    for wav, offset in chunks:
        first = int(round(offset * 16000))
        inside = [r["text"] for r, s in zip(rows, starts) if first <= s < first + len(wav)]
        text = " ".join(inside)
        case = align(wav, text, "English")
        result = Qwen3ForcedAligner._to_structured_items(None, [
            {"text": t, "start_time": s, "end_time": e} for t, s, e in case["items"]])
        aligned.append(Qwen3ASRModel._offset_align_result(None, result, offset))
        out["chunks"].append({"offset_s": offset, "samples": len(wav), **case})
    merged = Qwen3ASRModel._merge_align_results(None, aligned)
    out["items"] = [[it.text, it.start_time, it.end_time] for it in merged.items]
    return out


def _count_fixups(classes: list[int], counts: dict[str, int]) -> None:
    """Runs of anomalies fix_timestamp finds (off its longest non-decreasing subsequence), by how it mends them."""
    fixed = Qwen3ForceAlignProcessor().fix_timestamp(np.array(classes, dtype=np.float64))
    normal = [a == b for a, b in zip(classes, fixed)]
    run = 0
    for ok in normal + [True]:
        if not ok:
            run += 1
        elif run:
            counts["near" if run <= 2 else "interpolated"] += 1
            run = 0


if __name__ == "__main__":
    main()
