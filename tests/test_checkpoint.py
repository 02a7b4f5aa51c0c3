"""Loading Whisper checkpoints in the three formats, and failing at load on broken ones."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from omnid.engine.errors import CheckpointError
from omnid.engine.pins import sha256, verify
from omnid.engine.whisper.checkpoint import load_checkpoint
from omnid.engine.whisper.model import ModelDims, Whisper
from tests.helpers import random_weights, write_mlx

SMALL = ModelDims(n_mels=80, n_audio_ctx=24, n_audio_state=32, n_audio_head=4, n_audio_layer=2,
                  n_vocab=51864, n_text_ctx=16, n_text_state=32, n_text_head=4, n_text_layer=2)

# Hugging Face names for the canonical (mlx-examples) names, written out here independently of the loader.
HF_BLOCK = {"attn.query": "self_attn.q_proj", "attn.key": "self_attn.k_proj", "attn.value": "self_attn.v_proj",
            "attn.out": "self_attn.out_proj", "attn_ln": "self_attn_layer_norm",
            "cross_attn.query": "encoder_attn.q_proj", "cross_attn.key": "encoder_attn.k_proj",
            "cross_attn.value": "encoder_attn.v_proj", "cross_attn.out": "encoder_attn.out_proj",
            "cross_attn_ln": "encoder_attn_layer_norm", "mlp1": "fc1", "mlp2": "fc2", "mlp_ln": "final_layer_norm"}


def to_hf(name: str) -> str:
    fixed = {"encoder.positional_embedding": "model.encoder.embed_positions.weight",
             "decoder.positional_embedding": "model.decoder.embed_positions.weight",
             "decoder.token_embedding.weight": "model.decoder.embed_tokens.weight"}
    if name in fixed:
        return fixed[name]
    name = name.replace("encoder.ln_post.", "encoder.layer_norm.").replace("decoder.ln.", "decoder.layer_norm.")
    if ".blocks." in name:
        side, _, i, rest = name.split(".", 3)
        module, leaf = rest.rsplit(".", 1)
        name = f"{side}.layers.{i}.{HF_BLOCK[module]}.{leaf}"
    return "model." + name


def write_hf(folder: Path, dims: ModelDims, weights: dict[str, np.ndarray]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "whisper", "num_mel_bins": dims.n_mels, "max_source_positions": dims.n_audio_ctx,
        "d_model": dims.n_audio_state, "encoder_attention_heads": dims.n_audio_head,
        "encoder_layers": dims.n_audio_layer, "vocab_size": dims.n_vocab,
        "max_target_positions": dims.n_text_ctx, "decoder_attention_heads": dims.n_text_head,
        "decoder_layers": dims.n_text_layer,
    }))
    arrays = {}
    for k, v in weights.items():
        if k.endswith(("conv1.weight", "conv2.weight")):
            v = v.transpose(0, 2, 1)  # torch stores (out, in, kernel)
        arrays[to_hf(k)] = mx.array(v)
    arrays["proj_out.weight"] = arrays["model.decoder.embed_tokens.weight"]
    mx.save_safetensors(str(folder / "model.safetensors"), arrays)
    return folder


def logits_of(weights: dict, dims: ModelDims) -> np.ndarray:
    model = Whisper(dims)
    model.load_weights([(k, mx.array(v) if isinstance(v, np.ndarray) else v) for k, v in weights.items()])
    rng = np.random.default_rng(1)
    mel = mx.array(rng.standard_normal((1, 2 * dims.n_audio_ctx, dims.n_mels)).astype(np.float32))
    features = model.encoder(mel)
    hidden, _ = model.decoder(mx.array([[50257, 50362, 400, 500]]), features)
    return np.array(model.decoder.logits(hidden))


def fp16(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float16).astype(np.float32) for k, v in weights.items()}


def test_random_checkpoint_same_logits_in_mlx_and_transformers_formats(tmp_path):
    weights = fp16(random_weights(SMALL))  # the mlx copy is stored as float16
    direct = logits_of(weights, SMALL)
    for folder, fmt in [
        (write_mlx(tmp_path / "mlx", SMALL, weights), "mlx"),
        (write_mlx(tmp_path / "npz", SMALL, weights, npz=True), "mlx"),
        (write_hf(tmp_path / "hf", SMALL, weights), "transformers"),
    ]:
        ckpt = load_checkpoint(folder)
        assert ckpt.format == fmt and ckpt.dims == SMALL
        np.testing.assert_allclose(logits_of(ckpt.weights, ckpt.dims), direct, rtol=1e-5, atol=1e-5)


def test_real_tiny_en_loads_and_matches_when_rewritten_in_other_formats(tiny_folder, tmp_path):
    ct2 = load_checkpoint(tiny_folder)
    assert ct2.format == "ctranslate2"
    assert ct2.dims == ModelDims(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
    assert ct2.alignment_heads[:2] == ((1, 0), (2, 0))
    weights = {k: np.array(v) for k, v in ct2.weights.items()}
    reference = logits_of(ct2.weights, ct2.dims)
    hf = load_checkpoint(write_hf(tmp_path / "hf", ct2.dims, weights))
    np.testing.assert_allclose(logits_of(hf.weights, hf.dims), reference, rtol=1e-4, atol=1e-4)
    mlx_ckpt = load_checkpoint(write_mlx(tmp_path / "mlx", ct2.dims, weights))
    # model.bin is float16 already, so the float16 mlx copy is exact.
    np.testing.assert_allclose(logits_of(mlx_ckpt.weights, mlx_ckpt.dims), reference, rtol=1e-4, atol=1e-4)


def test_truncated_model_bin_fails_at_load_naming_file_and_tensor(tiny_folder, tmp_path):
    folder = tmp_path / "cut"
    folder.mkdir()
    data = (tiny_folder / "model.bin").read_bytes()
    (folder / "model.bin").write_bytes(data[: len(data) // 2])
    shutil.copy(tiny_folder / "config.json", folder)
    with pytest.raises(CheckpointError, match=r"model\.bin: truncated while reading data of tensor \w+/"):
        load_checkpoint(folder)


def test_corrupt_header_and_unknown_dtype_fail_at_load(tiny_folder, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    data = bytearray((tiny_folder / "model.bin").read_bytes())
    (folder / "model.bin").write_bytes(b"\x63\x00\x00\x00" + bytes(data[4:]))
    with pytest.raises(CheckpointError, match="unsupported CTranslate2 format version 99"):
        load_checkpoint(folder)
    # The first tensor's dtype byte sits after version, spec name, revision, count, name, rank and dims.
    name_len = int.from_bytes(data[4:6], "little")
    pos = 4 + 2 + name_len + 4 + 4
    first_name_len = int.from_bytes(data[pos : pos + 2], "little")
    pos += 2 + first_name_len
    rank = data[pos]
    data[pos + 1 + 4 * rank] = 42
    (folder / "model.bin").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="unknown dtype id 42"):
        load_checkpoint(folder)


def test_garbage_safetensors_fails_at_load_naming_file(tmp_path):
    folder = write_hf(tmp_path / "hf", SMALL, random_weights(SMALL))
    (folder / "model.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match=r"model\.safetensors: corrupt or unreadable tensor file"):
        load_checkpoint(folder)


def test_missing_and_misshapen_tensors_fail_naming_the_tensor(tmp_path):
    weights = random_weights(SMALL)
    del weights["decoder.blocks.1.mlp2.bias"]
    with pytest.raises(CheckpointError, match=r"weights\.safetensors: missing tensor decoder\.blocks\.1\.mlp2\.bias"):
        load_checkpoint(write_mlx(tmp_path / "a", SMALL, weights))
    weights = random_weights(SMALL)
    weights["encoder.blocks.0.attn.query.weight"] = np.zeros((8, 8), np.float32)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor encoder\.blocks\.0\.attn\.query\.weight has shape \(8, 8\)"):
        load_checkpoint(write_hf(tmp_path / "b", SMALL, weights))


def test_bad_config_and_integer_tensor_fail_at_load(tmp_path):
    folder = write_mlx(tmp_path / "a", SMALL, random_weights(SMALL))
    (folder / "config.json").write_text(json.dumps({**SMALL.__dict__, "n_audio_head": "six"}))
    with pytest.raises(CheckpointError, match="n_audio_head must be a positive integer"):
        load_checkpoint(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"config\.json: not valid JSON"):
        load_checkpoint(folder)
    weights = {k: mx.array(v) for k, v in random_weights(SMALL).items()}
    weights["decoder.ln.bias"] = mx.zeros((32,), mx.int32)
    folder = tmp_path / "b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(SMALL.__dict__))
    mx.save_safetensors(str(folder / "weights.safetensors"), weights)
    with pytest.raises(CheckpointError, match="tensor decoder.ln.bias has dtype mlx.core.int32"):
        load_checkpoint(folder)


def test_not_a_checkpoint_folder(tmp_path):
    with pytest.raises(CheckpointError, match="no Whisper checkpoint found"):
        load_checkpoint(tmp_path)


def test_pins_pass_and_mismatch_names_the_file(tiny_folder, tmp_path):
    config = tiny_folder / "config.json"
    assert verify([config], {"config.json": sha256(config)}) == {"config.json": "ok"}
    assert verify([config], {}) == {"config.json": "unpinned"}
    with pytest.raises(CheckpointError, match=r"config\.json: SHA-256 [0-9a-f]{64} does not match its pin 00"):
        verify([config], {"config.json": "00" * 32})


# --- mlx-community's folders, as mlx-examples' convert.py writes them (scripts/whisper_mlx_goldens.py) -------------

MLX_GOLDENS = Path(__file__).parent / "goldens" / "whisper_mlx_tiny"


# large-v3's 51866 vocabulary and 128 mels load from convert.py's v3-q4 folder (tests/test_whisper_quantized.py);
# its float32 twin is not kept (tests/goldens/ stays under 32 MiB).
@pytest.mark.parametrize("name, ranks, languages", [("en", "gpt2", ("en",))])
def test_convert_py_output_loads_without_a_tokenizer_file(name, ranks, languages):
    from omnid.engine.whisper.engine import WhisperEngine
    from omnid.engine.whisper.kind import KIND

    folder = MLX_GOLDENS / name
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "weights.safetensors"]
    raw = mx.load(str(folder / "weights.safetensors"))
    engine = WhisperEngine(name, folder)
    assert engine.tokenizer.source.name == f"{ranks}.tiktoken"
    if isinstance(languages, tuple):
        assert engine.languages == languages
    else:
        assert len(engine.languages) == languages and "yue" in engine.languages
    # convert.py's alignment_heads tensor (mlx-whisper's default: every head of the decoder's second half).
    assert np.array(raw["alignment_heads"]).tolist() == [[1, 0], [1, 1]]
    assert engine.alignment_heads == ((1, 0), (1, 1))
    ckpt = load_checkpoint(folder)
    assert "alignment_heads" not in ckpt.weights and "encoder.positional_embedding" in ckpt.weights
    for key, value in raw.items():
        if key != "alignment_heads":
            np.testing.assert_array_equal(np.array(ckpt.weights[key]), np.array(value.astype(mx.float32)), key)
    n_vocab = engine.dims.n_vocab
    assert KIND.layout(folder) == f"mlx, tokenizer: shipped {ranks} ranks (n_vocab {n_vocab})"


def test_an_alignment_heads_tensor_outside_the_decoder_is_refused(tmp_path):
    folder = write_mlx(tmp_path / "a", SMALL, random_weights(SMALL))
    weights = dict(mx.load(str(folder / "weights.safetensors")))
    weights["alignment_heads"] = mx.array([[1, 0], [2, 3]])
    mx.save_safetensors(str(folder / "weights.safetensors"), weights)
    with pytest.raises(CheckpointError, match=r"weights\.safetensors: tensor alignment_heads names head \(2, 3\)"):
        load_checkpoint(folder)
    weights["alignment_heads"] = mx.array([1.0, 0.0])
    mx.save_safetensors(str(folder / "weights.safetensors"), weights)
    with pytest.raises(CheckpointError, match="tensor alignment_heads has shape"):
        load_checkpoint(folder)
    weights["alignment_heads"] = mx.array([[1, 3]])
    mx.save_safetensors(str(folder / "weights.safetensors"), weights)
    assert load_checkpoint(folder).alignment_heads == ((1, 3),)


def test_a_tokenizer_less_transformers_folder_takes_the_ranks_its_vocab_size_names(tmp_path):
    from omnid.engine.whisper.engine import WhisperEngine
    from omnid.engine.whisper.kind import KIND

    multi = ModelDims(80, 24, 16, 2, 1, 51865, 16, 16, 2, 1)
    folder = write_hf(tmp_path / "hf", multi, random_weights(multi))
    engine = WhisperEngine("hf", folder)
    assert engine.tokenizer.source.name == "multilingual.tiktoken" and len(engine.languages) == 99
    assert KIND.layout(folder) == "transformers, tokenizer: shipped multilingual ranks (vocab_size 51865)"
    odd = ModelDims(80, 24, 16, 2, 1, 51900, 16, 16, 2, 1)
    folder = write_hf(tmp_path / "odd", odd, random_weights(odd))
    with pytest.raises(CheckpointError, match=rf"{folder / 'config.json'}: vocab_size 51900 matches no Whisper"):
        WhisperEngine("odd", folder)


@pytest.mark.parametrize("name, atol", [("en", 2e-3)])
def test_convert_py_output_gives_mlx_whispers_logits(name, atol):
    """omnid's model on convert.py's folder gives the logits mlx-whisper 0.4.3's load_model and model gave
    (logits.npz): the start sequence from the shipped ranks, then text. en is float16 on
    disk, which mlx-whisper keeps as its parameters, so its decoder's embeddings add in float16."""
    from omnid.engine.whisper.engine import WhisperEngine

    want = np.load(MLX_GOLDENS / "logits.npz")
    engine = WhisperEngine(name, MLX_GOLDENS / name)
    tok, dims = engine.tokenizer, engine.dims
    ids = [*tok.sot_sequence("de" if dims.is_multilingual else None), tok.no_timestamps, *tok.encode(" hello world")]
    assert ids == want[f"{name}_ids"].tolist()
    mel = np.random.default_rng(7).standard_normal((1, 2 * dims.n_audio_ctx, dims.n_mels)).astype(np.float32)
    hidden, _ = engine.model.decoder(mx.array([ids]), engine.model.encoder(mx.array(mel)))
    got = np.array(engine.model.decoder.logits(hidden))[0][:, want[f"{name}_vocab"]]
    np.testing.assert_allclose(got, want[f"{name}_logits"], rtol=0, atol=atol)
    assert (got.argmax(axis=1) == want[f"{name}_logits"].argmax(axis=1)).all()
