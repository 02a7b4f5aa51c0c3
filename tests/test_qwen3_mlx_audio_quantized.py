"""Qwen3-ASR and Qwen3-ForcedAligner folders quantized by mlx-audio 0.6.2's own converter (uniform 4, 5, 6 and 8 bits
at its default group of 64, its mixed recipes, per
module under mlx-audio's module names, and the mxfp4 / nvfp4 / mxfp8 modes, which have no ``.biases``), made here
from the tiny random checkpoints, loaded through the production loader and compared with mlx-audio's own model on the
same folder; and what a broken quantization block or a missing scale says."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from omnid.engine.cpu_packed import PackedLinear
from omnid.engine.errors import CheckpointError
from omnid.engine.quantization import offered_modes
from omnid.engine.qwen3.checkpoint import load_checkpoint
from omnid.engine.qwen3_aligner.engine import Qwen3AlignerEngine
from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions
from tests import qwen3_mlx_audio as ref
from tests.qwen_goldens import TINY, arrays, meta

ALIGNER = Path(__file__).parent / "goldens" / "qwen3_aligner_tiny"
GUARD_OFF = QwenOptions(loop_window=0)
# What `python -m mlx_audio.convert -q` writes for each choice (the mode's default bits and group size).
RECIPES: dict[str, dict[str, Any]] = {
    "4bit": {"bits": 4}, "5bit": {"bits": 5}, "6bit": {"bits": 6}, "8bit": {"bits": 8},
    "mixed_2_6": {"recipe": "mixed_2_6"}, "mixed_3_4": {"recipe": "mixed_3_4"},
    "mixed_3_6": {"recipe": "mixed_3_6"}, "mixed_4_6": {"recipe": "mixed_4_6"},
    "mxfp4": {"mode": "mxfp4"}, "nvfp4": {"mode": "nvfp4"}, "mxfp8": {"mode": "mxfp8"},
}
FLOAT_MODES = ("mxfp4", "nvfp4", "mxfp8")
CASES = ("short_auto", "mid_context", "long_auto")
# In affine mode omnid and mlx-audio do the same arithmetic: logits equal up to float32 rounding (measured: at most
# 5.3e-5 with logits up to 30). In the floating-point modes mlx-audio's quantized embedding gives bfloat16 and it
# rounds the audio embeddings to that before the decoder; omnid keeps float32 (the embedding's values are exact in
# either): measured at most 0.18, 3% of the float-versus-quantized difference mlx-audio's own run shows (3.5 to
# 23 here). Bound: a tenth of that difference.
AFFINE_REL = 1e-5
FLOAT_MODE_SHARE = 0.1


def _mode(name: str) -> str:
    return name if name in FLOAT_MODES else "affine"


def _offered(name: str) -> None:
    # The locked MLX offers every mode mlx-audio 0.6.2 writes; one that stopped would be a regression, not a skip.
    assert _mode(name) in offered_modes(), f"this MLX does not quantize in {_mode(name)}"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path, str], Path]:
    """mlx-audio's converter run once per source checkpoint and choice ("float32": unquantized)."""
    root = tmp_path_factory.mktemp("mlx_audio")
    done: dict[tuple[Path, str], Path] = {}

    def make(source: Path, name: str) -> Path:
        if (source, name) not in done:
            dest = root / f"{source.name}-{name}"
            kwargs = RECIPES.get(name, {})
            done[source, name] = ref.convert(source, dest, quantize=name != "float32", **kwargs)
        return done[source, name]

    return make


def _mel(case: str) -> np.ndarray:
    """(frames, n_mels) log-mel of a golden case (the official one: both models read the same input)."""
    return arrays()[f"{meta()['cases'][case]['clip']}/mel"].T


def _ids(case: str) -> list[int]:
    return arrays()[f"{case}/prompt_ids"].tolist()


def _ours(engine: Qwen3AsrEngine, case: str) -> np.ndarray:
    audio = engine.model.audio(mx.array(_mel(case)))
    return np.array(engine.prefill_logits(_ids(case), audio))


def _margins(logits: np.ndarray) -> np.ndarray:
    top = np.sort(logits, axis=-1)[..., -2:]
    return top[..., 1] - top[..., 0]


def _clear(margins: list[float], limit: float) -> int:
    """Leading greedy choices made by a margin over ``limit``."""
    return next((i for i, m in enumerate(margins) if m <= limit), len(margins))


