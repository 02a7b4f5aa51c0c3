"""Writes the goldens of the Fun-ASR-Nano kind (tests/goldens/fun_asr_nano_tiny/) with the OFFICIAL code: funasr
1.4.16's AutoModel reading a tiny random ``FunASRNano`` in the real release's layout (config.yaml, model.pt holding
``{"state_dict": ...}`` in bfloat16, a ``Qwen3-0.6B/`` folder with the LLM's config and tokenizer), its
``generate`` (the SenseVoice encoder, the Transformer adaptor, the audio rows spliced into the Qwen3 LLM's input,
greedy decoding) on corpus clips under its prompt options (language, itn, hotwords).

Run once on a developer machine, never in CI, in the throwaway virtualenv scripts/funasr_frontend_goldens.py
describes (funasr 1.4.16 brings transformers):

    /tmp/funasr-ref/bin/python scripts/fun_asr_nano_goldens.py

The tiny model: encoder 16 wide (4 heads, 3 + 2 blocks, the real 560-wide input and FSMN kernel), adaptor
16 -> 32 -> 64 with 2 layers (8 heads, feed-forward 16 = llm_dim // 4 as funasr fixes it), Qwen3 with 2 layers,
width 64, 4 heads, 2 KV heads, head 16, vocabulary 340: the tiny Qwen3-ASR goldens' byte-level BPE (its
<|endoftext|>, <|im_start|>, <|im_end|> ...; the prompt's Chinese goes through byte pieces). Random weights (torch
seed fixed) shaped as the Qwen3-ASR goldens' LLM is so that greedy decodes vary and end on their own, stored in
bfloat16 as the release stores them. funasr builds the LLM from the folder's config and fills it from model.pt, all
in float32 here (llm_dtype fp32: with bf16 funasr builds the first call's audio rows in bf16 and later calls' in
float32). The config names the LLM folder relatively; funasr is given its absolute path (a relative one it would
look up on a model hub).

goldens.json: per case and option set (language, itn, hotwords) the prompt's ids as funasr builds them (its audio
slots hold 0, overwritten by the adaptor's rows), the generated ids (ending on <|im_end|>), each step's margin
between the best and second-best logit, and the text;
goldens.npz: the adaptor's output (first and last 4 rows, and the sum) of each case under the first option set.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import sys
import tempfile

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "goldens" / "fun_asr_nano_tiny"
CORPUS = ROOT / "tests" / "corpus"
QWEN_TOKENIZER = ROOT / "tests" / "goldens" / "qwen3_asr_tiny"
sys.path.insert(0, str(ROOT))
from omnid.audio import decode_audio  # noqa: E402  (the same 16 kHz samples omnid decodes)

sys.path.insert(0, str(ROOT / "scripts"))
from golden_weights import pack, randomise, shape_qwen3_lm  # noqa: E402

ENCODER = {"output_size": 16, "attention_heads": 4, "linear_units": 32, "num_blocks": 3, "tp_blocks": 2,
           "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1, "input_layer": "pe",
           "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True, "kernel_size": 11,
           "sanm_shfit": 0, "selfattention_layer_type": "sanm", "freeze": True}
ADAPTOR = {"downsample_rate": 1, "use_low_frame_rate": True, "ffn_dim": 32, "llm_dim": 64, "encoder_dim": 16,
           "n_layer": 2, "freeze": True}
QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 340, "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
         "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False, "bos_token_id": 330,
         "eos_token_id": 332, "torch_dtype": "bfloat16"}
CLIPS = {
    "zh_aishell": ["audio/zh/aishell1_BAC009S0724W0121.flac"],
    "en_librispeech": ["audio/en/librispeech_1089-134686-0000.flac"],
    "ja_picovoice": ["audio/ja/picovoice_leopard_test_ja.flac"],
    "en_short": ["audio/en/ljspeech_LJ001-0002.flac"],
    "joined_29s": ["audio/zh/aishell1_BAC009S0724W0121.flac", "audio/en/ljspeech_LJ001-0002.flac",
                   "audio/en/librispeech_1089-134686-0000.flac"],
}
OPTIONS = [  # (language, itn, hotwords): funasr's defaults first (no language, itn on)
    (None, True, []), ("英文", False, []), ("中文", True, ["阿里巴巴", "omnid"]),
]
SEED = 20261207
END_SCALE = float(os.environ.get("END_SCALE", 2.2))  # the end rows' length (3.2 in the Qwen3-ASR goldens: here too short)
NORM_SCALE = float(os.environ.get("NORM_SCALE", 4.0))
MAX_LENGTH = 48  # each decode's budget (funasr's max_length; 512 by default)


def config_yaml(qwen: str) -> str:
    """The release's keys, the LLM folder named relative to the checkpoint (funasr is given its absolute path)."""
    conf = {"model": "FunASRNano", "model_conf": {"lsm_weight": 0.1, "length_normalized_loss": True},
            "audio_encoder": "SenseVoiceEncoderSmall", "audio_encoder_conf": ENCODER,
            "audio_adaptor": "Transformer", "audio_adaptor_conf": ADAPTOR,
            "llm": "Qwen3-0.6b", "llm_conf": {"init_param_path": str(qwen), "freeze": True, "llm_dtype": "bf16"},
            "tokenizer": "HuggingfaceTokenizer", "tokenizer_conf": {"init_param_path": str(qwen)},
            "frontend": "WavFrontend", "frontend_conf": {"fs": 16000, "window": "hamming", "n_mels": 80,
                                                          "frame_length": 25, "frame_shift": 10, "lfr_m": 7,
                                                          "lfr_n": 6}}
    import yaml

    return yaml.safe_dump(conf, sort_keys=False, allow_unicode=True)


