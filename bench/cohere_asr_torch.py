"""The official Cohere Transcribe code (transformers' CohereAsrForConditionalGeneration and CohereAsrProcessor) on
torch's CPU: the transformers side of issue 45's speed bench, at the real shapes with random weights.

Run by the golden script's throwaway virtualenv (scripts/cohere_asr_goldens.py has the commands), never by omnid's
own environment:

    python3 -m venv /tmp/cohere-ref && /tmp/cohere-ref/bin/pip install torch==2.13.0 && \\
        /tmp/cohere-ref/bin/pip install transformers==5.23.0 sentencepiece==0.2.3 protobuf safetensors numpy av soxr
    /tmp/cohere-ref/bin/python bench/cohere_asr_torch.py                       # 30 s and 5 min, medians of 3
    /tmp/cohere-ref/bin/python bench/cohere_asr_torch.py --runs 1 --inputs 30  # a first short check

It first builds (once; kept in --work, default /tmp/omnid-bench-cohere, outside the repository) a random checkpoint
at the real config's sizes (2.07 B parameters: encoder 48 x 1280, decoder 8 x 1024, vocabulary 16384) in the hub
repo's layout, written as the golden script writes the tiny one (NeMo-style config.json with no native keys, as the
real one; bfloat16 model.safetensors under the hub's tensor names; the tokenizer files, the vocabulary trained on the
corpus transcripts and padded with filler pieces to 16384), so that omnid's side of the bench can load the same
folder. The speech is real: English clips of the corpus (omnid.evaluation.corpus.corpus_folder: $OMNID_CORPUS, else
tests/corpus) decoded with omnid's reader, concatenated and cut to 30 s and 300 s (saved beside the checkpoint as
audio_30s.npy / audio_300s.npy for omnid's side).

Every measurement is a child process (so that its peak RSS is its own): load (from_pretrained in float32, the
processor), then transcribe as the model card does: processor(audio, language="en", sampling_rate=16000) with
dither 0, generate(max_new_tokens=256) greedy (the processor's chunks past 30 s go through as one padded batch),
processor.decode with the chunk index. Reported per input: load time (from_pretrained and the processor; the imports
are timed apart as import_s), total time (features + generate + decode),
real-time factor (total / audio length), peak RSS, tokens generated (also per chunk), medians over --runs.
``--child INPUT`` is one such measurement in the calling process, one JSON line (bench/cohere_asr_speed.py runs it
beside omnid's side); ``--build`` only builds the checkpoint and the audio. Random weights mostly do not
emit the end token, so each chunk usually runs the full 256 tokens: omnid's side must count its tokens the same way.

A first check (--runs 1 --inputs 30, 2 CPU cores shared with other jobs, load average 4): load 11.7 s (imports
6.8 s apart), total 153 s for 30 s of audio (real-time factor 5.1, 256 tokens), peak RSS 11.5 GiB (float32
weights are 8.3 GB; loading widens the bfloat16 file). The 5 min input is ten chunks in one batch.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORK = pathlib.Path("/tmp/omnid-bench-cohere")
SECONDS = {"30": 30.0, "300": 300.0}
MAX_NEW_TOKENS = 256  # the model card's


def build(work: pathlib.Path) -> None:
    """The real-size random checkpoint in the hub layout, plus the two audio inputs."""
    import torch

    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT))
    import cohere_asr_goldens as golden
    from safetensors.torch import save_file
    from transformers import (
        AutoTokenizer,
        CohereAsrConfig,
        CohereAsrFeatureExtractor,
        CohereAsrForConditionalGeneration,
    )

    from omnid.audio import decode_audio
    from omnid.evaluation.corpus import corpus_folder

    ckpt = work / "checkpoint"
    if not (ckpt / "model.safetensors").is_file():
        ckpt.mkdir(parents=True, exist_ok=True)
        golden.write_tokenizer_files(ckpt, vocab_size=4000, pad_to=16384)
        tokenizer = AutoTokenizer.from_pretrained(ckpt)
        assert len(tokenizer) == 16384, len(tokenizer)
        real_enc = dict(d_model=1280, n_layers=48, n_heads=8, ff_expansion_factor=4, subsampling_conv_channels=256,
                        conv_kernel_size=9)
        real_dec = dict(hidden_size=1024, num_layers=8, num_attention_heads=8, inner_size=4096,
                        max_sequence_length=1024)
        (ckpt / "config.json").write_text(json.dumps(golden.nemo_config(16384, real_enc, real_dec, native=False),
                                                     indent=2))
        generation = {"_from_model_config": True, "bos_token_id": 4,
                      "decoder_start_token_id": tokenizer.convert_tokens_to_ids("▁"), "eos_token_id": 3,
                      "output_attentions": False, "output_hidden_states": False, "pad_token_id": 2,
                      "transformers_version": "4.51.3"}
        (ckpt / "generation_config.json").write_text(json.dumps(generation, indent=2))
        cfg = CohereAsrConfig.from_pretrained(ckpt)
        assert (cfg.hidden_size, cfg.encoder_config.hidden_size, cfg.vocab_size) == (1024, 1280, 16384)
        torch.manual_seed(45)
        torch.set_default_dtype(torch.bfloat16)
        model = CohereAsrForConditionalGeneration(cfg).eval()
        torch.set_default_dtype(torch.float32)
        with torch.no_grad():
            dec = model.model.decoder
            dec.pos_emb.weight.copy_(golden.sinusoid_table(*dec.pos_emb.weight.shape))
        state = {golden.hub_name(k): (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
                 for k, v in model.state_dict().items() if "inv_freq" not in k}
        del model
        fe = CohereAsrFeatureExtractor()
        state["preprocessor.featurizer.fb"] = fe.mel_filters[None].to(torch.bfloat16).contiguous()
        state["preprocessor.featurizer.window"] = torch.hann_window(400, periodic=False).to(torch.bfloat16)
        save_file(dict(sorted(state.items())), str(ckpt / "model.safetensors"), metadata={"format": "pt"})
        print(f"built {ckpt} ({sum(v.numel() for v in state.values()) / 1e9:.2f} B values)", flush=True)
    for name, seconds in SECONDS.items():
        path = work / f"audio_{name}s.npy"
        if path.is_file():
            continue
        corpus = corpus_folder(ROOT / "tests" / "corpus")
        rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines() if line.strip()]
        parts, total = [], 0
        for row in rows:
            if row.get("language") != "en":
                continue
            audio = decode_audio(corpus / row["path"])
            parts.append(audio)
            total += len(audio)
            if total >= seconds * 16000:
                break
        joined = np.concatenate(parts)
        while len(joined) < seconds * 16000:  # a small corpus: repeat it
            joined = np.concatenate([joined, joined])
        np.save(path, joined[: int(seconds * 16000)].astype(np.float32))


def child(work: pathlib.Path, name: str) -> None:
    """One measurement: load, transcribe, print one JSON line."""
    started = time.perf_counter()
    import torch
    from transformers import (
        AutoTokenizer,
        CohereAsrFeatureExtractor,
        CohereAsrForConditionalGeneration,
        CohereAsrProcessor,
    )

    import_s = time.perf_counter() - started
    started = time.perf_counter()
    ckpt = work / "checkpoint"
    model = CohereAsrForConditionalGeneration.from_pretrained(ckpt, dtype=torch.float32).eval()
    processor = CohereAsrProcessor(feature_extractor=CohereAsrFeatureExtractor(dither=0.0),
                                   tokenizer=AutoTokenizer.from_pretrained(ckpt))
    load_s = time.perf_counter() - started
    audio = np.load(work / f"audio_{name}s.npy")
    started = time.perf_counter()
    inputs = processor(audio, language="en", sampling_rate=16000, return_tensors="pt")
    chunk_index = inputs.pop("audio_chunk_index")
    features_s = time.perf_counter() - started
    with torch.inference_mode():
        out = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, num_beams=1)
    generated = out[:, inputs["decoder_input_ids"].shape[1]:]
    per_chunk = ((generated != 3) & (generated != 2)).sum(dim=1).tolist()
    tokens = int(sum(per_chunk))
    if chunk_index[0][1] is None:
        text = processor.decode(out[0], skip_special_tokens=True)
    else:
        text = processor.decode(out, skip_special_tokens=True, audio_chunk_index=chunk_index, language="en")[0]
    total_s = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"input": name, "audio_s": len(audio) / 16000, "chunks": len(chunk_index), "import_s": import_s,
                      "load_s": load_s,
                      "features_s": features_s, "total_s": total_s, "rtf": total_s / (len(audio) / 16000),
                      "peak_rss_mib": peak_kb / 1024, "tokens": tokens, "tokens_per_chunk": per_chunk,
                      "threads": torch.get_num_threads(), "torch": torch.__version__,
                      "mkl": torch.backends.mkl.is_available(), "text_chars": len(text)}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=pathlib.Path, default=WORK, help="checkpoint and audio folder (outside the repo)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--inputs", nargs="+", choices=sorted(SECONDS), default=sorted(SECONDS, key=float))
    p.add_argument("--child", choices=sorted(SECONDS), metavar="INPUT",
                   help="one measurement of INPUT (30 or 300) in this process, printed as one JSON line, then exit "
                        "(the worker bench/cohere_asr_speed.py runs; the checkpoint must be built)")
    p.add_argument("--build", action="store_true", help="only build the checkpoint and the audio in --work, then exit")
    args = p.parse_args()
    if args.child:
        child(args.work, args.child)
        return
    build(args.work)
    if args.build:
        return
    results = {}
    for name in args.inputs:
        runs = []
        for _ in range(args.runs):
            done = subprocess.run([sys.executable, __file__, "--work", str(args.work), "--child", name],
                                  capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
            if done.returncode:
                sys.exit(f"child failed:\n{done.stderr[-4000:]}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
        results[name] = {key: statistics.median(r[key] for r in runs)
                         for key in ("load_s", "features_s", "total_s", "rtf", "peak_rss_mib", "tokens")}
        results[name]["runs"] = len(runs)
    print("medians:", json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
