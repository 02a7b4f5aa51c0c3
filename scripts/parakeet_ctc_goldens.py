"""Writes tests/goldens/parakeet_tiny/ctc.nemo with NVIDIA NeMo: a CTC-only Parakeet (NeMo's EncDecCTCModelBPE, whose
``decoder`` is the CTC head: no prediction network, no joint) saved by NeMo's own ``save_to``. Its weights are the
tiny hybrid's (hybrid.nemo, scripts/parakeet_goldens.py): the preprocessor and encoder as they are, the hybrid's CTC
head as the CTC model's decoder, so that the hybrid's recorded CTC decoding (goldens.json) is this model's too. The
script checks that: NeMo's CTC model, fed each clip's recorded log-mel, gives the recorded encoder output and CTC
ids and text, and writes what it got to ``ctc.json``.

Not run by CI: it needs torch and NeMo (the throwaway virtualenv of scripts/parakeet_goldens.py):

    /tmp/nemo/bin/python scripts/parakeet_ctc_goldens.py            # from the repository root
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = ROOT / "tests" / "goldens" / "parakeet_tiny"


def tokenizer_dir(nemo: Path, out: Path) -> Path:
    """The hybrid's SentencePiece model and vocab.txt, as the tokenizer folder NeMo's BPE models want."""
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(nemo) as tar:
        for member in tar.getmembers():
            for suffix in ("tokenizer.model", "vocab.txt"):
                if member.name.endswith("_" + suffix):
                    (out / suffix).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
    return out


def main() -> None:
    from nemo.collections.asr.models import EncDecCTCModelBPE, EncDecHybridRNNTCTCBPEModel
    from omegaconf import OmegaConf

    hybrid = EncDecHybridRNNTCTCBPEModel.restore_from(str(GOLDENS / "hybrid.nemo"), map_location="cpu").eval()
    source = OmegaConf.to_container(hybrid.cfg, resolve=True)
    with tempfile.TemporaryDirectory() as tmp:
        tok = tokenizer_dir(GOLDENS / "hybrid.nemo", Path(tmp) / "tok")
        head = dict(source["aux_ctc"]["decoder"])
        cfg = {"sample_rate": source["sample_rate"], "tokenizer": {"dir": str(tok), "type": "bpe"},
               "preprocessor": source["preprocessor"], "encoder": source["encoder"], "decoder": head,
               "decoding": {"strategy": "greedy_batch"}}
        model = EncDecCTCModelBPE(cfg=OmegaConf.create(cfg)).eval()
        state = {}
        for name, t in hybrid.state_dict().items():
            if name.startswith(("preprocessor.", "encoder.")):
                state[name] = t
            elif name.startswith("ctc_decoder."):
                state["decoder." + name.removeprefix("ctc_decoder.")] = t
        model.load_state_dict(state, strict=True)
        model.eval()
        model.save_to(str(GOLDENS / "ctc.nemo"))

    restored = EncDecCTCModelBPE.restore_from(str(GOLDENS / "ctc.nemo"), map_location="cpu").eval()
    meta = json.loads((GOLDENS / "goldens.json").read_text())
    with np.load(GOLDENS / "goldens.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    out: dict = {"nemo": "ctc.nemo", "target": restored.cfg.target, "clips": {}}
    for clip in meta["clips"]:
        mel = torch.from_numpy(arrays[f"mel/{clip}"].T[None].copy())
        with torch.no_grad():
            enc, enc_len = restored.encoder(audio_signal=mel, length=torch.tensor([mel.shape[-1]]))
            log_probs = restored.decoder(encoder_output=enc)
            hyps = restored.decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=enc_len,
                                                                    return_hypotheses=True)
        hyp = hyps[0] if isinstance(hyps, list) else hyps[0][0]
        best = log_probs[0].argmax(-1).tolist()
        blank = log_probs.shape[-1] - 1
        ids = [b for i, b in enumerate(best) if b != blank and (i == 0 or b != best[i - 1])]
        encoded = enc[0].T.numpy()
        want = meta["models"]["hybrid"][clip]["ctc"]
        error = float(np.abs(encoded - arrays[f"encoder/hybrid/{clip}"]).max())
        assert ids == want["ids"] and hyp.text == want["text"] and error <= 1e-5, (clip, error)
        out["clips"][clip] = {"ids": ids, "text": hyp.text, "encoder_max_error_vs_hybrid": error}
        print(clip, len(ids), "tokens:", hyp.text[:60], flush=True)
    (GOLDENS / "ctc.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
