"""Streaming Sortformer against NVIDIA NeMo: a tiny random checkpoint written by NeMo's own save_to
(scripts/sortformer_goldens.py) is loaded through the production loader, without torch, and every stage is
compared with what NeMo computed on the same synthetic clips."""

from __future__ import annotations

import io
import json
import pickle
import subprocess
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.nemo import archive, features
from omnid.engine.nemo.features import log_mel
from omnid.engine.nemo.torch_zip import read_state_dict
from omnid.engine.sortformer import checkpoint as ck
from omnid.engine.sortformer.engine import SortformerEngine
from tests.helpers import nemo_with
from tests.sortformer_clips import CLIPS

GOLDENS = Path(__file__).parent / "goldens" / "sortformer_tiny"
NEMO = GOLDENS / "tiny.nemo"
STRESS = {"chunk_len": 12, "chunk_right_context": 2, "fifo_len": 16, "spkcache_update_period": 20, "spkcache_len": 32}
PRESETS = {"very_high": {"chunk_len": 340, "chunk_right_context": 40, "fifo_len": 40, "spkcache_update_period": 300},
           "low": {"chunk_len": 6, "chunk_right_context": 7, "fifo_len": 188, "spkcache_update_period": 144},
           "stress": STRESS}


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDENS / "goldens.npz"))


@pytest.fixture(scope="module")
def engine() -> SortformerEngine:
    return SortformerEngine("sortformer-tiny", NEMO)


def test_the_nemo_file_loads_without_torch_and_states_its_own_constants():
    code = ("import sys, omnid; from omnid.engine.sortformer.checkpoint import load; "
            f"c = load({str(NEMO)!r}); print(c.layout, c.dims.fc_layers, c.dims.tf_d_model, c.streaming.sil_threshold,"
            " c.streaming.spkcache_sil_frames_per_spk, c.streaming.max_index, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    # The checkpoint's own v2 values, which differ from mlx-audio's class defaults (0.1, 5, 10000).
    assert out == ["nemo", "2", "32", "0.2", "3", "99999", "False"]


def test_mel_matches_nemo_with_its_frame_rule(golden):
    for name, make in CLIPS.items():
        audio = make()
        mel = log_mel(audio, ck.FrontEnd())
        assert len(mel) == int(golden[f"{name}/mel_frames"]) == len(audio) // 160
        ref = golden[f"{name}/mel"].T
        assert np.abs(mel[: len(ref)] - ref).max() <= 1e-3, name
        assert len(log_mel(audio, ck.FrontEnd(), keep_last=True)) == 1 + len(audio) // 160  # feed mode


def test_pre_encode_and_offline_probabilities_match_nemo(engine, golden):
    for name in CLIPS:
        mel = golden[f"{name}/mel"].T
        if name == "long":
            continue  # its stored mel is a prefix only
        emb = np.array(engine.model.pre_encode(mel))
        ref = golden[f"{name}/pre_encode"]
        assert emb.shape == ref.shape
        assert np.abs(emb - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max())), name
        probs = np.array(engine.model.forward(engine.model.pre_encode(mel)))
        assert probs.shape == golden[f"{name}/offline"].shape
        assert np.abs(probs - golden[f"{name}/offline"]).max() <= 1e-5, name


def test_the_cpu_numpy_layers_are_the_mlx_layers(engine, golden):
    """On MLX's CPU device one sequence runs through cpu_layers' numpy blocks; two at once (or Metal) through
    model.py's MLX layers. Both give the same pre-encode, Conformer, Transformer and speaker probabilities, to
    float32 rounding, so the NeMo parity above holds for the MLX layers too."""
    import mlx.core as mx

    model = engine.model
    mel = mx.array(golden["mid/mel"].T)
    cpu = model.fc_encoder.subsampling(mel[None])
    mlx_pair = model.fc_encoder.subsampling(mx.stack([mel, mel]))
    assert cpu.shape[0] == 1 and mlx_pair.shape[0] == 2
    scale = float(mx.abs(cpu).max().item())
    assert float(mx.abs(cpu[0] - mlx_pair[0]).max().item()) <= 1e-5 * max(1.0, scale)
    stages = [model.fc_encoder.encode, model.sortformer_modules.project, model.tf_encoder, model.sortformer_modules.speakers]
    one, two = cpu, mx.concatenate([cpu, cpu])
    for stage in stages:
        one, two = stage(one), stage(two)
        scale = float(mx.abs(one).max().item())
        assert one.shape[1:] == two.shape[1:]
        assert float(mx.abs(one[0] - two[0]).max().item()) <= 1e-5 * max(1.0, scale), stage


