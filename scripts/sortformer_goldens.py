"""Writes tests/goldens/sortformer_tiny/{tiny.nemo, goldens.npz} with NVIDIA NeMo, the model's own code.

Not run by CI: it needs torch and NeMo, which omnid never imports. In a throwaway virtualenv outside the project
(about 4.5 minutes and 2.2 GB here):

    python3 -m venv /tmp/nemo-venv
    /tmp/nemo-venv/bin/pip install torch==2.13.0 'nemo_toolkit[asr]==3.0.0'
    /tmp/nemo-venv/bin/python scripts/sortformer_goldens.py        # from the repository root

It builds a tiny Streaming Sortformer from the v2 configuration (64-wide FastConformer of 2 layers, 32-wide
Transformer of 2 layers, 16 subsampling channels, 4 speakers, 128 mel bins), re-randomises every parameter so that
nothing is left at an initialiser's symmetric value, saves it with NeMo's own ``save_to``, and records on four
synthetic clips (tests/sortformer_clips.py): the mel, the pre-encode output, the offline probabilities, NeMo's
``forward_streaming`` under three presets, the per-step streaming state of the stress preset with each
compression's top-k margin, and NeMo's segments. NeMo's two top-k sites are patched to the stable rule omnid
implements (among equal scores the lower index wins): with duplicated cache frames, exact ties are common.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.sortformer_clips import CLIPS  # noqa: E402

OUT = ROOT / "tests" / "goldens" / "sortformer_tiny"

MODULES = {
    "num_spks": 4, "dropout_rate": 0.5, "fc_d_model": 64, "tf_d_model": 32,
    "spkcache_len": 188, "fifo_len": 0, "chunk_len": 188, "spkcache_update_period": 188,
    "chunk_left_context": 1, "chunk_right_context": 1, "spkcache_sil_frames_per_spk": 3, "scores_add_rnd": 0,
    "pred_score_threshold": 0.25, "max_index": 99999, "scores_boost_latest": 0.05, "sil_threshold": 0.2,
    "strong_boost_rate": 0.75, "weak_boost_rate": 1.5, "min_pos_scores_rate": 0.5,
    "causal_attn_rate": 0.5, "causal_attn_rc": 7,
}

CONFIG = {
    "sample_rate": 16000, "pil_weight": 0.5, "ats_weight": 0.5, "max_num_of_spks": 4, "streaming_mode": True,
    "model_defaults": {"fc_d_model": 64, "tf_d_model": 32},
    "preprocessor": {
        "_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
        "normalize": "NA", "window_size": 0.025, "sample_rate": 16000, "window_stride": 0.01,
        "window": "hann", "features": 128, "n_fft": 512, "frame_splicing": 1, "dither": 0.00001,
    },
    "sortformer_modules": {"_target_": "nemo.collections.asr.modules.sortformer_modules.SortformerModules",
                           **MODULES},
    "encoder": {
        "_target_": "nemo.collections.asr.modules.ConformerEncoder", "feat_in": 128, "feat_out": -1,
        "n_layers": 2, "d_model": 64, "subsampling": "dw_striding", "subsampling_factor": 8,
        "subsampling_conv_channels": 16, "causal_downsampling": False, "ff_expansion_factor": 4,
        "self_attention_model": "rel_pos", "n_heads": 4, "att_context_size": [-1, -1],
        "att_context_style": "regular", "xscaling": True, "untie_biases": True, "pos_emb_max_len": 5000,
        "conv_kernel_size": 9, "conv_norm_type": "batch_norm", "conv_context_size": None, "dropout": 0.1,
        "dropout_pre_encoder": 0.1, "dropout_emb": 0.0, "dropout_att": 0.1,
        "stochastic_depth_drop_prob": 0.0, "stochastic_depth_mode": "linear", "stochastic_depth_start_layer": 1,
    },
    "transformer_encoder": {
        "_target_": "nemo.collections.asr.modules.transformer.transformer_encoders.TransformerEncoder",
        "num_layers": 2, "hidden_size": 32, "inner_size": 64, "num_attention_heads": 4,
        "attn_score_dropout": 0.5, "attn_layer_dropout": 0.5, "ffn_dropout": 0.5, "hidden_act": "relu",
        "pre_ln": False, "pre_ln_final_layer_norm": True,
    },
    "loss": {"_target_": "nemo.collections.asr.losses.bce_loss.BCELoss", "weight": None, "reduction": "mean"},
}

# chunk_len, chunk_right_context, fifo_len, spkcache_update_period, spkcache_len
PRESETS = {"very_high": (340, 40, 40, 300, 188), "low": (6, 7, 188, 144, 188), "stress": (12, 2, 16, 20, 32)}
CALLHOME = {"onset": 0.641, "offset": 0.561, "pad_onset": 0.229, "pad_offset": 0.079,
            "min_duration_on": 0.511, "min_duration_off": 0.296}
DEFAULTS = {"onset": 0.5, "offset": 0.5, "pad_onset": 0.0, "pad_offset": 0.0,
            "min_duration_on": 0.0, "min_duration_off": 0.0}


def randomise(model: torch.nn.Module) -> None:
    """Weights N(0, 1/fan_in), norm gains 1 + 0.1 N, biases and attention biases 0.1 N, batch-norm running mean
    0.1 N and variance U(0.5, 1.5)."""
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.state_dict().items():
            if not p.is_floating_point() or name.startswith("preprocessor."):
                continue
            if name.endswith("running_var"):
                p.copy_(0.5 + torch.rand(p.shape, generator=g))
            elif name.endswith("running_mean") or name.endswith("bias") or "pos_bias" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif p.ndim == 1:  # LayerNorm / BatchNorm gains
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))


def stable_topk(x: torch.Tensor, k: int, dim: int) -> torch.Tensor:
    """Indices of the k largest along dim; among equal values the lower index first."""
    return torch.sort(-x, dim=dim, stable=True).indices.narrow(dim, 0, k)


def margin(flat: np.ndarray, kept: np.ndarray) -> float:
    """Gap between the weakest kept finite score and the best different score left out (exact ties excluded)."""
    finite = kept[np.isfinite(kept)]
    if finite.size == 0:
        return math.inf
    low = finite.min()
    rest = flat[np.isfinite(flat) & (flat < low)]
    return float(low - rest.max()) if rest.size else math.inf


def patch_topk(modules_cls, margins: list[float]) -> None:
    """NeMo's two torch.topk sites, with the stable tie rule, recording each selection's margin."""

    def boost(self, scores, n_boost_per_spk: int, scale_factor: float = 1.0, offset: float = 0.5):
        batch_size, _, n_spk = scores.shape
        topk_indices = stable_topk(scores, n_boost_per_spk, dim=1)
        batch_indices = torch.arange(batch_size).unsqueeze(1).unsqueeze(2)
        speaker_indices = torch.arange(n_spk).unsqueeze(0).unsqueeze(0)
        scores[batch_indices, topk_indices, speaker_indices] -= scale_factor * math.log(offset)
        return scores

    def topk_indices(self, scores):
        batch_size, n_frames, _ = scores.shape
        n_frames_no_sil = n_frames - self.spkcache_sil_frames_per_spk
        flat = scores.permute(0, 2, 1).reshape(batch_size, -1)
        idx = stable_topk(flat, self.spkcache_len, dim=1)
        values = torch.gather(flat, 1, idx)
        margins.append(margin(flat[0].numpy(), values[0].numpy()))
        idx = torch.where(values != float("-inf"), idx, torch.tensor(self.max_index))
        idx, _ = torch.sort(idx, dim=1)
        is_disabled = idx == self.max_index
        idx = torch.remainder(idx, n_frames)
        is_disabled += idx >= n_frames_no_sil
        idx[is_disabled] = 0
        return idx, is_disabled

    modules_cls._boost_topk_scores = boost
    modules_cls._get_topk_indices = topk_indices


def main() -> None:
    from nemo.collections.asr.models import SortformerEncLabelModel
    from nemo.collections.asr.modules.sortformer_modules import SortformerModules
    from nemo.collections.asr.parts.utils.vad_utils import ts_vad_post_processing
    from omegaconf import OmegaConf

    torch.manual_seed(0)
    margins: list[float] = []
    patch_topk(SortformerModules, margins)
    model = SortformerEncLabelModel(cfg=OmegaConf.create(CONFIG))
    randomise(model)
    model.eval()
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_to(str(OUT / "tiny.nemo"))
    mods = model.sortformer_modules
    golden: dict[str, np.ndarray] = {}

    with torch.no_grad():
        for name, make in CLIPS.items():
            audio = torch.from_numpy(make())[None]
            length = torch.tensor([audio.shape[1]])
            mel, mel_len = model.process_signal(audio_signal=audio, audio_signal_length=length)
            mel = mel[:, :, : mel_len.max()]
            golden[f"{name}/mel_frames"] = np.array(mel.shape[2])
            keep = mel if name != "long" else mel[:, :, :1000]  # the long clip's first 1000 frames (size)
            golden[f"{name}/mel"] = keep[0].numpy().astype(np.float32)
            emb, emb_len = model.encoder.pre_encode(x=mel.transpose(1, 2), lengths=mel_len)
            golden[f"{name}/pre_encode"] = emb[0].numpy()
            fc, fc_len = model.frontend_encoder(processed_signal=mel, processed_signal_length=mel_len)
            golden[f"{name}/offline"] = model.forward_infer(fc, fc_len)[0].numpy()
            if name not in ("long", "mid"):
                continue
            for preset, (chunk, rc, fifo, period, cache) in PRESETS.items():
                mods.chunk_len, mods.chunk_right_context, mods.fifo_len = chunk, rc, fifo
                mods.spkcache_update_period, mods.spkcache_len = period, cache
                steps = []
                original = mods.streaming_update

                def recording(streaming_state, chunk, preds, lc=0, rc=0, _orig=original):
                    before = len(margins)
                    state, out = _orig(streaming_state, chunk, preds, lc=lc, rc=rc)
                    steps.append((chunk[:, lc : chunk.shape[1] - rc].clone(), snapshot(state), margins[before:]))
                    return state, out

                mods.streaming_update = recording
                probs = model.forward_streaming(mel, mel_len)[0].numpy()
                mods.streaming_update = original
                golden[f"{name}/streaming/{preset}"] = probs
                if preset == "stress" and name == "long":
                    record_steps(golden, f"{name}/stress_steps", steps)
            # NeMo's post-processing on the very-high streaming output: "start end speaker" rows, 0.01 s.
            probs = torch.from_numpy(golden[f"{name}/streaming/very_high"])
            for label, params in (("defaults", DEFAULTS), ("callhome", CALLHOME)):
                rows = []
                for spk in range(probs.shape[1]):
                    table = ts_vad_post_processing(probs[:, spk], OmegaConf.create(params), unit_10ms_frame_count=8)
                    rows += [[round(float(s), 2), round(float(e), 2), spk] for s, e in table.tolist()]
                golden[f"{name}/segments/{label}"] = np.array(sorted(rows), np.float64).reshape(-1, 3)

    np.savez_compressed(OUT / "goldens.npz", **golden)
    size = (OUT / "goldens.npz").stat().st_size
    print(f"wrote {OUT / 'tiny.nemo'} ({(OUT / 'tiny.nemo').stat().st_size} bytes), goldens.npz ({size} bytes)")
    stress = golden["long/stress_steps/margin"]
    done = stress[~np.isnan(stress)]
    print(f"stress preset: {len(stress)} steps, {done.size} compressions, {int((done == 0).sum())} zero margins")


class Snapshot:
    """The streaming state's tensors as they are after one step (NeMo reassigns them on the same object)."""

    def __init__(self, state):
        self.spkcache = state.spkcache.clone()
        self.fifo = state.fifo.clone()
        self.spkcache_preds = None if state.spkcache_preds is None else state.spkcache_preds.clone()
        self.mean_sil_emb = state.mean_sil_emb.clone()
        self.n_sil_frames = state.n_sil_frames.clone()


