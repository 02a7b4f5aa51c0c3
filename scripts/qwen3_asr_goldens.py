"""Builds the tiny random Qwen3-ASR checkpoint and its goldens with the OFFICIAL implementation (qwen-asr 0.0.6).

Run once on a developer machine, never in CI, in a throwaway virtualenv outside the project:

    python3 -m venv /tmp/qref && /tmp/qref/bin/pip install torch==2.13.0 transformers==4.57.6 accelerate==1.12.0 \
        safetensors numpy av soxr structlog msgspec && /tmp/qref/bin/pip install --no-deps qwen-asr==0.0.6
    /tmp/qref/bin/python scripts/qwen3_asr_goldens.py

It writes tests/goldens/qwen3_asr_tiny/: a checkpoint in the original Qwen layout (`thinker.*` keys, the tied
lm_head stored as its own copy, config.json with thinker_config, generation and preprocessor configs), a small
byte-level BPE tokenizer in the Qwen2 file layout (vocab.json, merges.txt, tokenizer_config.json with the added
tokens), and goldens.npz + goldens.json: for clips from the corpus under 1 s, between 1 and 8 s and over 8 s (two
encoder attention windows), with detected and forced language and a context prompt: log-mel, audio token count,
conv output, encoder output, prompt ids, prefill logits of the last positions, every step's top1-top2 margin, greedy
ids and text, and the official streaming recipe's ids step by step.

The official transformers backend does not window the encoder's attention on CPU (QwenLM/Qwen3-ASR issue #213):
the layer forward is patched below so that the goldens are the model as trained; the unpatched output of the long
clip is kept too, to show that the difference is real.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import sys
import types

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
from golden_weights import randomise, shape_qwen3_lm  # noqa: E402

spec = importlib.util.find_spec("qwen_asr")  # import the backend without qwen_asr/__init__.py (gradio, nagisa, ...)
assert spec is not None and spec.submodule_search_locations is not None
stub = types.ModuleType("qwen_asr")
stub.__path__ = list(spec.submodule_search_locations)
sys.modules["qwen_asr"] = stub

import qwen_asr.core.transformers_backend.modeling_qwen3_asr as M  # noqa: E402
from qwen_asr.core.transformers_backend import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import GenerationConfig, Qwen2Tokenizer, Qwen2TokenizerFast, WhisperFeatureExtractor  # noqa: E402

for _name in ("librosa", "soundfile"):  # inference/utils.py imports them for audio IO, which is not used here
    sys.modules.setdefault(_name, types.ModuleType(_name))
import qwen_asr.inference.utils as U  # noqa: E402
from qwen_asr.inference.utils import SUPPORTED_LANGUAGES, parse_asr_output  # noqa: E402


def parse_unfixed(raw: str, user_language: str | None) -> tuple[str, str]:
    """parse_asr_output without its silent repetition collapsing (omnid stops loops in the decoder instead)."""
    fix = U.detect_and_fix_repetitions
    U.detect_and_fix_repetitions = lambda text, threshold=20: text
    try:
        return parse_asr_output(raw, user_language=user_language)
    finally:
        U.detect_and_fix_repetitions = fix

from omnid.audio import decode_audio  # noqa: E402  (the same 16 kHz samples the tests decode)
from tests.qwen_vocab import small_bpe, write_tokenizer_config  # noqa: E402

OUT = ROOT / "tests/goldens/qwen3_asr_tiny"
# The goldens were made from the full evaluation corpus (its clip order and transcripts matter), not tests/corpus.
CORPUS = pathlib.Path(os.environ.get("OMNID_CORPUS") or sys.exit("set OMNID_CORPUS to the corpus the goldens were made from"))
SEED = 20261203

# --- tokenizer: Qwen2's file layout, a small vocabulary -----------------------------------------------------------


WORDS = ["system", "user", "assistant", "language", " English", " Chinese", " None", " the", " and", " of",
         " to", " in", " printing", " art", "ing", " which", " that", " was", " is"]
# Added tokens in the real order, with reserved names where the real ones sit between (ids must leave no gaps).
ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|audio_start|>", "<|audio_end|>",
         "<|box_start|>", "<|audio_pad|>", "<|quad_start|>", "<asr_text>"]


def write_tokenizer(out: pathlib.Path) -> dict[str, int]:
    vocab, merges = small_bpe(WORDS)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (out / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    first = len(vocab)
    ids = {tok: first + i for i, tok in enumerate(ADDED)}
    write_tokenizer_config(out, {i: tok for tok, i in ids.items()})
    return ids


# --- the tiny model -------------------------------------------------------------------------------------------------


def build_model(ids: dict[str, int], vocab_size: int, aligner_classes: int = 0) -> Qwen3ASRForConditionalGeneration:
    """The tiny model; with ``aligner_classes`` the forced aligner's (scripts/qwen3_aligner_goldens.py): the same
    network with a head of that many time classes, untied."""
    head = dict(model_type="qwen3_forced_aligner", classify_num=aligner_classes) if aligner_classes else {}
    cfg = Qwen3ASRConfig(support_languages=list(SUPPORTED_LANGUAGES), thinker_config=dict(
        audio_token_id=ids["<|audio_pad|>"], audio_start_token_id=ids["<|audio_start|>"],
        user_token_id=None, dtype="float32", **head,
        audio_config=dict(num_mel_bins=128, d_model=64, encoder_layers=2, encoder_attention_heads=4,
                          encoder_ffn_dim=128, downsample_hidden_size=8, output_dim=64, n_window=50,
                          n_window_infer=800, conv_chunksize=500, max_source_positions=1500,
                          activation_function="gelu"),
        text_config=dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, hidden_act="silu",
                         rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=4096,
                         tie_word_embeddings=not aligner_classes,
                         rope_scaling={"rope_type": "default", "type": "default", "mrope_section": [8, 4, 4],
                                       "interleaved": True, "mrope_interleaved": True})))
    cfg.architectures = ["Qwen3ASRForConditionalGeneration"]
    model = Qwen3ASRForConditionalGeneration._from_config(cfg, attn_implementation="eager", torch_dtype=torch.float32)
    model.eval()
    randomise(model, SEED, ("norm", "ln_post"))  # every tensor random: no mapping mistake hides behind a 1 or 0
    # Shaping so that greedy decoding ends on its own (errata 3): a plain random model loops forever.
    t = model.thinker
    with torch.no_grad():
        for layer in t.audio_tower.layers:
            layer.self_attn.out_proj.weight.mul_(3.0)
    if aligner_classes:  # no decoding to end: the aligner classifies its slots in one pass
        shape_qwen3_lm(t, (), 1.0, None)
        return model
    shape_qwen3_lm(t, (ids["<|endoftext|>"], ids["<|im_end|>"]), END_SCALE, NORM_SCALE)
    assert t.lm_head.weight.data_ptr() == t.model.embed_tokens.weight.data_ptr()  # tied
    return model


END_SCALE = float(os.environ.get("END_SCALE", 3.2))
NORM_SCALE = float(os.environ.get("NORM_SCALE", 4.0))

# --- windowed encoder attention as trained (issue #213) --------------------------------------------------------------

_orig_layer_forward = M.Qwen3ASRAudioEncoderLayer.forward
WINDOWED = True


def _windowed(self, hidden_states, cu_seqlens, attention_mask=None, **kw):
    if attention_mask is None and WINDOWED:
        n = hidden_states.shape[0]
        attention_mask = torch.full((1, 1, n, n), torch.finfo(hidden_states.dtype).min, dtype=hidden_states.dtype)
        for a, b in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist()):
            attention_mask[..., a:b, a:b] = 0
    return _orig_layer_forward(self, hidden_states, cu_seqlens, attention_mask=attention_mask, **kw)


M.Qwen3ASRAudioEncoderLayer.forward = _windowed

# --- clips and cases ---------------------------------------------------------------------------------------------------

CLIPS = {  # name: (corpus path, start s, end s)
    "short": ("audio/en/ljspeech_LJ001-0002.wav", 0.20, 0.90),   # 70 frames: one chunk, not padded
    "mid": ("audio/en/ljspeech_LJ001-0003.wav", 0.50, 2.80),     # 230 frames: a padded tail chunk
    "long": ("audio/en/ljspeech_LJ001-0001.wav", 0.00, 8.90),    # 890 frames, 116 tokens: two attention windows
}
CASES = [  # name, clip, forced language, context, max_new_tokens
    ("short_auto", "short", None, "", 64),
    ("short_en", "short", "English", "", 64),
    ("mid_auto", "mid", None, "", 64),
    ("mid_en", "mid", "English", "", 64),
    ("mid_context", "mid", None, "printing and the art", 64),
    ("long_auto", "long", None, "", 64),
    ("long_en", "long", "English", "", 64),
    ("long_budget", "long", None, "", 5),  # runs into its token budget on purpose
]
STREAMS = [("mid_auto", "mid", None), ("long_auto", "long", None), ("long_en", "long", "English")]
LOGIT_ROWS = 12  # prefill logits kept for the last positions (all positions' argmax and margin are kept)


def clip_audio(name: str) -> np.ndarray:
    path, a, b = CLIPS[name]
    audio = decode_audio(CORPUS / path)
    return audio[int(a * 16000) : int(b * 16000)].astype(np.float32)


def prompt_text(context: str, n_audio: int, language: str | None) -> str:
    text = (f"<|im_start|>system\n{context}<|im_end|>\n<|im_start|>user\n<|audio_start|>"
            + "<|audio_pad|>" * n_audio + "<|audio_end|><|im_end|>\n<|im_start|>assistant\n")
    return text + (f"language {language}<asr_text>" if language else "")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer(OUT)
    # The fast tokenizer is what the official processor decodes with; the slow, pure-Python one (independent of the
    # `tokenizers` library) must encode every prompt alike.
    tok = Qwen2TokenizerFast.from_pretrained(str(OUT))
    slow = Qwen2Tokenizer.from_pretrained(str(OUT))
    assert tok.convert_tokens_to_ids("<asr_text>") == ids["<asr_text>"] == slow.convert_tokens_to_ids("<asr_text>")
    vocab_size = max(ids.values()) + 1
    model = build_model(ids, vocab_size)
    eos = [ids["<|im_end|>"], ids["<|endoftext|>"]]

    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    assert "thinker.lm_head.weight" in sd
    save_file(sd, str(OUT / "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    (OUT / "config.json").write_text(json.dumps(config, indent=2))
    GenerationConfig(eos_token_id=eos, pad_token_id=ids["<|endoftext|>"], do_sample=False).save_pretrained(OUT)
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400, chunk_length=30,
                                 padding_value=0.0, return_attention_mask=True)
    fe.save_pretrained(OUT)

    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"ids": ids, "eos": eos, "clips": {}, "cases": {}, "streams": {},
                  "pins": {"qwen-asr": "0.0.6", "transformers": "4.57.6", "torch": torch.__version__}}

    def features(audio: np.ndarray):
        f = fe(audio, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
               return_tensors="pt")
        return f["input_features"], f["attention_mask"]

    def run(audio: np.ndarray, prompt: str, max_new_tokens: int) -> tuple[list[int], list[float], torch.Tensor]:
        feats, fmask = features(audio)
        input_ids = torch.tensor([tok.encode(prompt)])
        with torch.no_grad():
            logits = model.thinker(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                   input_features=feats, feature_attention_mask=fmask).logits[0]
            gen = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                 input_features=feats, feature_attention_mask=fmask, max_new_tokens=max_new_tokens,
                                 do_sample=False, eos_token_id=eos, pad_token_id=eos[1], output_scores=True)
        tokens = gen.sequences[0, input_ids.shape[1]:].tolist()
        margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in gen.scores]
        return tokens, margins, logits

    for name in CLIPS:
        audio = clip_audio(name)
        feats, fmask = features(audio)
        n_frames = int(fmask.sum())
        n_audio = int(M._get_feat_extract_output_lengths(torch.tensor(n_frames)))
        acts = {}
        hook = model.thinker.audio_tower.conv_out.register_forward_hook(lambda m, i, o: acts.__setitem__("c", o))
        with torch.no_grad():
            enc = model.thinker.get_audio_features(feats, feature_attention_mask=fmask)
        hook.remove()
        arrays[f"{name}/mel"] = feats[0, :, :n_frames].numpy()
        arrays[f"{name}/conv_out"] = acts["c"].numpy()
        arrays[f"{name}/encoder_out"] = enc.numpy()
        meta["clips"][name] = {"path": CLIPS[name][0], "start_s": CLIPS[name][1], "end_s": CLIPS[name][2],
                               "samples": len(audio), "frames": n_frames, "n_audio": n_audio,
                               "sum": float(np.float64(audio).sum())}
        if n_audio > 104:
            global WINDOWED
            WINDOWED = False
            with torch.no_grad():
                arrays[f"{name}/encoder_out_unwindowed"] = model.thinker.get_audio_features(
                    feats, feature_attention_mask=fmask).numpy()
            WINDOWED = True
        print(f"{name}: {len(audio)} samples, {n_frames} frames, {n_audio} audio tokens")

    meta["n_audio_formula"] = {n: int(M._get_feat_extract_output_lengths(torch.tensor(n)))
                               for n in (1, 7, 8, 9, 99, 100, 101, 199, 200, 679, 1070)}

    for case, clip, language, context, budget in CASES:
        audio = clip_audio(clip)
        n_audio = meta["clips"][clip]["n_audio"]
        prompt = prompt_text(context, n_audio, language)
        prompt_ids = tok.encode(prompt)
        assert prompt_ids == slow.encode(prompt), case
        tokens, margins, logits = run(audio, prompt, budget)
        raw = tok.decode(tokens, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        lang, text = parse_asr_output(raw, user_language=language)
        top2 = logits.topk(2, dim=-1).values
        arrays[f"{case}/prompt_ids"] = np.array(prompt_ids, np.int32)
        arrays[f"{case}/logits_tail"] = logits[-LOGIT_ROWS:].numpy()
        arrays[f"{case}/argmax"] = logits.argmax(-1).numpy().astype(np.int32)
        arrays[f"{case}/prefill_margin"] = (top2[:, 0] - top2[:, 1]).numpy()
        arrays[f"{case}/greedy"] = np.array(tokens, np.int32)
        arrays[f"{case}/margins"] = np.array(margins, np.float32)
        ended = bool(tokens) and tokens[-1] in eos
        meta["cases"][case] = {"clip": clip, "language": language, "context": context, "max_new_tokens": budget,
                               "raw": raw, "parsed_language": lang, "text": text, "ended": ended,
                               "text_unfixed": parse_unfixed(raw, language)[1],
                               "min_margin": min(margins) if margins else None}
        print(f"{case}: {len(tokens)} tokens, ended={ended}, min margin {min(margins):.4f}, text={text!r}")

    for name, clip, language in STREAMS:
        steps = official_stream(model, tok, clip_audio(clip), language, eos)
        meta["streams"][name] = {"clip": clip, "language": language, "steps": steps}
        print(f"stream {name}: {len(steps)} steps, final {steps[-1]['text']!r}")

    np.savez_compressed(OUT / "goldens.npz", **arrays)
    (OUT / "goldens.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


def official_stream(model, tok, audio: np.ndarray, language: str | None, eos: list[int], chunk_s: float = 1.0,
                    unfixed_chunk_num: int = 2, unfixed_token_num: int = 5, max_new_tokens: int = 32) -> list[dict]:
    """qwen_asr's streaming_transcribe + finish_streaming_transcribe (inference/qwen3_asr.py:584-829), step for
    step, with transformers' generate in place of vLLM (the official streaming needs vLLM, a GPU)."""
    fe = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, n_fft=400)
    chunk = int(round(chunk_s * 16000))
    steps: list[dict] = []
    raw = ""
    full, tail = divmod(len(audio), chunk)
    ends = [chunk * (i + 1) for i in range(full)] + ([len(audio)] if tail else [])
    for i, end in enumerate(ends):
        accum = audio[:end]
        prefix = ""
        if i >= unfixed_chunk_num and i == full:  # the tail flush: no U+FFFD guard, at least one token kept
            cur = tok.encode(raw)
            prefix = tok.decode(cur[: max(1, len(cur) - unfixed_token_num)])
        elif i >= unfixed_chunk_num:
            cur = tok.encode(raw)
            k = unfixed_token_num
            while True:
                cut = max(0, len(cur) - k)
                prefix = tok.decode(cur[:cut]) if cut > 0 else ""
                if "\ufffd" not in prefix:
                    break
                if cut == 0:
                    prefix = ""
                    break
                k += 1
        f = fe(accum, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
               return_tensors="pt")
        n_audio = int(M._get_feat_extract_output_lengths(f["attention_mask"].sum()))
        prompt = prompt_text("", n_audio, language) + prefix
        input_ids = torch.tensor([tok.encode(prompt)])
        with torch.no_grad():
            gen = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                 input_features=f["input_features"], feature_attention_mask=f["attention_mask"],
                                 max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos,
                                 pad_token_id=eos[1], output_scores=True)
        new = gen.sequences[0, input_ids.shape[1]:].tolist()
        margins = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in gen.scores]
        raw = prefix + tok.decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        _, text = parse_asr_output(raw, user_language=language)
        steps.append({"samples": end, "prefix": prefix, "prefix_ids": tok.encode(prefix), "generated": new,
                      "min_margin": min(margins) if margins else None, "raw": raw, "text": text,
                      "text_unfixed": parse_unfixed(raw, language)[1], "final": i == full})
    return steps


if __name__ == "__main__":
    main()
