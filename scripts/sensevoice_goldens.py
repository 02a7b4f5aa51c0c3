"""Writes the goldens of the SenseVoice kind (tests/goldens/sensevoice_tiny/) with the OFFICIAL code: funasr 1.4.16's
``AutoModel`` reading a tiny random ``SenseVoiceSmall`` in the real repository's layout, its ``generate`` (the
model's ``inference``: the four query embeddings, the SAN-M encoder, the CTC head, ``ban_emo_unk``, greedy CTC) and
its ``rich_transcription_postprocess``.

Run once on a developer machine, never in CI, in the throwaway virtualenv scripts/funasr_frontend_goldens.py
describes (it has sentencepiece, which funasr needs):

    /tmp/funasr-ref/bin/python scripts/sensevoice_goldens.py

The checkpoint, as FunAudioLLM/SenseVoiceSmall ships it: ``model.pt`` (a plain state dict saved by ``torch.save``),
``config.yaml`` (the real file's keys, the encoder at tiny sizes), ``configuration.json`` (the real one's
``file_path_metas``), ``am.mvn`` (funasr_frontend's) and ``chn_jpn_yue_eng_ko_spectok.bpe.model``:

- the vocabulary has the real size, 25055, because funasr bans the emotion tag ``<|EMO_UNKNOWN|>`` by its id
  (25009) and names the tags' ids in code: a SentencePiece BPE trained here on the corpus transcripts (en, zh, ja)
  for its first pieces, the tags at the ids funasr's code names (<|zh|> 24884, <|en|> 24885, <|yue|> 24888,
  <|ja|> 24892, <|ko|> 24896, <|nospeech|> 24992, <|HAPPY|> 25001 ... <|NEUTRAL|> 25004, <|EMO_UNKNOWN|> 25009,
  <|withitn|> 25016, <|woitn|> 25017; <|Speech|> at 24993 as public code shows), the other tags funasr's post
  processing knows in the free ids between them, and CJK and Hangul characters filling the rest (the real file's are mostly
  characters too). The real file's exact pieces are not known here;
- the weights: random (torch seed 0), rounded to multiples of 1/64 (float32 as stored; so that the folder packs
  small), the CTC head's rows zero but for the trained pieces and the tags, the other rows' bias -8 (never chosen),
  blank's bias raised so that frames collapse and blanks separate repeats as in a trained model, and
  <|EMO_UNKNOWN|>'s raised so that ``ban_emo_unk`` changes what is chosen.

The folder is kept as one ``SenseVoiceSmall.tar.xz`` (the tests unpack it; the bytes inside are funasr's and
torch's own): its zero rows and repeated pieces pack to a few kilobytes, where the files would take 2 MB.

goldens.json: per case (a corpus clip or clips joined, decoded with omnid's reader so both sides see the same
samples) and per option set (``language``, ``use_itn``, ``ban_emo_unk``): the ids funasr decodes (blank dropped,
repeats collapsed), its text, and ``rich_transcription_postprocess`` of it; then that post-processing of a list of
written strings (tags of every kind, several languages, repeated events, ``The.``). goldens.npz: the encoder's
output (first and last 4 frames) of one case per clip, for the shared SAN-M code.
"""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
from funasr import AutoModel
from funasr.tokenizer.sentencepiece_tokenizer import SentencepiecesTokenizer
from funasr.utils.postprocess_utils import rich_transcription_postprocess
from sentencepiece import sentencepiece_model_pb2 as model_pb2

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "goldens" / "sensevoice_tiny"
CORPUS = ROOT / "tests" / "corpus"
sys.path.insert(0, str(ROOT))
from omnid.audio import decode_audio  # noqa: E402  (the same 16 kHz samples omnid decodes)

sys.path.insert(0, str(ROOT / "scripts"))
from golden_weights import pack  # noqa: E402

