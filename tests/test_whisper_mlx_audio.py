"""mlx-audio 0.6.2's Whisper folders, made here by its own converter (tests/whisper_mlx_audio.py), load through
omnid's production loader in both paths (widened to float32 for MLX's CPU device, where the engine runs the encoder
and the decode steps in numpy; kept packed in MLX's quantized layers, each module in its own mode, bits and group,
as on Metal) and compute as mlx-audio's own Whisper computes on the same folder.

What the converter writes (from a transformers folder; it refuses mlx-examples' convert.py folders, their
``alignment_heads`` tensor being no parameter of its model): ``config.json`` (transformers' keys, ``model_type``
whisper, and when quantized ``quantization`` = ``quantization_config`` = ``{"group_size", "bits", "mode"}`` with one
entry per module for a per-module recipe), ``model.safetensors`` with ``model.safetensors.index.json`` (even for one
file) under the mlx-examples names, float16 unless ``--dtype`` (its ``sanitize`` casts to its model's float16 first),
no encoder positions. ``-q`` quantizes each Linear and the token embedding whose input width both 64 (its base
predicate) and the group size divide; the floating-point modes write uint8 scales and no biases. Its mixed recipes
refuse Whisper (they look for ``down_proj``): the mixed folder here is the recipe's rule on Whisper's names, run
through the converter's own ``quantize_model`` (which writes each module's entry).

Measured on this random checkpoint (logits up to about 2.5; mlx-audio's model at float32, its own ``dtype``
parameter): omnid against mlx-audio on the same folder under 1e-6 in every case, in either path (float32 rounding;
mlx-audio at its default float16 differs from its own float32 by 1.5e-3 on the float folders, up to 6.6e-3 on the
quantized ones). mlx-audio's own difference between the float32 conversion and the quantized one: 0.29 (4-bit),
0.023 (8-bit), 0.089 (4-bit in groups of 128: the four mlp2 alone), 0.29 (mixed 4/6), 0.39 (mxfp4), 0.30 (nvfp4),
0.080 (mxfp8); 0.0087 for bfloat16. So: float folders within 1e-5 of mlx-audio; quantized ones within 1e-4, under a
hundredth of that difference (checked), and the same argmax wherever mlx-audio's margin exceeds twice the tolerance.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.whisper.checkpoint import build_model, load_checkpoint
from tests import whisper_mlx_audio as ref

SHARDED = Path(__file__).parent / "goldens" / "sharded" / "whisper"
# name: (converter arguments, the layout line omnid doctor gives, modules quantized (of 33), bits of a value projection)
CASES = {
    "float32": ({"dtype": "float32"}, "", 0, None),
    "float16": ({}, "", 0, None),
    "bfloat16": ({"dtype": "bfloat16"}, "", 0, None),
    "4bit": ({"quantize": True}, " 4-bit (group 64)", 33, 4),
    "8bit": ({"quantize": True, "bits": 8}, " 8-bit (group 64)", 33, 8),
    "group128": ({"quantize": True, "group_size": 128}, " 4-bit (group 128)", 4, None),
    "mixed_4_6": ({"per_module": ref.whisper_mixed()}, " mixed 4/6-bit (group 64)", 33, 6),
    "mxfp4": ({"quantize": True, "mode": "mxfp4"}, " mxfp4 4-bit (group 32)", 33, 4),
    "nvfp4": ({"quantize": True, "mode": "nvfp4"}, " nvfp4 4-bit (group 16)", 33, 4),
    "mxfp8": ({"quantize": True, "mode": "mxfp8"}, " mxfp8 8-bit (group 32)", 33, 8),
}
FLOAT_ATOL, QUANTIZED_ATOL = 1e-5, 1e-4


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    return ref.transformers_source(tmp_path_factory.mktemp("whisper_hf"))


@pytest.fixture(scope="module")
def folders(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("whisper_mlx_audio")
    return {name: ref.convert(source, out / name, **args) for name, (args, *_rest) in CASES.items()}


@pytest.fixture(scope="module")
def inputs():
    mel = np.random.default_rng(7).standard_normal((1, 2 * ref.DIMS.n_audio_ctx, ref.DIMS.n_mels)).astype(np.float32)
    return [50257, 50362, 400, 500, 600, 700, 800, 900], mel


@pytest.fixture(scope="module")
def float_logits(folders, inputs):
    return ref.logits(ref.load(folders["float32"]), *inputs)


def _mlx_blocks(model, ids, mel):
    """Logits through the MLX layers (quantized ones included), as on Metal: AudioEncoder on MLX's CPU device runs
    its blocks in numpy, so the blocks are called here one by one."""
    x = model.encoder.front(mx.array(mel))
    for block in model.encoder.blocks:
        x, _ = block(x)
    hidden, _ = model.decoder(mx.array([ids]), model.encoder.ln_post(x))
    return np.array(model.decoder.logits(hidden))[0]


@pytest.mark.parametrize("name", CASES)
def test_mlx_audio_folder_loads_in_both_paths_with_mlx_audios_logits(name, folders, inputs, float_logits):
    from omnid.engine.whisper.engine import WhisperEngine
    from omnid.engine.whisper.kind import KIND

    args, layout, n_quantized, value_bits = CASES[name]
    folder = folders[name]
    config = json.loads((folder / "config.json").read_text())
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors",
                                                        "model.safetensors.index.json"]
    assert KIND.layout(folder) == f"mlx-audio{layout}, tokenizer: shipped gpt2 ranks (vocab_size 51864)"
    want = ref.logits(ref.load(folder), *inputs)
    ids, mel = inputs

    # Widened (the engine as MLX's CPU device runs it: numpy encoder blocks over float32 weights; a quantized token
    # embedding kept packed, its rows dequantized as looked up and its head a widened copy).
    engine = WhisperEngine(name, folder)
    assert mx.default_device() == mx.cpu
    table_packed = "decoder.token_embedding" in (load_checkpoint(folder, keep_quantized=True).packed)
    assert isinstance(engine.model.decoder.token_embedding, nn.QuantizedEmbedding) == table_packed
    assert engine.model.decoder.blocks[0].mlp2.weight.dtype == mx.float32
    hidden, _ = engine.model.decoder(mx.array([ids]), engine.model.encoder(mx.array(mel)))
    widened = np.array(engine.model.decoder.logits(hidden))[0]

    # Packed: MLX's quantized layers, each module in its own mode and bits.
    ckpt = load_checkpoint(folder, keep_quantized=True)
    assert ckpt.format == "mlx-audio"
    model = build_model(ckpt)
    packed = _mlx_blocks(model, ids, mel)
    value = model.decoder.blocks[1].attn.value  # at the recipe's high bits (the last eighth)
    if n_quantized:
        q = ckpt.quantization
        assert q is not None and len(q.modules) == n_quantized and ckpt.packed
        assert config["quantization"] == config["quantization_config"]
        assert isinstance(model.encoder.blocks[1].mlp2, nn.QuantizedLinear)
        mode = args.get("mode", "affine")
        assert model.encoder.blocks[1].mlp2.mode == mode and ("biases" in model.encoder.blocks[1].mlp2) == (
            mode == "affine")
        if value_bits is None:  # only the modules whose input width the group size divides
            assert type(value) is nn.Linear and type(model.decoder.token_embedding) is nn.Embedding
        else:
            assert isinstance(model.decoder.token_embedding, nn.QuantizedEmbedding)
            assert isinstance(value, nn.QuantizedLinear) and value.bits == value_bits
            assert model.decoder.blocks[0].attn.key.bits == (4 if name == "mixed_4_6" else value_bits)
        own = np.abs(float_logits - want).max()  # mlx-audio's own float32-versus-quantized difference
        assert own > 100 * QUANTIZED_ATOL
        atol = QUANTIZED_ATOL
    else:
        assert ckpt.quantization is None and "quantization" not in config
        assert type(value) is nn.Linear
        atol = FLOAT_ATOL
    for got in (widened, packed):
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)
        top = np.sort(want, axis=1)
        clear = top[:, -1] - top[:, -2] > 2 * atol
        assert clear.sum() >= len(want) - 1
        assert (got.argmax(axis=1) == want.argmax(axis=1))[clear].all()


def test_mlx_audios_mixed_recipes_refuse_whisper(source, tmp_path):
    """``--quant-predicate mixed_4_6`` (and every recipe) looks for ``down_proj`` modules, which Whisper has not."""
    with pytest.raises(ValueError, match="Model does not have expected keys for mixed quant"):
        ref.convert(source, tmp_path / "mixed", quantize=True, recipe="mixed_4_6")


def test_mlx_audio_refuses_convert_py_folders(tmp_path):
    """An mlx-examples convert.py folder is no source for mlx-audio's converter (its alignment_heads tensor)."""
    with pytest.raises(ValueError, match="alignment_heads"):
        ref.convert(Path(__file__).parent / "goldens" / "whisper_mlx_tiny" / "en", tmp_path / "out")