def test_a_mixed_recipe_keeps_each_modules_own_bits(made: Callable[[Path, str], Path]) -> None:
    """The per-module entries are under mlx-audio's names; omnid packs each module at its own width (6-bit for
    layer 1's v_proj and down_proj in mixed_4_6, 4-bit elsewhere), looked up under its own names."""
    folder = made(TINY, "mixed_4_6")
    block = json.loads((folder / "config.json").read_text())["quantization"]
    per_module = {k: v for k, v in block.items() if isinstance(v, dict)}
    assert {v["bits"] for v in per_module.values()} == {4, 6} and block["bits"] == 4
    ckpt = load_checkpoint(folder)
    assert {k.replace("model.", "text.", 1): v["bits"] for k, v in per_module.items()} == {
        k: q.bits for k, q in ckpt.quantized.items()}
    assert ckpt.quantized["text.layers.1.mlp.down_proj"].bits == 6
    engine = Qwen3AsrEngine("mixed", folder, options=GUARD_OFF)
    assert engine.model.text.layers[1].mlp.down_proj.bits == 6 and engine.model.text.layers[0].mlp.down_proj.bits == 4


@pytest.mark.parametrize("name", list(RECIPES))
def test_mlx_audio_quantized_folders_compute_as_mlx_audio(name: str, made: Callable[[Path, str], Path]) -> None:
    _offered(name)
    folder = made(TINY, name)
    ckpt = load_checkpoint(folder)
    assert ckpt.layout == "mlx" and {q.mode for q in ckpt.quantized.values()} == {_mode(name)}
    assert "text.embed_tokens" in ckpt.quantized and not any(m.startswith("audio.") for m in ckpt.quantized)
    # ours: the MLX decoder over the packed modules (Metal's path); numpy below: the CPU's default, widened at load.
    ours, theirs, float32 = Qwen3AsrEngine(name, folder, options=GUARD_OFF, cpu_decoder=False), ref.load(folder), ref.load(
        made(TINY, "float32"))
    worst = 0.0
    for case in CASES:
        a, b = _ours(ours, case), ref.logits(theirs, _ids(case), _mel(case))
        spread = np.abs(b - ref.logits(float32, _ids(case), _mel(case))).max()
        diff = np.abs(a - b).max()
        assert spread > 0.1  # the quantization shows
        if _mode(name) == "affine":
            assert diff <= AFFINE_REL * max(1.0, np.abs(b).max()), (case, diff)
        else:
            assert diff <= FLOAT_MODE_SHARE * spread, (case, diff, spread)
        clear = _margins(b) > 2 * diff
        assert clear.mean() > 0.75 and (a.argmax(-1) == b.argmax(-1))[clear].all()
        worst = max(worst, diff)
    numpy = Qwen3AsrEngine(name, folder, options=GUARD_OFF, cpu_decoder=True)  # the weights widened at load
    eos = set(meta()["eos"]) if isinstance(meta()["eos"], list) else {meta()["eos"]}
    compared = 0
    for case in ("mid_auto", "mid_context", "long_en", "short_auto"):
        budget = meta()["cases"][case]["max_new_tokens"]
        tokens, margins = ref.greedy(theirs, _ids(case), _mel(case), budget, eos)
        n = _clear(margins, 2 * worst)  # a choice by a wider margin cannot flip
        compared += n
        for engine in (ours, numpy):
            got = engine.generate(_ids(case), engine.model.audio(mx.array(_mel(case))), budget).tokens
            assert got[:n] == tokens[:n] and (n < len(tokens) or got == tokens), (case, got, tokens)
    assert compared >= 2


