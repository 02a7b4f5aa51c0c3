"""The CPU path's cache-sized slices change the speed of attention and GELU, never a bit of their result."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from omnid.engine import cpu_math


@pytest.mark.parametrize("positions", [700, 1450])
def test_sliced_attention_is_the_one_pass_attention(monkeypatch: pytest.MonkeyPatch, positions: int) -> None:
    mx.random.seed(7)
    # Strided views, as the encoder passes them after splitting heads.
    q, k, v = (mx.random.normal((2, positions, 4, 32)).transpose(0, 2, 1, 3) for _ in range(3))
    sliced = cpu_math.attention(q, k, v, 32**-0.5)
    assert positions % cpu_math.ATTENTION_ROWS, "the last slice should be a short one"
    monkeypatch.setattr(cpu_math, "ATTENTION_ROWS", positions)
    whole = cpu_math.attention(q, k, v, 32**-0.5)
    assert sliced.shape == (2, 4, positions, 32)
    assert mx.array_equal(sliced, whole).item()
    fused = mx.fast.scaled_dot_product_attention(q, k, v, scale=32**-0.5)
    assert np.abs(np.array(sliced) - np.array(fused)).max() <= 1e-5


def test_sliced_gelu_is_the_one_pass_gelu(monkeypatch: pytest.MonkeyPatch) -> None:
    mx.random.seed(8)
    x = mx.random.normal((3, 1000, 150)) * 4  # 450,000 values: three whole slices and a short one
    sliced = cpu_math.gelu(x)
    monkeypatch.setattr(cpu_math, "GELU_SLICE", x.size)
    whole = cpu_math.gelu(x)
    assert sliced.shape == x.shape
    assert mx.array_equal(sliced, whole).item()


def test_sigmoid_scratch_stays_bounded_and_results_are_copies():
    """The CPU path reuses a few scratch buffers (at most SCRATCH_SHAPES per thread); what it returns is a copy,
    so a later call never changes an earlier result."""
    rng = np.random.default_rng(0)
    first = None
    for n in range(1, 3 * cpu_math.SCRATCH_SHAPES):
        x = rng.standard_normal((2, n, 7)).astype(np.float32)
        np.testing.assert_allclose(np.array(cpu_math.sigmoid(mx.array(x))), 1 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-7)
        if first is None:
            first_x, first = x, cpu_math.sigmoid(mx.array(x))
        assert len(cpu_math._scratch.buffers) <= cpu_math.SCRATCH_SHAPES
    np.testing.assert_allclose(np.array(first), 1 / (1 + np.exp(-first_x)), rtol=1e-5, atol=1e-7)


def rel_shift(x: mx.array) -> mx.array:
    """NeMo's (Transformer-XL's) shift: (B, H, T, 2T-1) scores by relative position -> (B, H, T, T) by key, by
    padding one zero column on the left and reading the buffer with one row fewer."""
    b, h, t, p = x.shape
    x = mx.pad(x, [(0, 0), (0, 0), (0, 0), (1, 0)]).reshape(b, h, p + 1, t)
    return x[:, :, 1:].reshape(b, h, t, p)[..., :t]


@pytest.mark.parametrize("positions", [9, 609])
def test_relative_attention_is_nemos_pad_and_reshape_shift(positions: int) -> None:
    """Sliced (609 positions: two whole slices and a short one) or not, the strided-view shift gives the scores
    NeMo's RelPositionMultiHeadAttention computes, to float32 rounding."""
    mx.random.seed(9)
    q_u, q_v, k, v = (mx.random.normal((1, 4, positions, 16)) for _ in range(4))
    p = mx.random.normal((1, 4, 2 * positions - 1, 16))
    got = cpu_math.relative_attention(q_u, q_v, k, p, v, 0.25)
    scores = (q_u @ k.swapaxes(-1, -2) + rel_shift(q_v @ p.swapaxes(-1, -2))) * 0.25
    want = mx.softmax(scores, axis=-1) @ v
    assert got.shape == (1, 4, positions, 16)
    assert np.abs(np.array(got) - np.array(want)).max() <= 1e-5


@pytest.mark.parametrize("frames", [8, 9, 40])
def test_depthwise_convolutions_are_mlxs_grouped_ones(frames: int) -> None:
    """The CPU's shifted multiply-adds give what MLX's grouped convolutions give (odd and even lengths, the
    ceil of a stride-2 output included), to float32 rounding."""
    import mlx.nn as nn

    mx.random.seed(10)
    conv1 = nn.Conv1d(6, 6, 9, padding=4, groups=6)
    x = mx.random.normal((1, frames, 6))
    got = cpu_math.depthwise_conv1d(x, conv1.weight, conv1.bias)
    assert got.shape == (1, frames, 6)
    assert np.abs(np.array(got) - np.array(conv1(x))).max() <= 1e-5
    conv2 = nn.Conv2d(5, 5, 3, stride=2, padding=1, groups=5)
    y = mx.random.normal((1, frames, 7, 5))
    want = np.array(conv2(y))[0]
    got2 = cpu_math.depthwise_conv2d_stride2(np.array(y)[0], np.array(conv2.weight), np.array(conv2.bias))
    assert got2.shape == want.shape == ((frames + 1) // 2, 4, 5)
    assert np.abs(got2 - want).max() <= 1e-5


def test_silu_of_a_fresh_array_is_silu():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 40, 16)).astype(np.float32) * 4
    weight = mx.array(np.eye(16, dtype=np.float32))
    got = np.array(cpu_math.silu_of_fresh(mx.array(x) @ weight))  # a product's output, held by nobody else
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)