VOCAB = 25055
BPE = "chn_jpn_yue_eng_ko_spectok.bpe.model"
TAGS = {  # the ids funasr's code names, then the others funasr's post-processing knows, in free ids between them
    24884: "<|zh|>", 24885: "<|en|>", 24886: "<|de|>", 24888: "<|yue|>", 24892: "<|ja|>", 24896: "<|ko|>",
    24992: "<|nospeech|>", 24993: "<|Speech|>", 24994: "<|BGM|>", 24995: "<|Applause|>", 24996: "<|Laughter|>",
    24997: "<|Cry|>", 24998: "<|Sneeze|>", 24999: "<|Breath|>", 25000: "<|Cough|>", 25001: "<|HAPPY|>",
    25002: "<|SAD|>", 25003: "<|ANGRY|>", 25004: "<|NEUTRAL|>", 25005: "<|FEARFUL|>", 25006: "<|DISGUSTED|>",
    25007: "<|SURPRISED|>", 25009: "<|EMO_UNKNOWN|>", 25010: "<|Sing|>", 25011: "<|Speech_Noise|>",
    25012: "<|GBG|>", 25013: "<|Event_UNK|>", 25016: "<|withitn|>", 25017: "<|woitn|>",
}
BLANK_BIAS, EMO_UNKNOWN_BIAS = 6.0, 5.6
SIZES = {"output_size": 16, "attention_heads": 4, "linear_units": 32, "num_blocks": 3, "tp_blocks": 2}
CLIPS = {
    "en_librispeech": ["audio/en/librispeech_1089-134686-0000.flac"],
    "zh_aishell": ["audio/zh/aishell1_BAC009S0724W0121.flac"],
    "ja_picovoice": ["audio/ja/picovoice_leopard_test_ja.flac"],
    "en_short": ["audio/en/ljspeech_LJ001-0002.flac"],
    "joined_40s": ["audio/zh/aishell1_BAC009S0724W0121.flac", "audio/en/librispeech_1089-134686-0000.flac",
                   "audio/ja/picovoice_leopard_test_ja.flac", "audio/en/jfk_inaugural_excerpt.flac"],
}
OPTIONS = [  # (language, use_itn, ban_emo_unk): funasr's defaults first; "de" is not one of its languages (-> auto)
    ("auto", False, False), ("en", True, False), ("zh", False, True), ("ja", True, True), ("de", False, False),
    ("nospeech", False, True),
]
LONG = 3  # option sets run on the joined clip
WRITTEN = [  # rich_transcription_postprocess of strings a trained model writes (and some it could)
    "<|en|><|NEUTRAL|><|Speech|><|woitn|>hello world",
    "<|zh|><|HAPPY|><|BGM|><|withitn|>你好。<|zh|><|HAPPY|><|BGM|><|withitn|>再见。",
    "<|en|><|SAD|><|Laughter|><|woitn|>ha ha<|en|><|SAD|><|Laughter|><|woitn|>more",
    "<|nospeech|><|Event_UNK|>",
    "<|ja|><|ANGRY|><|Cough|><|woitn|>こんにちは",
    "<|en|><|EMO_UNKNOWN|><|Speech|><|woitn|>The. end The.",
    "<|ko|><|NEUTRAL|><|Applause|><|Sneeze|><|woitn|>안녕",
    "<|de|><|NEUTRAL|><|Speech|><|woitn|>hallo",
    "<|yue|><|HAPPY|><|SAD|><|SAD|><|Cry|><|withitn|>喂",
    "<|en|><|FEARFUL|><|Breath|><|woitn|>a<|zh|><|FEARFUL|><|Breath|><|woitn|>b",
    "plain words",
    "<|en|><|NEUTRAL|><|Speech|><|woitn|>",
]


def transcripts() -> list[str]:
    rows = [json.loads(line) for line in (CORPUS / "manifest.jsonl").read_text().splitlines() if line.strip()]
    return [r["text"] for r in rows if r["language"] in ("en", "zh", "ja")]


def tokenizer(folder: pathlib.Path) -> None:
    """A BPE trained on the corpus transcripts, then laid out at the real vocabulary's size and tag ids."""
    with tempfile.TemporaryDirectory() as tmp:
        text = pathlib.Path(tmp) / "text.txt"
        text.write_text("\n".join(transcripts() * 3) + "\n")
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=f"{tmp}/bpe", vocab_size=400, model_type="bpe",
                                       character_coverage=1.0, byte_fallback=False,
                                       minloglevel=2, normalization_rule_name="identity")
        proto = model_pb2.ModelProto()
        proto.ParseFromString(pathlib.Path(f"{tmp}/bpe.model").read_bytes())
    trained = list(proto.pieces)
    del proto.pieces[:]
    known = {p.piece for p in trained}
    filler = (chr(c) for c in [*range(0x4E00, 0xA000), *range(0xAC00, 0xD7A4)] if chr(c) not in known)
    for i in range(VOCAB):
        p = proto.pieces.add()
        if i < len(trained):
            p.CopyFrom(trained[i])
        elif i in TAGS:
            p.piece, p.score, p.type = TAGS[i], 0.0, model_pb2.ModelProto.SentencePiece.USER_DEFINED
        else:
            p.piece, p.score = next(filler), -1000.0
    (folder / BPE).write_bytes(proto.SerializeToString())


def weights(model: torch.nn.Module, active: list[int]) -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.25 * torch.randn_like(p))
            elif name == "embed.weight":
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (1.0 / p.shape[-1] ** 0.5 if p.dim() > 1 else 0.2))
            p.copy_(torch.round(p * 64) / 64)
        head = model.ctc.ctc_lo
        keep = torch.zeros(VOCAB, dtype=torch.bool)
        keep[active] = True
        head.weight[~keep] = 0.0
        head.weight[keep] *= 4.0
        head.bias[~keep] = -8.0
        head.bias[0] = BLANK_BIAS  # blank: the best on many frames, as in a trained model
        head.bias[25009] = EMO_UNKNOWN_BIAS  # <|EMO_UNKNOWN|>: often the best, so that banning it matters
        for w in (head.weight, head.bias):
            w.copy_(torch.round(w * 64) / 64)