@pytest.mark.parametrize("name", ["4bit", "8bit", "mixed_2_6", "mxfp4", "nvfp4", "mxfp8"])
def test_quantized_logits_are_exactly_those_of_the_dequantized_weights(
        name: str, made: Callable[[Path, str], Path], tmp_path: Path) -> None:
    """omnid computes the packed weights exactly: against a float32 folder holding MLX's own dequantization of each
    packed module (mode, bits and group size as the converter wrote them), through both decoders (the numpy one
    multiplies 4- and 8-bit affine modules as they are packed, cpu_packed.py, and widens the others)."""
    _offered(name)
    folder = made(TINY, name)
    config = json.loads((folder / "config.json").read_text())
    block = config.pop("quantization")
    config.pop("quantization_config", None)
    twin = tmp_path / "twin"
    shutil.copytree(folder, twin)
    (twin / "model.safetensors.index.json").unlink()
    (twin / "config.json").write_text(json.dumps(config))
    packed = mx.load(str(folder / "model.safetensors"))
    assert isinstance(packed, dict)
    wide: dict[str, mx.array] = {}
    for key, value in packed.items():
        module = key.rsplit(".", 1)[0]
        if key.endswith((".scales", ".biases")):
            continue
        if module + ".scales" in packed:
            entry = block.get(module, block)
            value = mx.dequantize(value, packed[module + ".scales"], packed.get(module + ".biases"),
                                  group_size=entry["group_size"], bits=entry["bits"], mode=entry.get("mode", "affine"),
                                  dtype=mx.float32)
        wide[key] = value
    mx.save_safetensors(str(twin / "model.safetensors"), wide)
    plain = Qwen3AsrEngine("twin", twin, options=GUARD_OFF)
    assert not plain.quantized
    q = Qwen3AsrEngine(name, folder, options=GUARD_OFF, cpu_decoder=False)  # the packed MLX decoder
    for case in CASES:
        a, b = _ours(q, case), _ours(plain, case)
        assert np.abs(a - b).max() <= 1e-5 * max(1.0, np.abs(b).max())
    numpy, numpy_twin = (Qwen3AsrEngine(n, f, options=GUARD_OFF, cpu_decoder=True) for n, f in ((name, folder),
                                                                                             ("twin", twin)))
    packed_here = {type(m).__name__ for m in (numpy.cpu_decoder.head, numpy.cpu_decoder.layers[1].down,
                                                 *numpy.cpu_decoder.layers[1].gate_up.maps)}
    packs = name in ("4bit", "8bit")
    assert packed_here == ({"PackedLinear"} if packs else {"Linear"})
    # A packed layer's maps of one input run in one pass over the threads, read from the MLX module's own arrays.
    assert [j.packed for j in (numpy.cpu_decoder.layers[1].qkv, numpy.cpu_decoder.layers[1].gate_up)] == [packs] * 2
    if packs:
        down = numpy.cpu_decoder.layers[1].down
        assert isinstance(down, PackedLinear)
        assert np.shares_memory(down.packed, np.asarray(numpy.model.decoder.layers[1].mlp.down_proj.weight))
    for case in CASES:
        a, b = (_numpy_logits(e, case) for e in (numpy, numpy_twin))
        assert np.abs(a - b).max() <= 1e-5 * max(1.0, np.abs(b).max()), case
    case = "long_budget"
    got, want = (e.generate(_ids(case), e.model.audio(mx.array(_mel(case))), 5).tokens for e in (numpy, numpy_twin))
    assert got == want


def _numpy_logits(engine: Qwen3AsrEngine, case: str) -> np.ndarray:
    """The numpy decoder's logits after the prompt, and after one step on its greedy choice."""
    x = engine.model.embed(_ids(case), engine.tokenizer.ids.audio_pad, engine.model.audio(mx.array(_mel(case))))
    row, logits = engine.cpu_decoder.prefill(np.array(x[0]), 2, lambda: None)
    return np.stack([logits, engine.cpu_decoder.step([int(logits.argmax())], [row])[0]])


@pytest.mark.parametrize("name", ["8bit", "mixed_4_6", "mxfp4"])
def test_a_quantized_forced_aligner_classifies_as_mlx_audio(name: str, made: Callable[[Path, str], Path]) -> None:
    _offered(name)
    from omnid.engine.qwen3.features import features_mel, normalized
    from tests.test_qwen3_aligner import corpus_audio, goldens

    folder = made(ALIGNER, name)
    theirs, float32 = ref.load(folder), ref.load(made(ALIGNER, "float32"))
    ckpt = load_checkpoint(folder)
    assert "lm_head" in ckpt.quantized and {q.mode for q in ckpt.quantized.values()} == {_mode(name)}
    if name.startswith("mixed"):
        assert ckpt.quantized["lm_head"].bits == 6  # the recipe's high bits for the head, under its own name
    for cpu in (False, True):
        ours = Qwen3AlignerEngine(name, folder, cpu_decoder=cpu)
        for case in ("en_short", "zh"):
            c = goldens()["cases"][case]
            mel = np.array(features_mel(normalized(corpus_audio(c["clip"])), 128))
            ids = c["input_ids"]
            rows = [i for i, t in enumerate(ids) if t == ours.timestamps.token_id]
            b = ref.logits(theirs, ids, mel)[rows]
            spread = np.abs(b - ref.logits(float32, ids, mel)[rows]).max()
            x = ours.model.embed(ids, ours.tokenizer.ids.audio_pad, ours.model.audio(mx.array(mel)))
            a = np.array(ours.model.logits(ours.model.text(x, ours.model.new_caches())[0]))[rows]
            diff = np.abs(a - b).max()
            bound = AFFINE_REL * max(1.0, np.abs(b).max()) if _mode(name) == "affine" else FLOAT_MODE_SHARE * spread
            assert spread > 0.1 and diff <= bound, (case, diff, spread)
            clear = _margins(b) > 2 * max(diff, 1e-3)
            classes = np.array(ours.slot_classes(mx.array(mel), ids))
            assert clear.sum() >= len(rows) // 2 and (classes == b.argmax(-1))[clear].all()


