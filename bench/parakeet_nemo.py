"""bench/parakeet_speed.py's worker in NVIDIA NeMo's virtualenv (torch 2.13.0 CPU + nemo_toolkit[asr] 3.0.0, as for
scripts/parakeet_goldens.py). Two commands:

    build OUT.nemo --seed N    a random checkpoint with parakeet-tdt-0.6b-v3's shapes, built by NeMo's own classes
    run MODEL.nemo AUDIO.wav   NeMo's transcribe() on it (after an untimed one on its first second): load and
                               transcribe times, peak RSS, the text (JSON)

The real v3 configuration: 128 mels with per-feature normalisation, a 24-layer FastConformer of 1024 (8 heads, FF
4096, conv kernel 9, dw-striding x8 with 256 channels, no biases, no xscaling), a 2-layer LSTM of 640, a joint of
640, 8192 SentencePiece pieces (their texts made up: 7,800 user-defined pieces, the rest trained on the corpus's English
transcripts), TDT durations 0-4, greedy_batch with max_symbols 10. Weights are drawn N(0, 1/fan_in) (norm gains 1),
batch-norm statistics near (0, 1); the joint's blank bias is set on 10 s of speech so that NeMo's greedy decoding emits
a token on about a third of the frames, roughly as a real model does on speech.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from parakeet_goldens import CORPUS, V3, config, tokenizer  # noqa: E402  (the goldens' NeMo config, at v3's sizes)

VOCABULARY = 8192
EMIT_FRACTION = 0.35


def speech(seconds: float) -> np.ndarray:
    import soundfile as sf

    out, n = [], 0
    for path in sorted((CORPUS / "audio" / "en").glob("*.wav")):
        clip, rate = sf.read(path, dtype="float32")
        if rate == 16000 and clip.ndim == 1:
            out.append(clip)
            n += len(clip)
        if n >= seconds * 16000:
            break
    return np.concatenate(out)[: int(seconds * 16000)]


def build(out: Path, seed: int) -> None:
    from nemo.collections.asr.models import EncDecRNNTBPEModel
    from omegaconf import OmegaConf, open_dict

    with tempfile.TemporaryDirectory() as tmp:
        tokens = tokenizer(Path(tmp), VOCABULARY, made_up=7800)
        model = EncDecRNNTBPEModel(cfg=OmegaConf.create(config(tokens, "tdt", V3))).eval()
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.ndim > 1:
                    fan_in = int(np.prod(p.shape[1:]))
                    p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)
                else:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if "norm" in name and
                                                                        name.endswith("weight") else 0.0))
            for name, b in model.named_buffers():
                if name.endswith("running_var"):
                    b.copy_(torch.rand(b.shape, generator=g) + 0.5)
                if name.endswith("running_mean"):
                    b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            # The blank's bias set, by bisection, so that NeMo's greedy decoding of 10 s of speech emits a token on
            # about EMIT_FRACTION of the encoder frames (a random encoder's frames differ little from each other, so
            # the rate holds on other speech).
            clip = torch.from_numpy(speech(10.0))[None]
            mel, mel_len = model.preprocessor(input_signal=clip, length=torch.tensor([clip.shape[1]]))
            enc, enc_len = model.encoder(audio_signal=mel, length=mel_len)
            bias = model.joint.joint_net[2].bias
            base = float(bias[VOCABULARY])
            low, high = -50.0, 50.0
            for _ in range(30):
                bias[VOCABULARY] = base + (low + high) / 2
                hyp = model.decoding.rnnt_decoder_predictions_tensor(encoder_output=enc, encoded_lengths=enc_len)[0]
                emitted = len(hyp.y_sequence) / int(enc_len[0])
                low, high = ((low + high) / 2, high) if emitted > EMIT_FRACTION else (low, (low + high) / 2)
            print(json.dumps({"tokens_per_frame": emitted}), file=sys.stderr)
        with open_dict(model.cfg):
            model.cfg.validation_ds = {"use_start_end_token": False}
        model.save_to(str(out))
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))


def run(nemo: Path, audio: Path) -> None:
    import logging

    from nemo.collections.asr.models import ASRModel
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    torch.set_grad_enabled(False)
    started = time.perf_counter()
    model = ASRModel.restore_from(str(nemo), map_location="cpu").eval()
    load_s = time.perf_counter() - started
    import soundfile as sf

    with tempfile.TemporaryDirectory() as tmp:  # the untimed warm-up: the first second
        clip, rate = sf.read(audio, dtype="float32", frames=16000)
        sf.write(Path(tmp) / "warm-up.wav", clip, rate, subtype="FLOAT")
        model.transcribe([str(Path(tmp) / "warm-up.wav")], batch_size=1, verbose=False)
    started = time.perf_counter()
    hyp = model.transcribe([str(audio)], batch_size=1, return_hypotheses=True, verbose=False)[0]
    total_s = time.perf_counter() - started
    print(json.dumps({"load_s": load_s, "total_s": total_s, "text": hyp.text, "tokens": len(hyp.y_sequence),
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "threads": torch.get_num_threads()}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("out", type=Path)
    b.add_argument("--seed", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("nemo", type=Path)
    r.add_argument("audio", type=Path)
    args = p.parse_args()
    if args.command == "build":
        build(args.out, args.seed)
    else:
        run(args.nemo, args.audio)


if __name__ == "__main__":
    sys.exit(main())
