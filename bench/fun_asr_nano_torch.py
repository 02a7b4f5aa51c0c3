"""The official Fun-ASR-Nano code (funasr 1.4.16's AutoModel and FunASRNano) on torch's CPU: the funasr side of
bench/fun_asr_nano_speed.py, at the real shapes with random weights. Run by funasr's throwaway virtualenv
(scripts/funasr_frontend_goldens.py has the commands), never by omnid's own environment:

    /tmp/funasr-ref/bin/python bench/fun_asr_nano_torch.py --build     # model.pt and config.yaml, once
    /tmp/funasr-ref/bin/python bench/fun_asr_nano_torch.py --child 20  # one measurement, one JSON line

``--build`` writes into --work/checkpoint (the Qwen3-0.6B folder, with the real Qwen vocabulary, is written there
first by bench/fun_asr_nano_speed.py) a random FunASRNano at the real sizes (SenseVoice encoder 50 + 20 blocks 512
wide, adaptor 512 -> 2048 -> 1024 with 2 blocks, Qwen3-0.6B: 28 layers, 1024 wide, 151,936 rows), built by
funasr's own classes, bfloat16 in model.pt as released. ``--child INPUT``: load (AutoModel, dither 0, ncpu = the
cores), then generate() on the input with max_length MAX_NEW_TOKENS (random weights never end on their own, so
both sides decode that many tokens).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.side_by_side import reference_main, result  # noqa: E402

WORK = pathlib.Path("/tmp/omnid-bench-fun-asr-nano")
MAX_NEW_TOKENS = 64
ENCODER = {"output_size": 512, "attention_heads": 4, "linear_units": 2048, "num_blocks": 50, "tp_blocks": 20,
           "input_layer": "pe", "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True,
           "kernel_size": 11, "sanm_shfit": 0, "selfattention_layer_type": "sanm", "freeze": True}
ADAPTOR = {"downsample_rate": 1, "use_low_frame_rate": True, "ffn_dim": 2048, "llm_dim": 1024, "encoder_dim": 512,
           "n_layer": 2, "freeze": True}


def absolute(folder: pathlib.Path) -> dict[str, dict[str, str]]:
    qwen = str((folder / "Qwen3-0.6B").resolve())
    return {"llm_conf": {"init_param_path": qwen}, "tokenizer_conf": {"init_param_path": qwen}}


def build(work: pathlib.Path) -> None:
    import funasr  # noqa: F401  (registers the classes)
    import torch
    import yaml
    from funasr.register import tables

    folder = work / "checkpoint"
    conf = {"model": "FunASRNano", "audio_encoder": "SenseVoiceEncoderSmall", "audio_encoder_conf": ENCODER,
            "audio_adaptor": "Transformer", "audio_adaptor_conf": ADAPTOR, "llm": "Qwen3-0.6b",
            "llm_conf": {"init_param_path": "Qwen3-0.6B", "freeze": True, "llm_dtype": "fp32"},
            "tokenizer": "HuggingfaceTokenizer", "tokenizer_conf": {"init_param_path": "Qwen3-0.6B"},
            "frontend": "WavFrontend", "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": 80,
                                                          "frame_length": 25, "frame_shift": 10, "lfr_m": 7,
                                                          "lfr_n": 6}}
    (folder / "config.yaml").write_text(yaml.safe_dump(conf, sort_keys=False, allow_unicode=True))
    torch.manual_seed(0)
    built = {**conf, "llm_conf": {**conf["llm_conf"], **absolute(folder)["llm_conf"]}}
    model = tables.model_classes["FunASRNano"](input_size=560, **{k: v for k, v in built.items() if k != "model"})
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    torch.save({"state_dict": state}, folder / "model.pt")
    print(f"built {folder} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters)", flush=True)


def child(work: pathlib.Path, name: str) -> None:
    started = time.perf_counter()
    import numpy as np
    import torch
    from funasr import AutoModel

    import_s = time.perf_counter() - started
    folder = work / "checkpoint"
    started = time.perf_counter()
    model = AutoModel(model=str(folder), disable_update=True, device="cpu", ncpu=os.cpu_count() or 1,
                      frontend_conf={"dither": 0.0}, disable_log=True, **absolute(folder))
    load_s = time.perf_counter() - started
    generated: list[int] = []
    llm = model.model.llm
    generate = llm.generate

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        out = generate(*args, **kwargs)
        generated.append(int(out.shape[1]))
        return out

    llm.generate = counted
    audio = np.load(work / f"audio_{name}s.npy")
    started = time.perf_counter()
    with torch.inference_mode():
        model.generate(input=torch.from_numpy(audio), max_length=MAX_NEW_TOKENS, disable_pbar=True)
    total_s = time.perf_counter() - started
    print(json.dumps(result(name, len(audio) / 16000, load_s, total_s, clips=1, import_s=import_s, tokens=generated,
                            torch=torch.__version__, threads=torch.get_num_threads())), flush=True)


def main() -> None:
    reference_main(__doc__, WORK, build, child, ("20",))


if __name__ == "__main__":
    main()
