"""Qwen3-ASR checkpoints in every layout a user has, through the one production loader; and what a broken one says."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.qwen3.checkpoint import is_qwen3_asr, load_checkpoint
from omnid.engine.qwen3_asr.engine import Qwen3AsrEngine, QwenOptions
from tests.qwen_goldens import (
    TINY,
    arrays,
    clip,
    meta,
    tiny_weights,
    write_hf,
    write_mlx_community,
    write_original,
)

GUARD_OFF = QwenOptions(loop_window=0)


def reference_logits(engine: Qwen3AsrEngine, case: str) -> np.ndarray:
    c = meta()["cases"][case]
    features = engine.encode(clip(c["clip"]))
    return np.array(engine.prefill_logits(arrays()[f"{case}/prompt_ids"].tolist(), features))


@pytest.fixture(scope="module")
def fp32() -> Qwen3AsrEngine:
    return Qwen3AsrEngine("tiny", TINY, options=GUARD_OFF)


def test_the_original_layout_is_detected_with_its_tied_head() -> None:
    ckpt = load_checkpoint(TINY)
    assert ckpt.layout == "qwen" and ckpt.text.tied and not ckpt.quantized
    assert "lm_head.weight" not in ckpt.weights  # the stored copy is checked, the embedding is the head
    assert ckpt.ids.audio_end is None  # absent from this config.json: the tokenizer's is used
    assert is_qwen3_asr(TINY)


def test_a_stored_head_that_differs_from_the_tied_embedding_is_reported(tmp_path: Path) -> None:
    def change(w, _folder):
        w["thinker.lm_head.weight"] = w["thinker.lm_head.weight"] * 2
    assert load_checkpoint(broken(tmp_path, change)).head_differs
    assert not load_checkpoint(TINY).head_differs


def test_empty_audio_is_empty_text_without_the_model(fp32: Qwen3AsrEngine) -> None:
    from omnid.engine.options import TranscribeOptions

    t = fp32.transcribe(np.zeros(100, np.float32), TranscribeOptions())
    assert (t.text, t.segments, t.generated_tokens) == ("", [], 0)


def test_transformers_hf_layout_gives_the_same_logits(tmp_path: Path, fp32: Qwen3AsrEngine) -> None:
    hf = Qwen3AsrEngine("tiny-hf", write_hf(tmp_path / "hf"), options=GUARD_OFF)
    assert hf.layout == "hf"
    for case in ("mid_auto", "long_en"):
        # Without the audio k bias (softmax cancels a per-query constant): equal up to rounding.
        assert np.abs(reference_logits(hf, case) - reference_logits(fp32, case)).max() <= 1e-4


# This tiny model's logits are scaled up (final norm gain x4, to make its greedy decodes end), and low-precision
# errors with them: "clear" for bf16 and 8-bit weights is a top1-top2 margin over 0.5 (measured: no disagreement
# above 0.28 on these goldens).
CLEAR_LOW_PRECISION = 0.5


def test_bf16_original_layout_loads_and_follows_fp32(tmp_path: Path, fp32: Qwen3AsrEngine) -> None:
    bf16 = Qwen3AsrEngine("tiny-bf16", write_original(tmp_path / "bf16", mx.bfloat16), options=GUARD_OFF)
    for case in ("mid_auto", "long_auto"):
        ours, ref = reference_logits(bf16, case), reference_logits(fp32, case)
        clear = arrays()[f"{case}/prefill_margin"] > CLEAR_LOW_PRECISION
        assert clear.sum() >= 20 and (ours.argmax(-1) == ref.argmax(-1))[clear].all()


@pytest.mark.parametrize("bits", [8, 4])
def test_mlx_community_quantized_layout_loads_exactly(tmp_path: Path, bits: int) -> None:
    """The quantized checkpoint computes what its dequantized float twin computes: the loader packs nothing
    wrong (bits and group size inferred from the shapes, the embedding quantized too, the audio tower not)."""
    folder = write_mlx_community(tmp_path / f"q{bits}", bits)
    q = Qwen3AsrEngine(f"tiny-{bits}bit", folder, options=GUARD_OFF)
    assert q.layout == "mlx" and q.quantized
    ckpt = load_checkpoint(folder)
    assert {(m.bits, m.group_size) for m in ckpt.quantized.values()} == {(bits, 32)}
    assert "text.embed_tokens" in ckpt.quantized and not any(m.startswith("audio.") for m in ckpt.quantized)
    twin = Qwen3AsrEngine("twin", write_original(tmp_path / f"twin{bits}", decoder_bits=bits), options=GUARD_OFF)
    for case in ("short_auto", "mid_context", "long_auto"):
        ours, ref = reference_logits(q, case), reference_logits(twin, case)
        assert np.abs(ours - ref).max() <= 1e-3 * max(1.0, np.abs(ref).max())


def test_8_bit_follows_fp32_wherever_its_margin_is_clear(tmp_path: Path, fp32: Qwen3AsrEngine) -> None:
    q = Qwen3AsrEngine("tiny-8bit", write_mlx_community(tmp_path / "q8", 8), options=GUARD_OFF)
    for case in ("short_auto", "mid_context", "long_auto"):
        ours, ref = reference_logits(q, case), reference_logits(fp32, case)
        clear = arrays()[f"{case}/prefill_margin"] > CLEAR_LOW_PRECISION
        assert clear.sum() >= 10 and (ours.argmax(-1) == ref.argmax(-1))[clear].all()
    c = meta()["cases"]["mid_context"]  # greedy tokens too
    features = q.encode(clip(c["clip"]))
    gen = q.generate(arrays()["mid_context/prompt_ids"].tolist(), features, c["max_new_tokens"])
    gold, margins = arrays()["mid_context/greedy"].tolist(), arrays()["mid_context/margins"]
    assert min(margins) > CLEAR_LOW_PRECISION and gen.tokens == gold


def test_an_unquantized_mlx_community_layout_loads(tmp_path: Path, fp32: Qwen3AsrEngine) -> None:
    plain = Qwen3AsrEngine("tiny-mlx", write_mlx_community(tmp_path / "mlx", None), options=GUARD_OFF)
    assert plain.layout == "mlx" and not plain.quantized
    assert np.abs(reference_logits(plain, "mid_en") - reference_logits(fp32, "mid_en")).max() <= 1e-5


# --- what a broken checkpoint says ----------------------------------------------------------------------------------


def broken(tmp_path: Path, change) -> Path:
    folder = write_original(tmp_path / "broken")
    weights = tiny_weights()
    change(weights, folder)
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder


def test_a_misshaped_tensor_is_named_with_its_file(tmp_path: Path) -> None:
    def change(w, _folder):
        w["thinker.model.layers.1.mlp.up_proj.weight"] = w["thinker.model.layers.1.mlp.up_proj.weight"][:, :32]
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor text\.layers\.1\.mlp\.up_proj\.weight has "
                                              r"shape \(128, 32\), expected \(128, 64\)"):
        load_checkpoint(broken(tmp_path, change))


def test_a_missing_or_unknown_tensor_is_named(tmp_path: Path) -> None:
    def drop(w, _folder):
        del w["thinker.audio_tower.layers.0.fc2.bias"]
    with pytest.raises(CheckpointError, match=r"tensor audio\.layers\.0\.fc2\.bias missing"):
        load_checkpoint(broken(tmp_path / "a", drop))

    def add(w, _folder):
        w["thinker.audio_tower.extra.weight"] = mx.zeros((2,))
    with pytest.raises(CheckpointError, match=r"unexpected tensor audio\.extra\.weight"):
        load_checkpoint(broken(tmp_path / "b", add))


def test_config_values_are_read_from_the_file_not_class_defaults(tmp_path: Path) -> None:
    def change(_w, folder):
        config = json.loads((folder / "config.json").read_text())
        del config["thinker_config"]["audio_token_id"]
        (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="audio_token_id missing"):
        load_checkpoint(broken(tmp_path, change))


def test_token_ids_of_config_and_tokenizer_must_agree(tmp_path: Path) -> None:
    def change(_w, folder):
        config = json.loads((folder / "config.json").read_text())
        config["thinker_config"]["audio_token_id"] += 1
        (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="audio token ids"):
        Qwen3AsrEngine("x", broken(tmp_path, change))


def test_pins_guard_every_checkpoint_file(tmp_path: Path) -> None:
    folder = write_original(tmp_path / "pinned")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: SHA-256 .* does not match its pin"):
        Qwen3AsrEngine("x", folder, pins={"model.safetensors": "0" * 64})
    with pytest.raises(CheckpointError, match=r"vocab\.json: SHA-256"):
        Qwen3AsrEngine("x", folder, pins={"vocab.json": "0" * 64})


def test_a_folder_without_weights_or_config_says_so(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="config.json: missing"):
        load_checkpoint(tmp_path)
    (tmp_path / "config.json").write_text((TINY / "config.json").read_text())
    with pytest.raises(CheckpointError, match=r"no \*\.safetensors"):
        load_checkpoint(tmp_path)
    assert not is_qwen3_asr(tmp_path / "nowhere")
