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


def test_softmax_and_sigmoid_scratch_stays_bounded_and_results_are_copies():
    """The CPU path reuses a few scratch buffers (at most SCRATCH_SHAPES per thread); what it returns is a copy,
    so a later call never changes an earlier result."""
    rng = np.random.default_rng(0)
    first = None
    for n in range(1, 3 * cpu_math.SCRATCH_SHAPES):
        x = rng.standard_normal((2, n, 7)).astype(np.float32)
        got = np.array(cpu_math.softmax(mx.array(x)))
        want = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(np.array(cpu_math.sigmoid(mx.array(x))), 1 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-7)
        if first is None:
            first_x, first = x, cpu_math.softmax(mx.array(x))
        assert len(cpu_math._scratch.buffers) <= cpu_math.SCRATCH_SHAPES
    again = np.exp(first_x - first_x.max(-1, keepdims=True))
    np.testing.assert_allclose(np.array(first), again / again.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
