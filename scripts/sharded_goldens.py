"""Writes tests/goldens/sharded/: tiny transformers checkpoints saved in shards (``model.safetensors.index.json``
and ``model-0000K-of-0000N.safetensors``), each by the library that writes that layout, beside a single-file
copy of the same checkpoint that omnid already loads (tests/test_sharded.py loads both through the production
loaders):

* ``whisper/`` and ``whisper_sharded/``: a random tiny ``WhisperForConditionalGeneration`` (seeded, float16,
  tokenizer-less: omnid takes the shipped GPT-2 ranks for its vocab_size 51864), saved by transformers'
  ``save_pretrained`` once whole and once with ``max_shard_size``;
* ``parakeet_tdt/``: tests/goldens/parakeet_tiny/hf_tdt loaded with ``ParakeetForTDT.from_pretrained`` and saved
  again by ``save_pretrained(max_shard_size=...)``, its tokenizer and processor files copied;
* ``qwen3_asr_hf/``: the transformers (-hf) layout of tests/goldens/qwen3_asr_tiny (tests/qwen_goldens.py's
  ``write_hf``, run in the project's virtualenv) loaded with ``Qwen3ASRForConditionalGeneration.from_pretrained``
  and saved by ``save_pretrained(max_shard_size=...)``;
* ``qwen3_asr/`` and ``qwen3_aligner/``: the original layout (``thinker.*``), as the official Qwen3-ASR release
  ships it in shards. transformers has no class for that layout (its Qwen3-ASR classes read the -hf one), so the
  tensors of tests/goldens/qwen3_asr_tiny/model.safetensors and qwen3_aligner_tiny/model.safetensors are split by
  ``huggingface_hub.split_torch_state_dict_into_shards`` and written by ``safetensors.torch.save_file``, with the
  index as transformers' ``save_pretrained`` writes it (the same two calls it makes); config and tokenizer files
  copied.

Not run by CI. In a throwaway virtualenv (torch 2.13.0 CPU, transformers 5.25.0, safetensors, huggingface_hub):

    python3 -m venv /tmp/shard-venv
    /tmp/shard-venv/bin/pip install torch==2.13.0 transformers==5.25.0 safetensors
    /tmp/shard-venv/bin/python scripts/sharded_goldens.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "sharded"
SHARD = "200KB"  # small enough that every tiny checkpoint splits into several shards


def whisper() -> None:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(vocab_size=51864, num_mel_bins=80, d_model=4, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=1, decoder_attention_heads=1, encoder_ffn_dim=16,
                           decoder_ffn_dim=16, max_source_positions=1500, max_target_positions=448,
                           decoder_start_token_id=50257, pad_token_id=50256, bos_token_id=50257,
                           eos_token_id=50256)
    model = WhisperForConditionalGeneration(config).half().eval()
    with torch.no_grad():  # transformers initialises every bias to zero: give them values, so a mix-up shows
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.02)
    model.save_pretrained(OUT / "whisper")
    model.save_pretrained(OUT / "whisper_sharded", max_shard_size=SHARD)


def parakeet() -> None:
    from transformers import ParakeetForTDT

    source = GOLDENS / "parakeet_tiny" / "hf_tdt"
    model = ParakeetForTDT.from_pretrained(source).eval()
    model.save_pretrained(OUT / "parakeet_tdt", max_shard_size=SHARD)
    for name in ("tokenizer.json", "tokenizer_config.json", "processor_config.json"):
        shutil.copy(source / name, OUT / "parakeet_tdt" / name)


def qwen3_hf() -> None:
    from transformers import Qwen3ASRForConditionalGeneration

    with tempfile.TemporaryDirectory() as tmp:
        single = Path(tmp) / "hf"
        subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-c",
                        f"from pathlib import Path; from tests.qwen_goldens import write_hf; write_hf(Path({str(single)!r}))"],
                       cwd=ROOT, check=True)
        config = json.loads((single / "config.json").read_text())  # the sub-configs as transformers names them
        config["audio_config"]["model_type"], config["text_config"]["model_type"] = "qwen3_asr_encoder", "qwen3"
        (single / "config.json").write_text(json.dumps(config))
        model = Qwen3ASRForConditionalGeneration.from_pretrained(single).eval()
        model.save_pretrained(OUT / "qwen3_asr_hf", max_shard_size=SHARD)
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "preprocessor_config.json"):
            shutil.copy(single / name, OUT / "qwen3_asr_hf" / name)


def original_layout(source: Path, dest: Path) -> None:
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import load_file, save_file

    state = load_file(source / "model.safetensors")
    split = split_torch_state_dict_into_shards(state, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size=SHARD)
    dest.mkdir(parents=True, exist_ok=True)
    for filename, names in split.filename_to_tensors.items():
        save_file({name: state[name].contiguous() for name in names}, dest / filename, metadata={"format": "pt"})
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
             "weight_map": split.tensor_to_filename}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    for path in source.iterdir():
        if path.suffix != ".safetensors" and not path.name.startswith("goldens"):
            shutil.copy(path, dest / path.name)


def main() -> None:
    only = set(sys.argv[1:])
    OUT.mkdir(parents=True, exist_ok=True)
    for name, write in (("whisper", whisper), ("parakeet", parakeet), ("qwen3_hf", qwen3_hf)):
        if not only or name in only:
            write()
    if not only or "original" in only:
        original_layout(GOLDENS / "qwen3_asr_tiny", OUT / "qwen3_asr")
        original_layout(GOLDENS / "qwen3_aligner_tiny", OUT / "qwen3_aligner")
    for folder in sorted(OUT.iterdir()):
        files = sorted(p.name for p in folder.iterdir())
        size = sum(p.stat().st_size for p in folder.iterdir())
        print(f"{folder.name}: {size} bytes, {files}", file=sys.stderr)


if __name__ == "__main__":
    main()
