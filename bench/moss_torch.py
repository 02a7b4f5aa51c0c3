"""The official MOSS-Transcribe-Diarize code (transformers 5.23's MossTranscribeDiarizeForConditionalGeneration,
feature extractor and processor) on torch's CPU: the transformers side of bench/moss_speed.py, at the real shapes
with random weights. Run by the throwaway virtualenv of scripts/moss_goldens.py, never by omnid's own environment:

    /tmp/cohere-ref/bin/python bench/moss_torch.py --build      # config.json and model.safetensors, once
    /tmp/cohere-ref/bin/python bench/moss_torch.py --child 60   # one measurement, one JSON line

``--build`` writes into --work/checkpoint (the real Qwen vocabulary is written there first by bench/moss_speed.py,
its ``<|audio_pad|>`` the audio token) a random model at the released sizes (Whisper-medium encoder: 24 layers 1024
wide; the projector 4096 -> 1024; Qwen3-0.6B: 28 layers, 151,936 rows, tied), transformers' own initialisation,
bfloat16 as released. ``--child INPUT``: load in float32 (both sides compute in float32), the processor's request
(markers every 5 s), then generate() greedily for exactly MAX_NEW_TOKENS tokens (random weights never end on their
own).
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.side_by_side import reference_main, result  # noqa: E402

WORK = pathlib.Path("/tmp/omnid-bench-moss")
MAX_NEW_TOKENS = 64
INPUTS = ("60", "600")


def config(audio_token_id: int) -> dict:
    return {
        "model_type": "moss_transcribe_diarize", "audio_token_id": audio_token_id, "tie_word_embeddings": True,
        "audio_config": {"num_mel_bins": 80, "num_hidden_layers": 24, "num_attention_heads": 16,
                         "intermediate_size": 4096, "hidden_size": 1024, "max_source_positions": 1500},
        "text_config": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 1024, "intermediate_size": 3072,
                        "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
                        "head_dim": 128, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                        "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"},
                        "tie_word_embeddings": True},
    }


def build(work: pathlib.Path) -> None:
    import torch
    from transformers import MossTranscribeDiarizeConfig, MossTranscribeDiarizeForConditionalGeneration

    folder = work / "checkpoint"
    pad = json.loads((folder / "audio_token.json").read_text())["audio_pad"]
    torch.manual_seed(0)
    model = MossTranscribeDiarizeForConditionalGeneration(MossTranscribeDiarizeConfig(**config(pad))).eval()
    model.to(torch.bfloat16).save_pretrained(folder)
    print(f"built {folder} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters)", flush=True)


def child(work: pathlib.Path, name: str) -> None:
    started = time.perf_counter()
    import numpy as np
    import torch
    from transformers import (
        MossTranscribeDiarizeFeatureExtractor,
        MossTranscribeDiarizeForConditionalGeneration,
        MossTranscribeDiarizeProcessor,
        Qwen2Tokenizer,
    )

    sys.path.insert(0, str(ROOT / "scripts"))
    from moss_goldens import TEMPLATE

    import_s = time.perf_counter() - started
    folder = work / "checkpoint"
    started = time.perf_counter()
    model = MossTranscribeDiarizeForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
    processor = MossTranscribeDiarizeProcessor(MossTranscribeDiarizeFeatureExtractor(),
                                               Qwen2Tokenizer.from_pretrained(folder), chat_template=TEMPLATE,
                                               time_marker_every_seconds=5)
    load_s = time.perf_counter() - started
    audio = np.load(work / f"audio_{name}s.npy")
    started = time.perf_counter()
    with torch.inference_mode():
        inputs = processor.apply_transcription_request(audio, return_tensors="pt", sampling_rate=16000)
        inputs.pop("num_audio_tokens", None)
        out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    total_s = time.perf_counter() - started
    tokens = int(out.shape[1] - inputs["input_ids"].shape[1])
    print(json.dumps(result(name, len(audio) / 16000, load_s, total_s, clips=1, import_s=import_s, tokens=[tokens],
                            prompt=int(inputs["input_ids"].shape[1]), torch=torch.__version__,
                            threads=torch.get_num_threads())), flush=True)


def main() -> None:
    reference_main(__doc__, WORK, build, child, INPUTS)


if __name__ == "__main__":
    main()
