"""cpu_packed: a 4- or 8-bit affine module multiplied as it is packed gives MLX's own quantized layer's product (the
same packed weights, read in place), by both kernels (few rows and many), for every group size, odd output widths,
with and without a bias; lookups give MLX's dequantized rows; joined maps give each map's product; what it does not
take is widened instead."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from omnid.engine import cpu_packed
from omnid.engine.cpu_packed import CHUNK_ROWS, FEW_ROWS, PackedLinear, packable
from omnid.engine.numpy_layers import Joined, Linear, QuantizedRows, by_columns, linear_map

RNG = np.random.default_rng(7)


def _quantized(inputs: int, outputs: int, bits: int, group: int, bias: bool) -> nn.QuantizedLinear:
    layer = nn.Linear(inputs, outputs, bias=bias)
    if bias:
        layer.bias = mx.array(RNG.standard_normal(outputs).astype(np.float32))
    return nn.QuantizedLinear.from_linear(layer, group_size=group, bits=bits)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 2e-5 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
@pytest.mark.parametrize(("inputs", "outputs", "bias"), [(256, CHUNK_ROWS + 70, False), (128, 99, True)])
def test_products_are_mlx_quantized_layers(bits: int, group: int, inputs: int, outputs: int, bias: bool) -> None:
    layer = _quantized(inputs, outputs, bits, group, bias)
    packed = linear_map(layer)
    assert isinstance(packed, PackedLinear) and packed.shape == (inputs, outputs)
    # The unpacking kernel up to FEW_ROWS (x's rows in threes and the one or two left; output widths that leave 1, 2
    # or 3 of a tile of four), the BLAS past it.
    for rows in (1, 2, 3, 5, FEW_ROWS, FEW_ROWS + 1, FEW_ROWS + 6):
        x = RNG.standard_normal((rows, inputs)).astype(np.float32)
        _close(packed(x), np.array(layer(mx.array(x))))
    wide = np.array(mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=group, bits=bits))
    np.testing.assert_allclose(packed.weight_t, wide.T, atol=1e-6)
    ids = [0, outputs - 1, 5, 5]
    np.testing.assert_allclose(packed.rows(ids), wide[ids], atol=1e-6)
    with pytest.raises(IndexError):
        packed.rows([outputs])


def test_packed_weights_are_the_modules_own_arrays() -> None:
    for bits in (4, 8):
        layer = _quantized(1024, 1024, bits, 64, False)
        packed = PackedLinear.of(layer)
        per_weight = packed.nbytes / (1024 * 1024)
        assert per_weight == pytest.approx(bits / 8 + 8 / 64)  # the packed bits and a float32 scale and bias a group
        # Views of the MLX module's arrays, not copies: a packed model is in memory once.
        for mine, theirs in ((packed.packed, layer.weight), (packed.scales, layer.scales),
                             (packed.biases, layer.biases)):
            assert np.shares_memory(mine, np.asarray(theirs))


def test_an_embedding_looks_up_and_multiplies_packed() -> None:
    table = nn.Embedding(300, 128)
    q = nn.QuantizedEmbedding.from_embedding(table, group_size=64, bits=4)
    packed = linear_map(q)
    assert isinstance(packed, PackedLinear)
    ids = [3, 299, 0]
    np.testing.assert_allclose(packed[ids], np.array(q(mx.array(ids))), atol=1e-6)
    x = RNG.standard_normal((2, 128)).astype(np.float32)
    _close(packed(x), np.array(q.as_linear(mx.array(x))))


def test_joined_maps_give_each_maps_product() -> None:
    layers = [_quantized(256, n, 4, 64, False) for n in (128, 64, 100)] + [_quantized(256, 40, 8, 32, True)]
    joined = Joined([linear_map(layer) for layer in layers])
    assert joined.packed  # one pass over the threads for all of them
    for rows in (1, 20):
        x = RNG.standard_normal((rows, 256)).astype(np.float32)
        for got, layer in zip(joined(x), layers, strict=True):
            _close(got, np.array(layer(mx.array(x))))
    float_too = Joined([linear_map(layers[0]), linear_map(nn.Linear(256, 30))])
    assert not float_too.packed
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    _close(float_too(x)[0], np.array(layers[0](mx.array(x))))


def test_any_column_share_is_the_product() -> None:
    layer = _quantized(128, 333, 8, 64, True)
    packed = linear_map(layer)
    for rows in (3, FEW_ROWS + 2):
        x = RNG.standard_normal((rows, 128)).astype(np.float32)
        want = np.array(layer(mx.array(x)))
        out = np.empty((rows, packed.shape[1]), np.float32)
        by_columns(x, [(packed, out)])
        _close(out, want)
        part = np.empty((rows, 54), np.float32)
        packed.columns(x, 10, 64, part)
        _close(part, want[:, 10:64])


@pytest.mark.parametrize("inline_bytes", [0, 1 << 40])
def test_a_few_rows_product_is_the_same_shared_among_threads_or_on_the_callers(
        inline_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Below INLINE_BYTES a few-row product runs on the calling thread, above it in shares on the pool's threads:
    either way MLX's product."""
    monkeypatch.setattr(cpu_packed, "INLINE_BYTES", inline_bytes)
    for bits in (4, 8):
        layer = _quantized(256, 333, bits, 64, True)
        packed = linear_map(layer)
        for rows in (1, 4):
            x = RNG.standard_normal((rows, 256)).astype(np.float32)
            _close(packed(x), np.array(layer(mx.array(x))))


@pytest.mark.parametrize(("mode", "bits", "group"), [("affine", 6, 64), ("affine", 2, 64), ("mxfp4", 4, 32),
                                                     ("mxfp8", 8, 32)])
def test_other_quantizations_are_widened(mode: str, bits: int, group: int) -> None:
    layer = nn.QuantizedLinear.from_linear(nn.Linear(128, 64), group_size=group, bits=bits, mode=mode)
    assert not packable(layer)
    widened = linear_map(layer)
    assert isinstance(widened, Linear)
    x = RNG.standard_normal((2, 128)).astype(np.float32)
    _close(widened(x), np.array(layer(mx.array(x))))


@pytest.mark.parametrize(("bits", "mode", "dtype"), [(4, "affine", mx.float16), (8, "affine", mx.float32),
                                                     (2, "affine", mx.float16), (6, "affine", mx.float16),
                                                     (4, "mxfp4", mx.float16), (4, "affine", mx.bfloat16)])
def test_quantized_rows_are_mlxs_dequantized_rows_exactly(bits: int, mode: str, dtype: mx.Dtype) -> None:
    """An embedding kept packed (Whisper's on the CPU) looks its rows up as MLX's own module does, bit for bit, in
    numpy where it unpacks the mode (affine 2/4/8 bits, float16 or float32 scales) and through MLX elsewhere."""
    table = nn.Embedding(1000, 128)
    table.weight = table.weight.astype(dtype)
    q = nn.QuantizedEmbedding.from_embedding(table, group_size=32 if mode == "mxfp4" else 64, bits=bits, mode=mode)
    rows = QuantizedRows(q)
    assert rows.numpy == (mode == "affine" and bits in (2, 4, 8) and dtype != mx.bfloat16)
    ids = list(range(1000))
    want = np.array(q(mx.array(ids)).astype(mx.float32))
    got = rows[ids]
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert np.array_equal(rows[[7]], want[[7]])