def test_offline_from_audio_matches_nemo_on_every_clip(engine, golden):
    for name, make in CLIPS.items():
        probs = engine.offline(make())
        assert np.abs(probs - golden[f"{name}/offline"]).max() <= 1e-4, name


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("clip", ["mid", "long"])
def test_streaming_probabilities_match_nemo_forward_streaming(engine, golden, clip, preset):
    s = replace(engine.streaming, **PRESETS[preset])
    probs = engine.diarize_mel(engine.mel(CLIPS[clip]()), s)
    ref = golden[f"{clip}/streaming/{preset}"]
    assert probs.shape == ref.shape
    assert np.abs(probs - ref).max() <= 1e-4


def test_stress_preset_state_matches_nemo_step_by_step(engine, golden):
    """Cache and FIFO lengths and the frames the cache keeps, exact, up to the first compression whose margin
    (excluding exact ties) is under 1e-4; the cache's predictions and the silence profile within 1e-4."""
    key = "long/stress_steps"
    s = replace(engine.streaming, **STRESS)
    frames: list[np.ndarray] = []
    steps: list[tuple] = []

    def frame_of(seen: np.ndarray, row: np.ndarray) -> int:
        """The frame a cache row copies (-1: none, a silence row), as the first of the frames equal to it within
        rounding: frames of identical audio are bitwise equal in NeMo, but a BLAS may round rows of one product
        differently by the block they fall in (6.6e-7 apart on one OpenBLAS here)."""
        copied = np.flatnonzero((seen == row).all(axis=1))
        if not len(copied):
            return -1
        return int(np.flatnonzero(np.abs(seen - row).max(axis=1) <= 1e-5)[0])

    def on_step(state, chunk, margin):
        frames.append(chunk)
        seen = np.concatenate(frames)
        index = [frame_of(seen, row) for row in state.spkcache]
        steps.append((len(state.spkcache), len(state.fifo), index, state.spkcache_preds.copy() if state.compressed
                      else None, state.mean_sil_emb.copy(), state.n_sil_frames, margin))

    engine.diarize_mel(engine.mel(CLIPS["long"]()), s, on_step=on_step)
    margins = golden[f"{key}/margin"]
    assert len(steps) == len(margins)
    compared = 0
    for i, (n_cache, n_fifo, index, preds, sil, n_sil, margin) in enumerate(steps):
        assert n_cache == golden[f"{key}/spkcache_len"][i] and n_fifo == golden[f"{key}/fifo_len"][i], i
        assert index == list(golden[f"{key}/spkcache_index"][i][:n_cache]), i
        assert n_sil == golden[f"{key}/n_sil_frames"][i]
        assert np.abs(sil - golden[f"{key}/mean_sil_emb"][i]).max() <= 1e-4
        if preds is not None:
            assert np.abs(preds - golden[f"{key}/spkcache_preds"][i][:n_cache]).max() <= 1e-4
        assert (margin is None) == np.isnan(margins[i])
        compared += 1
        if margin is not None and margins[i] < 1e-4:
            break  # a near-tie: beyond it two correct implementations may keep different frames
    assert compared >= 10 and int((~np.isnan(margins[:compared])).sum()) >= 3


# --- the loader's refusals -----------------------------------------------------------------------------------


def _nemo_with(tmp_path: Path, yaml_edit=None, state_edit=None) -> Path:
    return nemo_with(NEMO, tmp_path, yaml_edit=yaml_edit, state_edit=state_edit)


def test_a_v1_checkpoint_is_refused_naming_normalize(tmp_path):
    bad = _nemo_with(tmp_path, yaml_edit=lambda y: y.replace("normalize: NA", "normalize: per_feature"))
    with pytest.raises(CheckpointError, match="normalize"):
        ck.load(bad)


def test_a_missing_streaming_constant_is_an_error_never_a_default(tmp_path):
    bad = _nemo_with(tmp_path, yaml_edit=lambda y: y.replace("sil_threshold: 0.2", "unused_key: 0.2"))
    with pytest.raises(CheckpointError, match="sil_threshold"):
        ck.load(bad)


def _edit_pickle(raw: bytes, old: bytes, new: bytes) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(raw))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                data = data.replace(old, new)
            dst.writestr(info, data)
    return buf.getvalue()


def test_a_missing_or_unexpected_tensor_is_named(tmp_path):
    # Renaming one tensor in the pickle makes the expected name missing and the new one unexpected.
    name = b"sortformer_modules.first_hidden_to_hidden.bias"
    bad = _nemo_with(tmp_path, state_edit=lambda raw: _edit_pickle(raw, name, name.replace(b"first", b"frist")))
    with pytest.raises(CheckpointError, match="missing tensor sortformer_modules.first_hidden_to_hidden.bias"):
        ck.load(bad)