def write_folder(folder: pathlib.Path) -> list[int]:
    shutil.copy(ROOT / "tests" / "goldens" / "funasr_frontend" / "am.mvn", folder / "am.mvn")
    tokenizer(folder)
    enc = {**SIZES, "dropout_rate": 0.1, "positional_dropout_rate": 0.1, "attention_dropout_rate": 0.1,
           "input_layer": "pe", "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True,
           "kernel_size": 11, "sanm_shfit": 0, "selfattention_layer_type": "sanm"}
    lines = ["encoder: SenseVoiceEncoderSmall", "encoder_conf:"] + [f"    {k}: {json.dumps(v)}" for k, v in enc.items()]
    lines += ["", "", "model: SenseVoiceSmall", "model_conf:", "    length_normalized_loss: true", "    sos: 1",
              "    eos: 2", "    ignore_id: -1", "", "tokenizer: SentencepiecesTokenizer", "tokenizer_conf:",
              "  bpemodel: null", "  unk_symbol: <unk>", "  split_with_space: true", "", "frontend: WavFrontend",
              "frontend_conf:", "    fs: 16000", "    window: hamming", "    n_mels: 80", "    frame_length: 25",
              "    frame_shift: 10", "    lfr_m: 7", "    lfr_n: 6", "    cmvn_file: null", ""]
    (folder / "config.yaml").write_text("\n".join(lines) + "\n")
    (folder / "configuration.json").write_text(json.dumps({
        "framework": "pytorch", "task": "auto-speech-recognition", "model": {"type": "funasr"},
        "pipeline": {"type": "funasr-pipeline"}, "model_name_in_hub": {"ms": "", "hf": ""},
        "file_path_metas": {"init_param": "model.pt", "config": "config.yaml",
                            "tokenizer_conf": {"bpemodel": BPE}, "frontend_conf": {"cmvn_file": "am.mvn"}}},
        indent=2) + "\n")
    # The model as funasr builds it from this config (random init), then our weights, saved as the real file is.
    from funasr.models.sense_voice.model import SenseVoiceSmall

    sp = spm.SentencePieceProcessor(model_file=str(folder / BPE))
    assert sp.GetPieceSize() == VOCAB
    model = SenseVoiceSmall(encoder="SenseVoiceEncoderSmall", encoder_conf=enc, input_size=560, vocab_size=VOCAB)
    trained = [i for i in range(3, VOCAB) if i not in TAGS and sp.GetScore(i) > -1000.0]
    weights(model, [0, *trained, *TAGS])
    torch.save(model.state_dict(), folder / "model.pt")
    return trained


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    captured: list[list[int]] = []
    decode = SentencepiecesTokenizer.decode

    def capture(self: SentencepiecesTokenizer, line: list[int], **kwargs: object) -> str:
        captured.append([int(i) for i in line])
        return decode(self, line, **kwargs)

    SentencepiecesTokenizer.decode = capture  # type: ignore[method-assign]  (AutoModel copies its tokenizer)
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp) / "SenseVoiceSmall"
        folder.mkdir()
        write_folder(folder)
        pack(folder, OUT / "SenseVoiceSmall.tar.xz", "SenseVoiceSmall")
        automodel = AutoModel(model=str(folder), disable_update=True, device="cpu", frontend_conf={"dither": 0.0})
        encoder_out: dict[str, np.ndarray] = {}
        hook = automodel.model.encoder.register_forward_hook(
            lambda _m, _i, out: encoder_out.__setitem__("last", (out[0] if isinstance(out, tuple) else out)[0].numpy()))
        cases: dict[str, dict] = {}
        arrays: dict[str, np.ndarray] = {}
        for clip, paths in CLIPS.items():
            audio = np.concatenate([decode_audio(CORPUS / p) for p in paths])
            runs = {}
            for language, itn, ban in OPTIONS[:LONG] if len(paths) > 1 else OPTIONS:
                captured.clear()
                res = automodel.generate(input=audio, language=language, use_itn=itn, ban_emo_unk=ban,
                                         disable_pbar=True)
                assert len(captured) == 1 and len(res) == 1
                text = res[0]["text"]
                runs[f"{language}/{int(itn)}/{int(ban)}"] = {"ids": captured[0], "text": text,
                                                               "rich": rich_transcription_postprocess(text)}
                if (language, itn, ban) == OPTIONS[0]:
                    out = encoder_out["last"]
                    arrays[f"{clip}/encoder_first"], arrays[f"{clip}/encoder_last"] = out[:4], out[-4:]
                    arrays[f"{clip}/encoder_sum"] = np.array(out.astype(np.float64).sum())
                print(clip, language, itn, ban, len(captured[0]), text[:100])
            cases[clip] = {"paths": paths, "samples": len(audio), "runs": runs}
        hook.remove()
    np.savez_compressed(OUT / "goldens.npz", **arrays)
    meta = {"funasr": __import__("funasr").__version__, "torch": torch.__version__, "sizes": SIZES, "vocab": VOCAB,
            "tags": {v: k for k, v in TAGS.items()}, "cases": cases,
            "written": {s: rich_transcription_postprocess(s) for s in WRITTEN}}
    text = json.dumps(meta, ensure_ascii=False, indent=1)
    text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]", lambda m: "[" + ", ".join(m.group(1).split()).replace(",,", ",") + "]",
                  text)  # id lists on one line
    (OUT / "goldens.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
