"""mlx-community's quantized Whisper folders, as mlx-examples' ``convert.py -q`` writes them, load and compute as
mlx-whisper 0.4.3 computes on them (scripts/whisper_mlx_goldens.py made the folders and mlx-whisper's logits).

mlx-whisper's own difference between a float32 conversion and the quantized one of the same random checkpoint
(quantized.npz, ``*_float`` against ``*_logits``, logits up to 2.9) measured 0.45 (en-q4), 0.42 (v3-q4) and 0.023
(en-q8, made but not kept in tests/goldens/). omnid against mlx-whisper on the same quantized folder measured
1.1e-3, 0.76e-3 and 1.6e-3, in either path: mlx-whisper keeps convert.py's float16 scales, biases and norms as its
parameters, so its sums round to float16 where omnid's stay float32. So: logits within 2e-3 (the tolerance of the float16 float folder in
test_checkpoint.py, which differs from mlx-whisper for the same reason), under a tenth of mlx-whisper's own
float-versus-quantized difference for every folder (checked), and the same argmax wherever mlx-whisper's margin
exceeds twice that.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from omnid.engine.cpu_packed import PackedLinear
from omnid.engine.errors import CheckpointError
from omnid.engine.numpy_layers import QuantizedRows
from omnid.engine.whisper.checkpoint import build_model, load_checkpoint

GOLDENS = Path(__file__).parent / "goldens" / "whisper_mlx_tiny"
# convert.py -q's folders kept in tests/goldens/ (its 8-bit one, 3.8 MB, is not: the goldens stay under 32 MiB).
QUANTIZED = {"en-q4": 4, "v3-q4": 4}
ATOL = 2e-3


@pytest.fixture(scope="module")
def want():
    return np.load(GOLDENS / "quantized.npz")


def _inputs(engine, want, name):
    tok, dims = engine.tokenizer, engine.dims
    ids = [*tok.sot_sequence("de" if dims.is_multilingual else None), tok.no_timestamps, *tok.encode(" hello world")]
    assert ids == want[f"{name}_ids"].tolist()
    mel = np.random.default_rng(7).standard_normal((1, 2 * dims.n_audio_ctx, dims.n_mels)).astype(np.float32)
    return ids, mx.array(mel)


def _check(got, want, name):
    ref, floating = want[f"{name}_logits"], want[f"{name}_float"]
    assert np.abs(floating - ref).max() > 10 * ATOL  # the tolerance is small against quantization's own effect
    np.testing.assert_allclose(got, ref, rtol=0, atol=ATOL)
    top = np.sort(ref, axis=1)
    clear = top[:, -1] - top[:, -2] > 2 * ATOL
    assert clear.sum() >= len(ref) - 1
    assert (got.argmax(axis=1) == ref.argmax(axis=1))[clear].all()


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_folder_widened_for_the_cpu_gives_mlx_whispers_logits(name, want):
    """The engine on MLX's CPU device: each quantized layer's weight widened to float32 at load (mx.dequantize),
    the encoder's blocks in numpy over them; the token embedding kept packed (rows dequantized as looked up, the
    head a widened copy). omnid doctor's layout line gives the bits."""
    from omnid.engine.whisper.engine import WhisperEngine
    from omnid.engine.whisper.kind import KIND

    n_vocab = 51866 if name.startswith("v3") else 51864

    folder = GOLDENS / name
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "weights.safetensors"]
    assert json.loads((folder / "config.json").read_text())["quantization"] == {"group_size": 64,
                                                                                 "bits": QUANTIZED[name]}
    assert mx.default_device() == mx.cpu
    assert KIND.layout(folder) == (f"mlx {QUANTIZED[name]}-bit (group 64), tokenizer: shipped "
                                   f"{'multilingual' if name.startswith('v3') else 'gpt2'} ranks (n_vocab {n_vocab})")
    engine = WhisperEngine(name, folder)
    block = engine.model.decoder.blocks[0]
    assert type(block.mlp1) is nn.Linear and block.mlp1.weight.dtype == mx.float32
    assert type(engine.model.encoder.blocks[0].mlp1) is nn.Linear  # narrower than PACKED_ENCODER_MIN_WIDTH
    # The table stays packed: no float copy of it but the head's.
    assert isinstance(engine.model.decoder.token_embedding, nn.QuantizedEmbedding)
    assert isinstance(engine.model.decoder.cpu_step.embedding, QuantizedRows)
    ids, mel = _inputs(engine, want, name)
    hidden, _ = engine.model.decoder(mx.array([ids]), engine.model.encoder(mel))
    got = np.array(engine.model.decoder.logits(hidden))[0][:, want[f"{name}_vocab"]]
    _check(got, want, name)


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_wide_encoders_blocks_stay_packed_on_the_cpu_and_give_mlx_whispers_logits(name, want, monkeypatch):
    """From PACKED_ENCODER_MIN_WIDTH (lowered here to the test folders' width) the engine on MLX's CPU device keeps
    the encoder blocks' Linears packed, the numpy encoder multiplying them so (cpu_packed.py, over the MLX modules'
    own arrays), and widens the decoder: the same logits as mlx-whisper."""
    from omnid.engine.whisper import checkpoint as whisper_checkpoint
    from omnid.engine.whisper.engine import WhisperEngine

    monkeypatch.setattr(whisper_checkpoint, "PACKED_ENCODER_MIN_WIDTH", 0)
    engine = WhisperEngine(name, GOLDENS / name)
    assert all(isinstance(b.mlp1, nn.QuantizedLinear) and isinstance(b.attn.key, nn.QuantizedLinear)
               for b in engine.model.encoder.blocks)
    assert type(engine.model.decoder.blocks[0].mlp1) is nn.Linear
    layer = engine.model.encoder._cpu_layers[0]
    maps = (layer.query, layer.key, layer.value, layer.out, layer.mlp1, layer.mlp2)
    assert layer.packed and all(isinstance(m, PackedLinear) for m in maps)
    assert np.shares_memory(layer.mlp1.packed, np.asarray(engine.model.encoder.blocks[0].mlp1.weight))
    ids, mel = _inputs(engine, want, name)
    hidden, _ = engine.model.decoder(mx.array([ids]), engine.model.encoder(mel))
    _check(np.array(engine.model.decoder.logits(hidden))[0][:, want[f"{name}_vocab"]], want, name)