def write_folder(folder: pathlib.Path) -> None:
    qwen = folder / "Qwen3-0.6B"
    qwen.mkdir(parents=True)
    (qwen / "config.json").write_text(json.dumps(QWEN3, indent=2) + "\n")
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(QWEN_TOKENIZER / name, qwen / name)
    (folder / "config.yaml").write_text(config_yaml(qwen.name))


def build_weights(folder: pathlib.Path) -> None:
    """funasr's FunASRNano from the folder's config (random init), our weights in bfloat16, saved as model.pt."""
    import funasr  # noqa: F401  (registers the classes)
    import yaml
    from funasr.register import tables

    conf = yaml.safe_load((folder / "config.yaml").read_text())
    conf["llm_conf"] |= absolute(folder)["llm_conf"]
    model = tables.model_classes["FunASRNano"](input_size=560, **{k: v for k, v in conf.items() if k != "model"})
    randomise(model, SEED)
    # Shaped as the Qwen3-ASR goldens' LLM is, so that greedy decoding varies and ends on its own.
    shape_qwen3_lm(model.llm, (QWEN3["bos_token_id"], QWEN3["eos_token_id"]), END_SCALE, NORM_SCALE)
    assert model.llm.lm_head.weight.data_ptr() == model.llm.model.embed_tokens.weight.data_ptr()  # tied
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    torch.save({"state_dict": state}, folder / "model.pt")


def absolute(folder: pathlib.Path) -> dict[str, dict[str, str]]:
    """The LLM folder's absolute path where funasr reads it (a relative one would be looked up on a model hub)."""
    qwen = str((folder / "Qwen3-0.6B").resolve())
    return {"llm_conf": {"init_param_path": qwen}, "tokenizer_conf": {"init_param_path": qwen}}


def main() -> None:
    from funasr import AutoModel

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "Fun-ASR-Nano"
        write_folder(folder)
        build_weights(folder)
        automodel = AutoModel(model=str(folder), disable_update=True, device="cpu", frontend_conf={"dither": 0.0},
                              disable_log=True, **absolute(folder))
        nano = automodel.model
        captured: dict[str, object] = {}
        generate = nano.llm.generate

        def recorded(*args, **kwargs):  # type: ignore[no-untyped-def]
            captured["inputs_embeds"] = kwargs["inputs_embeds"][0].float().numpy()
            out = generate(*args, **kwargs, output_scores=True, return_dict_in_generate=True)
            captured["ids"] = out.sequences[0].tolist()
            # each step's margin between the best and the second-best logit: where it is small, another
            # implementation's float32 rounding may pick the other token (a near tie, not a mistake)
            top2 = [torch.topk(s[0].float(), 2).values for s in out.scores]
            captured["margins"] = [round(float(t[0] - t[1]), 6) for t in top2]
            return out.sequences

        nano.llm.generate = recorded
        adaptor_fwd = nano.audio_adaptor.forward

        def adaptor(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = adaptor_fwd(*args, **kwargs)
            captured["adaptor"] = out[0][0].float().numpy()
            return out

        nano.audio_adaptor.forward = adaptor
        prepare = nano.inference_prepare

        def prepared(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = prepare(*args, **kwargs)
            ids = out[3]
            captured["prompt_ids"] = [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)[0]]
            return out

        nano.inference_prepare = prepared
        cases: dict[str, dict] = {}
        arrays: dict[str, np.ndarray] = {}
        for clip, paths in CLIPS.items():
            audio = np.concatenate([decode_audio(CORPUS / p) for p in paths])
            runs = {}
            for language, itn, hotwords in OPTIONS:
                res = automodel.generate(input=torch.from_numpy(audio), language=language, itn=itn,
                                         hotwords=hotwords, max_length=MAX_LENGTH, disable_pbar=True)
                key = f"{language or 'none'}/{int(itn)}/{','.join(hotwords)}"
                runs[key] = {"prompt_ids": captured["prompt_ids"], "ids": captured["ids"], "text": res[0]["text"],
                             "margins": captured["margins"], "prompt_rows": int(captured["inputs_embeds"].shape[0])}
                if (language, itn, hotwords) == OPTIONS[0]:
                    a = captured["adaptor"]
                    arrays[f"{clip}/adaptor_first"], arrays[f"{clip}/adaptor_last"] = a[:4], a[-4:]
                    arrays[f"{clip}/adaptor_sum"] = np.array(a.astype(np.float64).sum())
                print(clip, key, len(captured["ids"]), repr(res[0]["text"][:80]))
            cases[clip] = {"paths": paths, "samples": len(audio), "runs": runs}
        pack(folder, OUT / "Fun-ASR-Nano.tar.xz", "Fun-ASR-Nano")
    np.savez_compressed(OUT / "goldens.npz", **arrays)
    meta = {"funasr": __import__("funasr").__version__, "torch": torch.__version__,
            "transformers": __import__("transformers").__version__, "encoder": ENCODER, "adaptor": ADAPTOR,
            "qwen3": QWEN3, "max_length": MAX_LENGTH, "cases": cases}
    text = json.dumps(meta, ensure_ascii=False, indent=1)
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]",
                  text)
    (OUT / "goldens.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