# --- what a broken quantized folder says ----------------------------------------------------------------------------


def _copy(made: Callable[[Path, str], Path], name: str, dest: Path) -> Path:
    shutil.copytree(made(TINY, name), dest)
    return dest


def _edit_block(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    config = json.loads((folder / "config.json").read_text())
    for key in ("quantization", "quantization_config"):
        change(config[key])
    (folder / "config.json").write_text(json.dumps(config))


def _drop_tensor(folder: Path, name: str) -> None:
    """The folder without one tensor, its index too (a consistent save that lacks it)."""
    tensors = mx.load(str(folder / "model.safetensors"))
    assert isinstance(tensors, dict)
    del tensors[name]
    mx.save_safetensors(str(folder / "model.safetensors"), tensors, metadata={"format": "mlx"})
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    del data["weight_map"][name]
    index.write_text(json.dumps(data))


def test_a_block_whose_bits_disagree_with_the_packed_shapes_is_refused(made, tmp_path: Path) -> None:
    folder = _copy(made, "mixed_4_6", tmp_path / "a")
    _edit_block(folder, lambda b: b["model.layers.1.mlp.down_proj"].update(bits=4))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor text\.layers\.1\.mlp\.down_proj\.weight is "
                                              r"packed 6-bit in groups of 64, but config\.json's "
                                              r"quantization\.model\.layers\.1\.mlp\.down_proj says 4-bit"):
        load_checkpoint(folder)
    if "mxfp4" in offered_modes():
        folder = _copy(made, "mxfp4", tmp_path / "b")
        _edit_block(folder, lambda b: b.update(bits=8))
        with pytest.raises(CheckpointError, match=r"packed 4-bit in groups of 32, but config\.json's quantization says "
                                                  r"8-bit"):
            load_checkpoint(folder)


def test_a_block_in_another_mode_than_the_tensors_is_refused(made, tmp_path: Path) -> None:
    _offered("mxfp4")
    folder = _copy(made, "mxfp4", tmp_path / "a")
    _edit_block(folder, lambda b: b.update(mode="affine"))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor text\.\S+\.biases missing .*affine"):
        load_checkpoint(folder)
    folder = _copy(made, "mixed_3_6", tmp_path / "b")
    _edit_block(folder, lambda b: [v.update(mode="mxfp4") for v in b.values() if isinstance(v, dict)])
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor text\.\S+\.weight has packed shape .* "
                                              r"which fit no mxfp4 quantization"):
        load_checkpoint(folder)


def test_an_unknown_mode_is_refused_naming_the_key(made, tmp_path: Path) -> None:
    folder = _copy(made, "mixed_4_6", tmp_path / "a")
    _edit_block(folder, lambda b: b.update(mode="int3"))
    with pytest.raises(CheckpointError, match=r"config\.json: quantization\.mode: unknown quantization mode 'int3' "
                                              r"\(this MLX offers affine"):
        load_checkpoint(folder)
    folder = _copy(made, "mixed_4_6", tmp_path / "b")
    _edit_block(folder, lambda b: b["model.layers.0.mlp.up_proj"].update(mode="fp6"))
    with pytest.raises(CheckpointError, match=r"config\.json: quantization\.model\.layers\.0\.mlp\.up_proj\.mode: "
                                              r"unknown quantization mode 'fp6'"):
        load_checkpoint(folder)


def test_a_missing_scale_or_bias_is_named(made, tmp_path: Path) -> None:
    folder = _copy(made, "mixed_4_6", tmp_path / "a")
    _drop_tensor(folder, "model.layers.0.mlp.up_proj.scales")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor text\.layers\.0\.mlp\.up_proj\.weight is "
                                              r"packed \(uint32\), but its text\.layers\.0\.mlp\.up_proj\.scales is "
                                              r"missing"):
        load_checkpoint(folder)
    folder = _copy(made, "mixed_4_6", tmp_path / "b")
    _drop_tensor(folder, "model.embed_tokens.biases")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor text\.embed_tokens\.biases missing"):
        load_checkpoint(folder)


def test_a_block_entry_for_a_float_module_is_refused(made, tmp_path: Path) -> None:
    folder = _copy(made, "float32", tmp_path / "a")
    config = json.loads((folder / "config.json").read_text())
    config["quantization"] = {"group_size": 64, "bits": 4, "mode": "affine",
                              "model.layers.0.mlp.up_proj": {"group_size": 64, "bits": 4, "mode": "affine"}}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor text\.layers\.0\.mlp\.up_proj\.weight is "
                                              r"a float matrix without .*quantization\.model\.layers\.0\.mlp\.up_proj "
                                              r"says it is quantized"):
        load_checkpoint(folder)