@pytest.mark.parametrize("name", QUANTIZED)
def test_quantized_folder_on_mlxs_quantized_layers_gives_mlx_whispers_logits(name, want):
    """The packed weights in MLX's QuantizedLinear / QuantizedEmbedding (Metal's path), run here through the MLX
    layers on the CPU device; the same logits as the widened weights give."""
    from omnid.engine.whisper.engine import WhisperEngine

    ckpt = load_checkpoint(GOLDENS / name, keep_quantized=True)
    q = ckpt.quantization
    assert q is not None and (q.group_size, q.bits) == (64, QUANTIZED[name]) and ckpt.packed
    # Every Linear and Embedding is quantized by convert.py: 10 per decoder layer, 6 per encoder layer, the tokens.
    assert len(q.modules) == 2 * 10 + 2 * 6 + 1
    assert ckpt.weights["decoder.token_embedding.weight"].dtype == mx.uint32
    model = build_model(ckpt)
    assert isinstance(model.decoder.blocks[1].cross_attn.key, nn.QuantizedLinear)
    assert isinstance(model.encoder.blocks[0].mlp2, nn.QuantizedLinear)
    assert isinstance(model.decoder.token_embedding, nn.QuantizedEmbedding)
    assert model.decoder.token_embedding.bits == QUANTIZED[name]
    engine = WhisperEngine(name, GOLDENS / name)
    ids, mel = _inputs(engine, want, name)
    x = model.encoder.front(mel)
    for block in model.encoder.blocks:  # the MLX blocks (AudioEncoder on the CPU device takes numpy's)
        x, _ = block(x)
    hidden, _ = model.decoder(mx.array([ids]), model.encoder.ln_post(x))
    got = np.array(model.decoder.logits(hidden))[0][:, want[f"{name}_vocab"]]
    _check(got, want, name)
    hidden, _ = engine.model.decoder(mx.array([ids]), engine.model.encoder(mel))
    widened = np.array(engine.model.decoder.logits(hidden))[0][:, want[f"{name}_vocab"]]
    np.testing.assert_allclose(got, widened, rtol=0, atol=1e-5)