def test_the_nemo_front_end_buffers_are_checked_against_omnids(monkeypatch):
    """The .nemo's own filterbank and window agree with omnid's within 1e-6 (it loads); a front end off by
    1e-5 (here omnid's, perturbed) fails at load, naming the buffer."""
    assert ck.load(NEMO).layout == "nemo"
    real = features.mel_filterbank
    monkeypatch.setattr(features, "mel_filterbank", lambda front: real(front) + np.float32(1e-5))
    with pytest.raises(CheckpointError, match="preprocessor.featurizer.fb differs"):
        ck.load(NEMO)


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (subprocess.call, (["touch", str(marker)],))

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"x": Evil()}, protocol=4))
    with pytest.raises(CheckpointError, match="refused to load subprocess.call"):
        read_state_dict(io.BytesIO(buf.getvalue()), "evil.ckpt")
    assert not marker.exists()


def test_the_mlx_community_layout_needs_its_streaming_constants(tmp_path, engine):
    folder = mlx_folder(tmp_path, positions="zero")
    loaded = ck.load(folder)
    assert loaded.layout == "mlx" and loaded.streaming == ck.load(NEMO).streaming
    config = json.loads((folder / "config.json").read_text())
    del config["modules_config"]["pred_score_threshold"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="pred_score_threshold"):
        ck.load(folder)


def mlx_folder(tmp_path: Path, positions: str) -> Path:
    """tiny.nemo converted to the mlx-community layout by mlx-audio's own converter rules."""
    from tests.sortformer_reference import convert

    return convert(NEMO, tmp_path / f"mlx-{positions}", positions)


def test_yaml_interpolations_resolve_against_the_root():
    cfg = {"sample_rate": 16000, "preprocessor": {"sample_rate": "${model.sample_rate}", "name": "sr=${sample_rate}"},
           "a": {"b": "${preprocessor.sample_rate}"}}
    assert archive.resolve_interpolations(cfg) == {"sample_rate": 16000,
                                              "preprocessor": {"sample_rate": 16000, "name": "sr=16000"},
                                              "a": {"b": 16000}}
    with pytest.raises(CheckpointError, match="unresolved reference"):
        archive.resolve_interpolations({"x": "${nowhere.at_all}"})


def test_a_pinned_checkpoint_whose_bytes_changed_fails_naming_the_file(tmp_path):
    from omnid.engine.pins import sha256

    good = sha256(NEMO)
    assert ck.load(NEMO, {"tiny.nemo": good}).layout == "nemo"
    with pytest.raises(CheckpointError, match=r"tiny\.nemo: SHA-256 .* does not match its pin"):
        ck.load(NEMO, {"tiny.nemo": "0" * 64})


def test_a_float16_mlx_checkpoint_is_computed_in_float32(tmp_path, engine):
    import mlx.core as mx

    folder = mlx_folder(tmp_path, positions="zero")
    weights = dict(mx.load(str(folder / "model.safetensors")))
    mx.save_safetensors(str(folder / "model.safetensors"), {k: v.astype(mx.float16) for k, v in weights.items()})
    config = json.loads((folder / "config.json").read_text())
    config["dtype"] = "float16"
    (folder / "config.json").write_text(json.dumps(config))
    half = SortformerEngine("half", folder)
    from mlx.utils import tree_flatten

    assert {p.dtype for _, p in tree_flatten(half.model.parameters())} == {mx.float32}
    audio = CLIPS["mid"]()
    # Only the weights' float16 rounding separates the two (a few 1e-3 on a random model's probabilities).
    assert np.abs(half.offline(audio) - engine.offline(audio)).max() < 0.05


def test_omnid_diarize_prints_one_line_per_turn():
    wav = GOLDENS / "two_voices_espeak.flac"
    out = subprocess.run([sys.executable, "-m", "omnid", "diarize", str(wav), "--model", str(NEMO)],
                         capture_output=True, text=True, check=True, timeout=300).stdout.splitlines()
    engine = SortformerEngine("t", NEMO)
    from omnid.audio import decode_audio
    from omnid.engine.diarization import turns
    from omnid.engine.sortformer.engine import PRESETS

    want = [f"{t.start:.2f} {t.end:.2f} speaker_{t.speaker}"
            for t in turns(engine.diarize(decode_audio(wav), PRESETS["very_high"]))]
    assert out == want and out