def test_transformers_own_folder_through_mlx_audio(tmp_path):
    """transformers' own save of a tiny Whisper (tests/goldens/sharded/whisper), converted to float32: the same
    logits as mlx-audio's model (its widths, 4 and 16, are no multiple of 64: -q would quantize nothing)."""
    folder = ref.convert(SHARDED, tmp_path / "f32", dtype="float32")
    ckpt = load_checkpoint(folder)
    assert ckpt.format == "mlx-audio" and ckpt.alignment_heads == () and ckpt.suppress_ids_begin == (220, 50256)
    ids = [50257, 50362, 400, 500]
    mel = np.random.default_rng(3).standard_normal((1, 2 * ckpt.dims.n_audio_ctx, ckpt.dims.n_mels)).astype(np.float32)
    np.testing.assert_allclose(_mlx_blocks(build_model(ckpt), ids, mel), ref.logits(ref.load(folder), ids, mel),
                               rtol=0, atol=FLOAT_ATOL)


# --- refused at load, naming the file and the tensor or key -------------------------------------------------------


def _copy(folders, name: str, tmp_path: Path) -> Path:
    out = tmp_path / name
    shutil.copytree(folders[name], out)
    return out


def _edit_block(folder: Path, key: str | None = None, **fields) -> Path:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    for block in ("quantization", "quantization_config"):  # mlx-audio writes both, the same
        target = config[block] if key is None else config[block][key]
        target.update(fields)
    path.write_text(json.dumps(config))
    return path