def test_widening_keeps_no_packed_tensor():
    packed = load_checkpoint(GOLDENS / "en-q4", keep_quantized=True)
    wide = load_checkpoint(GOLDENS / "en-q4")
    assert wide.quantization == packed.quantization and not wide.packed
    assert not any(k.endswith((".scales", ".biases")) for k in wide.weights)
    assert all(v.dtype == mx.float32 for v in wide.weights.values())
    name = "decoder.blocks.1.mlp1"
    np.testing.assert_array_equal(
        np.array(wide.weights[f"{name}.weight"]),
        np.array(mx.dequantize(packed.weights[f"{name}.weight"], packed.weights[f"{name}.scales"],
                               packed.weights[f"{name}.biases"], group_size=64, bits=4)))
    assert wide.weights[f"{name}.weight"].shape == (256, 64)


# --- refused at load ---------------------------------------------------------------------------------------------


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / "q"
    shutil.copytree(GOLDENS / "en-q4", out)
    return out


def _edit_config(folder: Path, **block) -> Path:
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    cfg["quantization"] = {**cfg["quantization"], **block}
    path.write_text(json.dumps(cfg))
    return path


def _edit_weights(folder: Path, drop: str = "", **add: mx.array) -> Path:
    path = folder / "weights.safetensors"
    weights = {k: v for k, v in mx.load(str(path)).items() if k != drop}
    weights.update(add)
    mx.save_safetensors(str(path), weights)
    return path


@pytest.mark.parametrize("keep", [False, True])
def test_bits_that_disagree_with_the_packed_shapes_are_refused(folder, keep):
    _edit_config(folder, bits=8)
    with pytest.raises(CheckpointError, match=rf"^{folder / 'weights.safetensors'}: tensor decoder\.blocks\.0\.attn\.key"
                                              r"\.weight is packed 4-bit in groups of 64, but config\.json's "
                                              r"quantization says 8-bit in groups of 64$"):
        load_checkpoint(folder, keep_quantized=keep)


def test_a_group_size_that_disagrees_with_the_scales_is_refused(folder):
    _edit_config(folder, group_size=32)
    with pytest.raises(CheckpointError, match=rf"^{folder / 'weights.safetensors'}: tensor decoder\.blocks\.0\.attn\.key"
                                              r"\.weight is packed 4-bit in groups of 64, but config\.json's "
                                              r"quantization says 4-bit in groups of 32$"):
        load_checkpoint(folder)


@pytest.mark.parametrize("part, message", [
    ("scales", r"missing tensor encoder\.blocks\.1\.mlp2\.scales \(tensor encoder\.blocks\.1\.mlp2\.weight is packed\)"),
    ("biases", r"tensor encoder\.blocks\.1\.mlp2\.biases missing or not shaped like its scales"),
])
def test_a_missing_scales_or_biases_tensor_is_refused(folder, part, message):
    weights = _edit_weights(folder, drop=f"encoder.blocks.1.mlp2.{part}")
    with pytest.raises(CheckpointError, match=rf"^{weights}: {message}"):
        load_checkpoint(folder)


