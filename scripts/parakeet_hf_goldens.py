"""Writes tests/goldens/parakeet_tiny/hf_{tdt,rnnt,ctc}/: the tiny NeMo checkpoints of parakeet_goldens.py in the
Hugging Face transformers layout (``ParakeetForTDT``, ``ParakeetForRNNT``, ``ParakeetForCTC``: ``config.json``,
``model.safetensors``, ``tokenizer.json``, the processor's files), the layout the reference's Python server reads,
built and run with transformers' own classes; and ``hf_goldens.json``: transformers' greedy ids on the same clips,
beside NeMo's (parakeet_goldens.py's ``goldens.json``).

Not run by CI. In the throwaway NeMo virtualenv of parakeet_goldens.py, with transformers 5.25.0 (its Parakeet
classes) and tokenizers:

    /tmp/nemo/bin/pip install transformers==5.25.0
    /tmp/nemo/bin/python scripts/parakeet_hf_goldens.py         # after parakeet_goldens.py

The weights are the .nemo's, renamed as transformers' own converter (models/parakeet/convert_nemo_to_hf.py) names
them; the CTC model is the hybrid's encoder with its CTC head. The tokenizer is transformers' ``ParakeetConverter``
of the .nemo's SentencePiece model; the feature extractor gets the .nemo's preprocessor values.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parakeet_goldens import OUT, clip_names, read  # noqa: E402

# transformers' TDT generate has no per-frame symbol limit: where NeMo's max_symbols moves on, it stays on the frame
# and emits until this cap (which counts blank steps too).
MAX_NEW_TOKENS = 2048
RENAMES = [  # NeMo -> transformers, applied in order
    (r"encoder\.pre_encode\.conv\.", "encoder.subsampling.layers."),
    (r"encoder\.pre_encode\.out\.", "encoder.subsampling.linear."),
    (r"\.conv\.batch_norm\.", ".conv.norm."),
    (r"\.linear_([kvq])\.", r".\1_proj."),
    (r"\.linear_out\.", ".o_proj."),
    (r"\.linear_pos\.", ".relative_k_proj."),
    (r"\.pos_bias_([uv])$", r".bias_\1"),
    (r"^(ctc_decoder|decoder)\.decoder_layers\.0\.", "ctc_head."),
    (r"^decoder\.prediction\.embed\.", "decoder.embedding."),
    (r"^decoder\.prediction\.dec_rnn\.lstm\.", "decoder.lstm."),
    (r"^joint\.enc\.", "encoder_projector."),
    (r"^joint\.pred\.", "decoder.decoder_projector."),
    (r"^joint\.joint_net\.2\.", "joint.head."),
]


def rename(name: str) -> str:
    for pattern, replacement in RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


def encoder_config(enc: dict):
    from transformers import ParakeetEncoderConfig

    return ParakeetEncoderConfig(
        hidden_size=enc["d_model"], num_hidden_layers=enc["n_layers"], num_attention_heads=enc["n_heads"],
        intermediate_size=enc["d_model"] * enc["ff_expansion_factor"], num_mel_bins=enc["feat_in"],
        conv_kernel_size=enc["conv_kernel_size"], subsampling_factor=enc["subsampling_factor"],
        subsampling_conv_channels=enc["subsampling_conv_channels"], max_position_embeddings=enc["pos_emb_max_len"],
        scale_input=enc["xscaling"], attention_bias=enc["use_bias"], convolution_bias=enc["use_bias"],
        layerdrop=0.0)


def convert(nemo_path: Path, kind: str, out: Path):
    from nemo.collections.asr.models import ASRModel
    from omegaconf import OmegaConf
    from transformers import (
        ParakeetCTCConfig,
        ParakeetFeatureExtractor,
        ParakeetForCTC,
        ParakeetForRNNT,
        ParakeetForTDT,
        ParakeetProcessor,
        ParakeetRNNTConfig,
        ParakeetTDTConfig,
        ParakeetTokenizer,
    )
    from transformers.convert_slow_tokenizer import ParakeetConverter

    nemo = ASRModel.restore_from(str(nemo_path), map_location="cpu").eval()
    cfg = OmegaConf.to_container(nemo.cfg, resolve=True)
    enc = encoder_config(cfg["encoder"])
    vocab = nemo.tokenizer.tokenizer.get_piece_size()
    if kind == "ctc":
        config = ParakeetCTCConfig(vocab_size=vocab + 1, pad_token_id=vocab, encoder_config=enc.to_dict())
        model = ParakeetForCTC(config)
    else:
        common = dict(vocab_size=vocab + 1, blank_token_id=vocab, pad_token_id=vocab,
                      decoder_hidden_size=cfg["decoder"]["prednet"]["pred_hidden"],
                      num_decoder_layers=cfg["decoder"]["prednet"]["pred_rnn_layers"], hidden_act="relu",
                      max_symbols_per_step=cfg["decoding"]["greedy"]["max_symbols"], encoder_config=enc.to_dict())
        if kind == "tdt":
            config = ParakeetTDTConfig(durations=list(cfg["decoding"]["durations"]), **common)
            model = ParakeetForTDT(config)
        else:
            config = ParakeetRNNTConfig(**common)
            model = ParakeetForRNNT(config)
    state = {}
    for name, t in nemo.state_dict().items():
        if name.startswith("preprocessor.") or name.endswith("num_batches_tracked"):
            continue
        if kind == "ctc" and not (name.startswith("encoder.") or name.startswith("ctc_decoder.")):
            continue
        state[rename(name)] = t
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("num_batches_tracked")]
    assert not missing and not unexpected, (missing, unexpected)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)

    with tempfile.TemporaryDirectory() as tmp:
        sp = Path(tmp) / "tokenizer.model"
        sp.write_bytes(nemo.tokenizer.tokenizer.serialized_model_proto())
        tokenizer = ParakeetTokenizer(tokenizer_object=ParakeetConverter(str(sp)).converted(),
                                      clean_up_tokenization_spaces=False)
    from tokenizers import AddedToken

    if kind in ("tdt", "rnnt"):  # the blank on the joint's last token logit, as transformers' converter puts it
        tokenizer.add_tokens([AddedToken("<blank>", normalized=False, special=True)])
        assert tokenizer.convert_tokens_to_ids("<blank>") == vocab
    pre = cfg["preprocessor"]
    rate = pre["sample_rate"]
    features = ParakeetFeatureExtractor(feature_size=pre["features"], sampling_rate=rate, n_fft=pre["n_fft"],
                                        win_length=int(pre["window_size"] * rate),
                                        hop_length=int(pre["window_stride"] * rate), preemphasis=0.97)
    ParakeetProcessor(feature_extractor=features, tokenizer=tokenizer, decoder_type=kind).save_pretrained(out)
    return nemo, model, features, vocab


def greedy(kind: str, model, features, vocab: int, clip: np.ndarray) -> list[int]:
    inputs = features(clip, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        if kind == "ctc":
            logits = model(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"]).logits
            best = logits[0].argmax(-1).tolist()
            return [b for i, b in enumerate(best) if b != vocab and (i == 0 or b != best[i - 1])]
        out = model.generate(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"],
                             decoder_start_token_id=vocab, max_new_tokens=MAX_NEW_TOKENS)
    return [int(t) for t in out.sequences[0].tolist() if t < vocab]


def main() -> None:
    names = clip_names()
    audio = {name: np.concatenate([read(n) for n in files]) for name, files in names.items()}
    nemo_goldens = json.loads((OUT / "goldens.json").read_text())["models"]
    record: dict = {}
    for kind, source in (("tdt", "tdt"), ("rnnt", "rnnt"), ("ctc", "hybrid")):
        out = OUT / f"hf_{kind}"
        nemo, model, features, vocab = convert(OUT / f"{source}.nemo", kind, out)
        record[kind] = {}
        for name, clip in audio.items():
            ids = greedy(kind, model, features, vocab, clip)
            golden = nemo_goldens[source][name]
            want = golden["ctc"]["ids"] if kind == "ctc" else golden["ids"]
            record[kind][name] = {"ids": ids, "nemo_agrees": ids == want}
            print(kind, name, "transformers == NeMo" if ids == want else
                  f"differ: {len(ids)} vs {len(want)} ids, first at "
                  f"{next((i for i, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))}",
                  flush=True)
        (out / "generation_config.json").unlink(missing_ok=True)  # transformers' defaults; nothing omnid reads
    (OUT / "hf_goldens.json").write_text(json.dumps(record, separators=(",", ":")) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    sys.exit(main())