def _drop(folder: Path, tensor: str) -> Path:
    """A tensor taken out of model.safetensors and out of the index that maps it."""
    path, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    mx.save_safetensors(str(path), {k: v for k, v in mx.load(str(path)).items() if k != tensor},
                        metadata={"format": "mlx"})
    data = json.loads(index.read_text())
    del data["weight_map"][tensor]
    index.write_text(json.dumps(data))
    return path


def test_an_unknown_mode_is_refused_naming_the_key(folders, tmp_path):
    folder = _copy(folders, "4bit", tmp_path)
    config = _edit_block(folder, mode="fp3")
    with pytest.raises(CheckpointError, match=rf"^{config}: quantization\.mode: unknown quantization mode 'fp3'"):
        load_checkpoint(folder)


@pytest.mark.parametrize("name, key, fields, message", [
    ("4bit", None, {"bits": 8}, r"tensor decoder\.blocks\.0\.attn\.key\.weight is packed 4-bit in groups of 64, but "
                                r"config\.json's quantization says 8-bit in groups of 64$"),
    ("nvfp4", None, {"mode": "mxfp4", "group_size": 32}, r"tensor decoder\.blocks\.0\.attn\.key\.weight has packed "
                                                         r"shape \(64, 8\) and scales \(64, 4\), which fit no mxfp4"),
    ("mixed_4_6", "decoder.blocks.1.attn.value", {"bits": 4},
     r"tensor decoder\.blocks\.1\.attn\.value\.weight is packed 6-bit in groups of 64, but config\.json's "
     r"quantization\.decoder\.blocks\.1\.attn\.value says 4-bit"),
])
@pytest.mark.parametrize("keep", [False, True])
def test_a_block_that_disagrees_with_the_packed_shapes_is_refused(folders, tmp_path, name, key, fields, message,
                                                                  keep):
    folder = _copy(folders, name, tmp_path)
    _edit_block(folder, key, **fields)
    with pytest.raises(CheckpointError, match=rf"^{folder / 'model.safetensors'}: {message}"):
        load_checkpoint(folder, keep_quantized=keep)


@pytest.mark.parametrize("name, tensor, message", [
    ("4bit", "encoder.blocks.1.mlp2.scales",
     r"missing tensor encoder\.blocks\.1\.mlp2\.scales \(tensor encoder\.blocks\.1\.mlp2\.weight is packed\)"),
    ("8bit", "decoder.token_embedding.biases",
     r"tensor decoder\.token_embedding\.biases missing or not shaped like its scales"),
    ("mxfp8", "decoder.blocks.1.mlp1.scales", r"missing tensor decoder\.blocks\.1\.mlp1\.scales"),
])
def test_a_missing_scales_or_biases_tensor_is_refused(folders, tmp_path, name, tensor, message):
    folder = _copy(folders, name, tmp_path)
    path = _drop(folder, tensor)
    with pytest.raises(CheckpointError, match=rf"^{path}: {message}"):
        load_checkpoint(folder)