@pytest.mark.parametrize("block, message", [
    ({"mode": "fp3"}, r"config\.json: quantization\.mode: unknown quantization mode 'fp3'"),
    ({"group_size": "64"}, r"config\.json: quantization\.group_size must be an integer, not '64'"),
    # Bits or a mode the packed shapes do not fit (omnid.engine.quantization.packed: one rule for every kind).
    ({"bits": 7}, r"weights\.safetensors: tensor decoder\.blocks\.0\.attn\.key\.weight is packed 4-bit in groups of "
                  r"64, but config\.json's quantization says 7-bit"),
    ({"mode": "mxfp4"}, r"weights\.safetensors: tensor decoder\.blocks\.0\.attn\.key\.weight has packed shape "
                        r"\(64, 8\) and scales \(64, 1\), which fit no mxfp4 quantization of \(64, 64\)"),
])
def test_a_block_mlx_cannot_read_is_refused(folder, block, message):
    _edit_config(folder, **block)
    with pytest.raises(CheckpointError, match=rf"^{folder}/{message}"):
        load_checkpoint(folder)


def test_scales_beside_a_float_module_are_refused(folder):
    weights = _edit_weights(folder, **{"encoder.ln_post.scales": mx.ones((64, 1))})
    with pytest.raises(CheckpointError, match=rf"^{weights}: unexpected tensor encoder\.ln_post\.scales"):
        load_checkpoint(folder)


def test_a_quantization_block_over_float_weights_is_refused(tmp_path):
    folder = tmp_path / "f"
    shutil.copytree(GOLDENS / "en", folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization"] = {"group_size": 64, "bits": 4}
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"config\.json: has a quantization block, but weights\.safetensors "
                                              "holds no quantized tensor"):
        load_checkpoint(folder)


def _compared(got: list[int], want, name: str) -> int:
    """How many of mlx-whisper's greedy tokens must match: all up to its first margin under twice the tolerance."""
    margins = want[f"{name}_greedy_margin"]
    n = int(np.argmax(margins <= 2 * ATOL)) if (margins <= 2 * ATOL).any() else len(margins)
    assert got[:n] == want[f"{name}_greedy"][:n].tolist()
    return n


@pytest.mark.parametrize("name, at_least", [("en-q4", 16), ("v3-q4", 16)])
def test_quantized_folder_gives_mlx_whispers_greedy_tokens_in_both_paths(name, at_least, want):
    """The plain argmax after the start sequence: on the widened weights the decode steps run in numpy
    (TextDecoder.cpu_step, as the engine runs them on MLX's CPU device); on the packed ones through MLX's quantized
    layers with their key-value caches (as on Metal)."""
    from omnid.engine.whisper.engine import WhisperEngine

    engine = WhisperEngine(name, GOLDENS / name)
    packed = build_model(load_checkpoint(GOLDENS / name, keep_quantized=True))
    tok, dims = engine.tokenizer, engine.dims
    prompt = [*tok.sot_sequence("de" if dims.is_multilingual else None), tok.no_timestamps]
    mel = mx.array(np.random.default_rng(7).standard_normal((1, 2 * dims.n_audio_ctx, dims.n_mels)), mx.float32)

    decoder = engine.model.decoder
    cross = decoder.cross_kv(engine.model.encoder(mel))
    hidden, caches = decoder(mx.array([prompt]), None, kv_cache=cross)
    row = decoder.cpu_step.row([c[0] for c in caches], [kv for _, kv in cross])
    numpy_tokens = [int(np.array(decoder.logits(hidden[:, -1]))[0].argmax())]
    while len(numpy_tokens) < len(want[f"{name}_greedy"]):
        numpy_tokens.append(int(decoder.cpu_step.step([numpy_tokens[-1]], [row])[0].argmax()))

    x = packed.encoder.front(mel)
    for block in packed.encoder.blocks:
        x, _ = block(x)
    hidden, caches = packed.decoder(mx.array([prompt]), packed.encoder.ln_post(x))
    mlx_tokens = [int(np.array(packed.decoder.logits(hidden[:, -1]))[0].argmax())]
    while len(mlx_tokens) < len(want[f"{name}_greedy"]):
        hidden, caches = packed.decoder(mx.array([mlx_tokens[-1:]]), None, kv_cache=caches)
        mlx_tokens.append(int(np.array(packed.decoder.logits(hidden[:, -1]))[0].argmax()))

    assert _compared(numpy_tokens, want, name) >= at_least
    assert _compared(mlx_tokens, want, name) >= at_least
