"""Writes the goldens of FunASR's front end (tests/goldens/funasr_frontend/) with the OFFICIAL code: funasr 1.4.16's
``WavFrontend`` as SenseVoice Small's config.yaml builds it (16 kHz, Hamming window, 80 mels, 25 / 10 ms, LFR 7 / 6,
CMVN from am.mvn), with dither 0 (its default, 1.0, adds random noise: omnid adds none).

Run once on a developer machine, never in CI, in a throwaway virtualenv outside the project (torch 2.13.0 is the
CPU build on this machine's disk; funasr's fbank then runs on kaldi-native-fbank, torchaudio having no build for it):

    python3 -m venv /tmp/funasr-ref && /tmp/funasr-ref/bin/pip install torch==2.13.0 && \\
        /tmp/funasr-ref/bin/pip install funasr==1.4.16 kaldi-native-fbank soundfile numpy sentencepiece av soxr
    /tmp/funasr-ref/bin/python scripts/funasr_frontend_goldens.py

It decodes the repository's own corpus clips with omnid's reader (omnid.audio.decode_audio), so that funasr and
omnid see the same float32 samples, and writes:

- am.mvn: a Kaldi nnet-format normalisation (560 means, negated, under <AddShift>; 560 inverse deviations under
  <Rescale>), drawn at random (seed 0) in the ranges the real file holds, laid out as the real one is;
- goldens.npz: per case the front end's output features (frames x 560; the first and last 4 frames of a case
  over 8 frames), and the synthetic cases' samples;
- goldens.json: the cases (clip paths, sample counts and sums, frame counts, the sum of all features) and the
  versions.
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import torch
from funasr.frontends.wav_frontend import WavFrontend

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "goldens" / "funasr_frontend"
CORPUS = ROOT / "tests" / "corpus"
sys.path.insert(0, str(ROOT))
from omnid.audio import decode_audio  # noqa: E402  (the same 16 kHz samples omnid decodes)

CASES = {  # clips decoded and joined in order
    "zh_aishell": ["audio/zh/aishell1_BAC009S0724W0121.flac"],
    "ja_picovoice": ["audio/ja/picovoice_leopard_test_ja.flac"],
    "en_librispeech": ["audio/en/librispeech_1089-134686-0000.flac"],
    "past_30s": ["audio/zh/aishell1_BAC009S0724W0121.flac", "audio/en/librispeech_1089-134686-0000.flac",
                 "audio/ja/picovoice_leopard_test_ja.flac", "audio/en/jfk_inaugural_excerpt.flac"],
}
EDGE = 4  # frames kept at each end of a case longer than twice this (the goldens stay small)


def write_mvn(path: pathlib.Path, rng: np.random.Generator) -> None:
    shift = -rng.uniform(8.0, 16.0, 560)  # the real file's means of log-mel energies in int16 units
    scale = rng.uniform(0.15, 0.45, 560)
    vec = lambda v: " ".join(f"{x:.6f}" for x in v)  # noqa: E731
    path.write_text("<Nnet>\n<Splice> 560 560\n[ 0 ]\n<AddShift> 560 560\n<LearnRateCoef> 0 [ " + vec(shift)
                    + " ]\n<Rescale> 560 560\n<LearnRateCoef> 0 [ " + vec(scale) + " ]\n</Nnet>\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_mvn(OUT / "am.mvn", np.random.default_rng(0))
    frontend = WavFrontend(cmvn_file=str(OUT / "am.mvn"), fs=16000, window="hamming", n_mels=80, frame_length=25,
                           frame_shift=10, lfr_m=7, lfr_n=6, dither=0.0)
    rng = np.random.default_rng(1)
    audio = {name: np.concatenate([decode_audio(CORPUS / p) for p in paths]) for name, paths in CASES.items()}
    tone = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32) * 0.3
    audio["tone_1s"] = tone
    audio["noise_320_samples"] = (rng.standard_normal(320) * 0.1).astype(np.float32)  # under 25 ms: a shorter window
    audio["noise_401_samples"] = (rng.standard_normal(401) * 0.1).astype(np.float32)  # one full frame
    arrays, meta = {}, {"funasr": __import__("funasr").__version__, "torch": torch.__version__, "cases": {}}
    for name, samples in audio.items():
        feats, lengths = frontend(torch.from_numpy(samples)[None], torch.tensor([len(samples)]))
        out = feats[0, : int(lengths[0])].numpy()
        if len(out) > 2 * EDGE:
            arrays[f"{name}/features_first"], arrays[f"{name}/features_last"] = out[:EDGE], out[-EDGE:]
        else:
            arrays[f"{name}/features"] = out
        if name not in CASES:
            arrays[f"{name}/audio"] = samples
        meta["cases"][name] = {"paths": CASES.get(name, []), "samples": len(samples),
                               "audio_sum": float(samples.astype(np.float64).sum()), "frames": int(out.shape[0]),
                               "sum": float(out.astype(np.float64).sum())}
        print(name, len(samples), out.shape)
    np.savez_compressed(OUT / "goldens.npz", **arrays)
    (OUT / "goldens.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
