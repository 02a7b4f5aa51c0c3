"""The official Qwen3-ASR code (qwen-asr 0.0.6's transformers backend) on torch's CPU, timed as bench/qwen3_asr_speed.py
times omnid: one worker process, run by the golden script's throwaway virtualenv (scripts/qwen3_asr_goldens.py has
the commands), never by omnid's own environment:

    /tmp/qref/bin/python bench/qwen3_asr_torch.py --folder DIR --audio A.npy --ids IDS.json --tokens 64

It loads the checkpoint in float32, then times (after a warm-up on the first second, as the omnid worker does):
the features (WhisperFeatureExtractor, as the official processor) plus ``thinker.get_audio_features``; a
``generate`` of one token (the prefill); a ``generate`` of --tokens tokens. It prints one JSON line with the fields
the parent's table reads. The official backend does not window the encoder's attention on the CPU (QwenLM/Qwen3-ASR
issue #213): past 8 s of audio it attends across the whole clip, which is how the official code runs here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import sys
import time
import types

import numpy as np
import torch


def load_backend():
    """The transformers backend without qwen_asr/__init__.py (which imports gradio, nagisa, ...)."""
    spec = importlib.util.find_spec("qwen_asr")
    assert spec is not None and spec.submodule_search_locations is not None
    stub = types.ModuleType("qwen_asr")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["qwen_asr"] = stub
    from qwen_asr.core.transformers_backend import Qwen3ASRForConditionalGeneration

    return Qwen3ASRForConditionalGeneration


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--folder", required=True)
    p.add_argument("--audio", required=True)
    p.add_argument("--ids", required=True)
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--eos", type=int, nargs="+", required=True)
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True)
    args = p.parse_args()
    from transformers import WhisperFeatureExtractor

    model_class = load_backend()
    audio = np.load(args.audio)
    ids = json.loads(open(args.ids).read())
    started = time.perf_counter()
    model = model_class.from_pretrained(args.folder, dtype=torch.float32).eval()
    load_s = time.perf_counter() - started
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=30,
                                 padding_value=0.0, return_attention_mask=True)

    def features(clip: np.ndarray):
        f = fe(clip, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
               return_tensors="pt")
        return f["input_features"], f["attention_mask"]

    def encode(clip: np.ndarray) -> torch.Tensor:
        feats, mask = features(clip)
        return model.thinker.get_audio_features(feats, feature_attention_mask=mask)

    def generate(prompt: list[int], clip: np.ndarray, n: int) -> list[int]:
        feats, mask = features(clip)
        input_ids = torch.tensor([prompt])
        out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), input_features=feats,
                             feature_attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                             eos_token_id=args.eos, pad_token_id=args.eos[-1])
        return out.sequences[0, input_ids.shape[1]:].tolist()  # the official generate returns a dict

    with torch.inference_mode():
        if args.warmup:
            first = audio[:16000]
            n = encode(first).shape[0]
            pad = max(set(ids), key=ids.count)  # the audio slot id: the most frequent one
            start = ids.index(pad)
            generate(ids[:start] + [pad] * n + ids[start + ids.count(pad):], first, 2)
        started = time.perf_counter()
        enc = encode(audio)
        encoder_s = time.perf_counter() - started
        started = time.perf_counter()
        generate(ids, audio, 1)
        prefill_s = time.perf_counter() - started - encoder_s  # generate encodes the audio again: not counted twice
        started = time.perf_counter()
        tokens = generate(ids, audio, args.tokens)
        generate_s = time.perf_counter() - started - encoder_s
    assert len(tokens) == args.tokens, len(tokens)
    decode_ms = (generate_s - prefill_s) / (args.tokens - 1) * 1000
    print(json.dumps({"system": "torch", "load_s": load_s, "encoder_s": encoder_s, "prefill_s": prefill_s,
                      "decode_ms": decode_ms, "total_s": encoder_s + generate_s,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "tokens": tokens, "dtype": str(enc.dtype), "audio_tokens": int(enc.shape[0])}))


if __name__ == "__main__":
    main()
