"""The official SenseVoice code (funasr 1.4.16's AutoModel and SenseVoiceSmall) on torch's CPU: the funasr side of
issue 46's speed bench (bench/sensevoice_speed.py), at the real shapes with random weights.

Run by the golden script's throwaway virtualenv (scripts/funasr_frontend_goldens.py has the commands), never by
omnid's own environment:

    /tmp/funasr-ref/bin/python bench/sensevoice_torch.py --build     # the checkpoint and the speech, once
    /tmp/funasr-ref/bin/python bench/sensevoice_torch.py --child 60  # one measurement, one JSON line

``--build`` writes into --work (default /tmp/omnid-bench-sensevoice, outside the repository) a random SenseVoiceSmall
at the real config's sizes (encoder 50 + 20 blocks, 512 wide, 4 heads, feed-forward 2048; 25,055 pieces), built by
funasr's own class and saved as the real repo ships it (model.pt by torch.save, config.yaml, configuration.json,
am.mvn, the SentencePiece model: those of scripts/sensevoice_goldens.py's tiny folder, which has the real vocabulary
size), and the speech: English and Chinese corpus clips (omnid.evaluation.corpus.corpus_folder: $OMNID_CORPUS, else
tests/corpus) decoded with omnid's reader, joined with 0.3 s pauses and repeated to 60 s and 600 s
(audio_60s.npy, audio_600s.npy). bench/sensevoice_speed.py adds the clips omnid's Silero VAD cuts them into
(clips_*.json), so that both sides decode the same clips.

``--child INPUT``: load (AutoModel with the folder, dither 0, CPU, ``ncpu`` = the cores: funasr's default of 4
threads on a 2-core machine made its products past ~400 frames wait on each other, far slower here), then
generate() over the clips one at a time (funasr's batch_size 1, as on a CPU it runs them), language "auto", use_itn
False; reported: load, total, real-time factor, peak RSS, the ids each clip decoded to (held beside omnid's).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORK = pathlib.Path("/tmp/omnid-bench-sensevoice")
SIZES = {"output_size": 512, "attention_heads": 4, "linear_units": 2048, "num_blocks": 50, "tp_blocks": 20}
SECONDS = {"60": 60.0, "600": 600.0}
sys.path.insert(0, str(ROOT))
from bench.side_by_side import reference_main, result  # noqa: E402


def build(work: pathlib.Path) -> None:
    import numpy as np
    import torch
    from funasr.models.sense_voice.model import SenseVoiceSmall

    from omnid.audio import decode_audio
    from omnid.evaluation.corpus import corpus_folder

    folder = work / "checkpoint"
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(ROOT / "tests/goldens/sensevoice_tiny/SenseVoiceSmall.tar.xz") as tar:
        tar.extractall(tmp, filter="data")
        for name in ("am.mvn", "chn_jpn_yue_eng_ko_spectok.bpe.model", "configuration.json"):
            shutil.copy(pathlib.Path(tmp, "SenseVoiceSmall", name), folder / name)
        config = pathlib.Path(tmp, "SenseVoiceSmall", "config.yaml").read_text()
    for key, value in SIZES.items():
        config = "\n".join(f"    {key}: {value}" if line.strip().startswith(f"{key}:") and line.startswith("    ")
                           else line for line in config.splitlines()) + "\n"
    (folder / "config.yaml").write_text(config)
    enc = {**SIZES, "input_layer": "pe", "pos_enc_class": "SinusoidalPositionEncoder", "normalize_before": True,
           "kernel_size": 11, "sanm_shfit": 0, "selfattention_layer_type": "sanm"}
    torch.manual_seed(0)
    model = SenseVoiceSmall(encoder="SenseVoiceEncoderSmall", encoder_conf=enc, input_size=560, vocab_size=25055)
    torch.save(model.state_dict(), folder / "model.pt")
    corpus = corpus_folder(ROOT / "tests" / "corpus")
    rows = [json.loads(line) for line in (corpus / "manifest.jsonl").read_text().splitlines() if line.strip()]
    pause = np.zeros(4800, np.float32)
    speech = [np.concatenate([decode_audio(corpus / r["path"]), pause]) for r in rows if r["language"] in ("en", "zh")]
    joined = np.concatenate(speech)
    for name, seconds in SECONDS.items():
        n = int(seconds * 16000)
        np.save(work / f"audio_{name}s.npy", np.resize(joined, n).astype(np.float32))
    print(f"built {folder} ({sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters)", flush=True)


def child(work: pathlib.Path, name: str) -> None:
    started = time.perf_counter()
    import numpy as np
    import torch
    from funasr import AutoModel
    from funasr.tokenizer.sentencepiece_tokenizer import SentencepiecesTokenizer

    decode = SentencepiecesTokenizer.decode
    counts: list[int] = []

    def counted(self, line, **kwargs):  # type: ignore[no-untyped-def]
        counts.append(len(line))
        return decode(self, line, **kwargs)

    SentencepiecesTokenizer.decode = counted  # each clip's ids, to hold beside omnid's
    import_s = time.perf_counter() - started
    started = time.perf_counter()
    # ncpu: AutoModel sets torch's threads to it, 4 by default; on 2 cores 4 threads make each product past ~400
    # frames wait on each other, far slower here, so funasr gets one thread per core, as omnid uses.
    model = AutoModel(model=str(work / "checkpoint"), disable_update=True, device="cpu", ncpu=os.cpu_count() or 1,
                      frontend_conf={"dither": 0.0}, disable_log=True)
    load_s = time.perf_counter() - started
    audio = np.load(work / f"audio_{name}s.npy")
    clips = json.loads((work / f"clips_{name}s.json").read_text())
    started = time.perf_counter()
    with torch.inference_mode():
        for a, b in clips:
            model.generate(input=audio[a:b], language="auto", use_itn=False, disable_pbar=True)
    total_s = time.perf_counter() - started
    print(json.dumps(result(name, len(audio) / 16000, load_s, total_s, clips=len(clips), import_s=import_s, ids_per_clip=counts,
                            torch=torch.__version__, threads=torch.get_num_threads())), flush=True)


def main() -> None:
    reference_main(__doc__, WORK, build, child, SECONDS)


if __name__ == "__main__":
    main()
