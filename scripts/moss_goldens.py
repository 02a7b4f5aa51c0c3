"""Builds the tiny random MOSS-Transcribe-Diarize checkpoint and its goldens with the OFFICIAL implementation
(transformers 5.23's MossTranscribeDiarizeForConditionalGeneration, feature extractor and processor).

Run once on a developer machine, never in CI, in a throwaway virtualenv outside the project:

    python3 -m venv /tmp/cohere-ref && /tmp/cohere-ref/bin/pip install torch==2.13.0 && \\
        /tmp/cohere-ref/bin/pip install transformers==5.23.0 safetensors numpy av soxr structlog msgspec
    /tmp/cohere-ref/bin/python scripts/moss_goldens.py

It writes tests/goldens/moss_tiny/: the checkpoint in the HF conversion's layout (config.json with audio_config and
text_config, model.safetensors (float16-valued weights stored as float16) under ``model.audio_tower.*``, ``model.multi_modal_projector.*``,
``model.language_model.*`` and ``lm_head.weight``; a small byte-level BPE tokenizer in the Qwen2 file layout with
MOSS's added tokens; its generation config), and goldens.npz + goldens.json for four clips (two voices taking
turns; one over the encoder's 30 s window): the first frames of each log-mel window and of its encoder output, the
projected audio rows (the first and last 8, and their sum), prompt ids, the prefill logits of the last positions,
greedy ids, the decoded text and its parsed segments.

The shaping (a random model loops forever): the decoder's layers add almost nothing to the residual stream (their
output projections scaled down), so each position's state is its own token's embedding plus a little of the
attention over the prompt (the audio reaches the logits, as the prefill goldens show); the untied head maps each
token of a fixed transcript to the next one by a wide margin, so greedy decoding writes speaker tags, times and
words, then ``<|im_end|>``. The chat template is the checkpoint's text, as transformers' processor test expects it.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from golden_weights import randomise  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (  # noqa: E402
    GenerationConfig,
    MossTranscribeDiarizeConfig,
    MossTranscribeDiarizeFeatureExtractor,
    MossTranscribeDiarizeForConditionalGeneration,
    MossTranscribeDiarizeProcessor,
    Qwen2Tokenizer,
)

from omnid.audio import decode_audio  # noqa: E402  (the same 16 kHz samples the tests decode)
from tests.qwen_vocab import byte_unicode, small_bpe  # noqa: E402

OUT = ROOT / "tests/goldens/moss_tiny"
CORPUS = ROOT / "tests/corpus/audio/en"
SEED = 20261207
EVERY = 5  # the released processor's time_marker_every_seconds
EDGE = 8  # projected rows kept at each end (with the sum of all)
KEEP = 8  # mel frames of each window kept in the goldens (and half as many encoder frames): the projected rows,
# summed whole, carry every encoder frame the model uses (tests/goldens/ stays under 32 MiB)

# The transcript greedy decoding writes: each piece one entry of the small vocabulary (entries the encoder never
# produces from text, as Qwen's pre-tokenizer splits digits and brackets, but which decode to these strings).
SCRIPT = ["[0.48]", "[S01]", " printing art", "[1.66]", "[1.90]", "[S02]", " the modern", "[3.20]"]
WORDS = ["system", "user", "assistant", " You", " are", " a", " helpful"]
# Qwen's added tokens in their real order, MOSS's audio tokens last (ids must leave no gaps).
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>"]
# The checkpoint's chat template as it renders (newlines as Jinja string literals: a "{%-" tag would strip them).
TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first and message['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- set ns = namespace(prompt='', keywords='') -%}"
    "{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'audio' -%}{{ '<|audio_start|><|audio_pad|><|audio_end|>\\n' }}"
    "{%- elif item['type'] == 'text' -%}{%- set ns.prompt = item['text'] -%}"
    "{%- elif item['type'] == 'keywords' -%}{%- set ns.keywords = item['keywords'] | join(', ') -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if ns.prompt -%}{{ '补充信息：' + ns.prompt + '\\n\\n' }}{%- endif -%}"
    "{%- if ns.keywords -%}{{ '热词列表：[' + ns.keywords + ']\\n\\n' }}{%- endif -%}"
    "{{ '请将音频转写为文本，每一段需以起始时间戳和说话人编号（[S01]、[S02]、[S03]…）开头，正文为对应的语音内容，"
    "并在段末标注结束时间戳，以清晰标明该段语音范围。<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def write_tokenizer(out: pathlib.Path) -> tuple[dict[str, int], list[int]]:
    b2u = byte_unicode()
    vocab, merges = small_bpe(WORDS)
    script = [vocab.setdefault("".join(b2u[b] for b in piece.encode()), len(vocab)) for piece in SCRIPT]
    newline = vocab[b2u[ord("\n")]]
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    first = len(vocab)
    ids = {tok: first + i for i, tok in enumerate(ADDED)}
    decoder = {str(i): {"content": tok, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for tok, i in ids.items()}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": decoder, "errors": "replace", "bos_token": None,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "clean_up_tokenization_spaces": False, "split_special_tokens": False, "model_max_length": 131072,
        "chat_template": TEMPLATE}, indent=2, ensure_ascii=False))
    return ids, [newline, *script, ids["<|im_end|>"]]


def build_model(ids: dict[str, int], vocab_size: int, chain: list[int]) -> MossTranscribeDiarizeForConditionalGeneration:
    cfg = MossTranscribeDiarizeConfig(
        audio_config=dict(num_mel_bins=80, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                          hidden_size=16, max_source_positions=1500),
        text_config=dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-6,
                         max_position_embeddings=8192, rope_parameters={"rope_theta": 1e6, "rope_type": "default"},
                         tie_word_embeddings=False),
        audio_token_id=ids["<|audio_pad|>"], tie_word_embeddings=False)
    model = MossTranscribeDiarizeForConditionalGeneration(cfg).eval()
    randomise(model, SEED, ("norm", "layer_norm"))
    lm = model.model.language_model
    with torch.no_grad():
        for layer in lm.layers:
            layer.self_attn.o_proj.weight.mul_(0.005)
            layer.mlp.down_proj.weight.mul_(0.005)
        lm.norm.weight.fill_(1.0)
        emb = lm.embed_tokens.weight
        head = model.lm_head.weight
        head.mul_(0.1)
        assert len(set(chain)) == len(chain), "each token of the transcript once"
        for here, then in zip(chain, chain[1:]):
            e = emb[here]
            head[then] += 24.0 * e / e.pow(2).mean().sqrt() / e.numel()
        for p in model.parameters():  # float16 values, stored as float16 (a small file), computed in float32
            p.copy_(p.half().float())
    return model


def clips() -> dict[str, np.ndarray]:
    def clip(name: str) -> np.ndarray:
        return decode_audio((CORPUS / f"{name}.flac").read_bytes())

    lj, mi = clip("ljspeech_LJ001-0002"), clip("mfa_cold_corpus")
    gap = np.zeros(8000, np.float32)
    return {
        "short": lj,                                                          # 1.9 s, one speaker
        "turns": np.concatenate([lj, gap, mi[: 3 * 16000]]),                  # two speakers, 5.4 s
        "long": np.concatenate([clip("ljspeech_LJ001-0001"), gap, mi[: 16 * 16000], gap,
                                clip("ljspeech_LJ001-0003")]),                # 36 s: two encoder windows
        "exact": np.concatenate([mi[: 20 * 16000], gap, lj])[: 480000 * 1],   # 22.4 s
    }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    ids, chain = write_tokenizer(OUT)
    tokenizer = Qwen2Tokenizer.from_pretrained(OUT)
    vocab_size = max(ids.values()) + 1
    model = build_model(ids, vocab_size, chain)
    extractor = MossTranscribeDiarizeFeatureExtractor()
    processor = MossTranscribeDiarizeProcessor(extractor, tokenizer, chat_template=TEMPLATE,
                                               time_marker_every_seconds=EVERY)
    processor.save_pretrained(OUT)
    for unread in ("chat_template.jinja", "processor_config.json"):  # omnid reads neither (the template is above)
        (OUT / unread).unlink(missing_ok=True)
    generation = GenerationConfig(eos_token_id=[ids["<|endoftext|>"], ids["<|im_end|>"]], pad_token_id=ids["<|endoftext|>"],
                                  do_sample=False, max_new_tokens=64)
    generation.save_pretrained(OUT)
    state = {k: v.detach().half().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(OUT / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(OUT)
    arrays: dict[str, np.ndarray] = {}
    cases = {}
    for name, audio in clips().items():
        for prompt, keywords in ((None, None), ("printing", ["art", "modern"])) if name == "turns" else ((None, None),):
            key = name if prompt is None else f"{name}_prompted"
            inputs = processor.apply_transcription_request(audio, prompt=prompt, keywords=keywords,
                                                           return_tensors="pt", sampling_rate=16000)
            with torch.no_grad():
                features = inputs["input_features"]
                encoded = model.model.audio_tower(features).last_hidden_state
                rows = model.model.get_audio_features(inputs["input_features"], inputs["input_features_mask"],
                                                      inputs["padding_mask"]).pooler_output
                out = model(**{k: v for k, v in inputs.items() if k != "num_audio_tokens"})
                generated = model.generate(**{k: v for k, v in inputs.items() if k != "num_audio_tokens"},
                                           max_new_tokens=64, do_sample=False, generation_config=generation)
            prompt_ids = inputs["input_ids"][0].tolist()
            new = generated[0, len(prompt_ids):].tolist()
            text = processor.decode(new, skip_special_tokens=True)
            parsed = processor.extract_speaker_dict(text)
            # The first KEEP frames of each window (the rest are checked through the projected rows).
            arrays[f"{key}/mel"] = features.numpy().transpose(0, 2, 1)[:, :KEEP]  # (windows, KEEP, 80)
            arrays[f"{key}/encoded"] = encoded.numpy()[:, : KEEP // 2]
            # The projected rows: the first and last EDGE, and the sum over all of them (each column).
            arrays[f"{key}/rows"] = np.concatenate([rows.numpy()[:EDGE], rows.numpy()[-EDGE:]])
            arrays[f"{key}/rows_sum"] = rows.numpy().sum(axis=0)
            arrays[f"{key}/logits"] = out.logits[0, -4:].numpy()
            cases[key] = {"audio": name, "samples": len(audio), "prompt": prompt, "keywords": keywords,
                          "valid": inputs["input_features_mask"].sum(-1).tolist(), "prompt_ids": prompt_ids,
                          "generated": new, "text": text, "parsed": parsed}
            print(key, len(audio) / 16000, "s:", len(prompt_ids), "prompt ids,", repr(text))
    np.savez_compressed(OUT / "goldens.npz", **arrays)
    (OUT / "goldens.json").write_text(json.dumps({"seed": SEED, "cases": cases}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