def snapshot(state) -> Snapshot:
    return Snapshot(state)


def record_steps(golden: dict, key: str, steps: list) -> None:
    """Per step: cache and FIFO lengths, the cache's frames as global frame indices (-1: a silence slot), the
    cache's predictions once compressed, the mean silence embedding and count, the compression's margin."""
    frames = torch.cat([chunk[0] for chunk, _, _ in steps]).numpy()
    n = len(steps)
    cache_len = max(s.spkcache.shape[1] for _, s, _ in steps)
    index = np.full((n, cache_len), -2, np.int32)
    preds = np.full((n, cache_len, 4), np.nan, np.float32)
    for i, (_, s, _) in enumerate(steps):
        cache = s.spkcache[0].numpy()
        for j, row in enumerate(cache):
            hits = np.flatnonzero((frames == row).all(axis=1))
            index[i, j] = hits[0] if len(hits) else -1
        if s.spkcache_preds is not None:
            preds[i, : s.spkcache_preds.shape[1]] = s.spkcache_preds[0].numpy()
    golden[f"{key}/spkcache_len"] = np.array([s.spkcache.shape[1] for _, s, _ in steps])
    golden[f"{key}/fifo_len"] = np.array([s.fifo.shape[1] for _, s, _ in steps])
    golden[f"{key}/spkcache_index"] = index
    golden[f"{key}/spkcache_preds"] = preds
    golden[f"{key}/mean_sil_emb"] = np.stack([s.mean_sil_emb[0].numpy() for _, s, _ in steps])
    golden[f"{key}/n_sil_frames"] = np.array([int(s.n_sil_frames[0]) for _, s, _ in steps])
    golden[f"{key}/margin"] = np.array([m[0] if m else np.nan for _, _, m in steps], np.float64)


if __name__ == "__main__":
    main()
