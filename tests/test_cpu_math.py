"""The CPU path's cache-sized slices and thread shares change the speed of attention, GELU, convolutions and
activations, not their result: bit for bit where the work is only sliced, to float32 rounding against MLX's own
operations where numpy computes it."""

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
    # Not always bit for bit: a BLAS may round a product's rows by the block they fall in (OpenBLAS's Zen kernels).
    assert np.abs(np.array(sliced) - np.array(whole)).max() <= 1e-6
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


def test_scratch_stays_bounded_and_results_are_copies():
    """1 + exp(-x) reuses a few scratch buffers (at most SCRATCH_SHAPES per thread); what sigmoid returns is a copy,
    so a later call never changes an earlier result."""
    rng = np.random.default_rng(0)
    first = None
    for n in range(1, 3 * cpu_math.SCRATCH_SHAPES):
        x = rng.standard_normal((2, n, 7)).astype(np.float32)
        np.testing.assert_allclose(cpu_math._one_plus_exp_neg(x), 1 + np.exp(-x), rtol=1e-6)
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
def test_relative_attention_is_nemos_pad_and_reshape_shift(monkeypatch: pytest.MonkeyPatch, positions: int) -> None:
    """In row blocks (609 positions in blocks of 256: two whole ones and a short one) or not, over heads shared
    among threads, the strided-view shift gives the scores NeMo's RelPositionMultiHeadAttention computes, to
    float32 rounding; batch rows and heads stay apart."""
    mx.random.seed(9)
    monkeypatch.setattr(cpu_math, "HEAD_ROWS", 256)
    q, k, v = (mx.random.normal((2, positions, 4, 16)) for _ in range(3))
    u, bias_v = mx.random.normal((4, 16)), mx.random.normal((4, 16))
    p = mx.random.normal((2 * positions - 1, 4, 16))
    got = cpu_math.relative_attention(q, u, bias_v, k, p, v, 0.25)
    q_u, q_v = ((q + b).transpose(0, 2, 1, 3) for b in (u, bias_v))
    scores = (q_u @ k.transpose(0, 2, 3, 1) + rel_shift(q_v @ p.transpose(1, 2, 0))) * 0.25
    want = (mx.softmax(scores, axis=-1) @ v.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    assert got.shape == (2, positions, 4, 16)
    assert np.abs(np.array(got) - np.array(want)).max() <= 1e-5


@pytest.mark.parametrize("positions", [7, 300])
def test_head_attention_is_mlxs_fused_attention(monkeypatch: pytest.MonkeyPatch, positions: int) -> None:
    """Heads shared among threads, queries in row blocks (300 in blocks of 128: two whole ones and a short one) or,
    for runs no longer than a block (7), every batch row's share of heads at once, read and written in the
    projections' (B, T, heads, head_dim) layout."""
    mx.random.seed(12)
    monkeypatch.setattr(cpu_math, "HEAD_ROWS", 128)
    q, k, v = (mx.random.normal((2, positions, 8, 24)) for _ in range(3))
    got = cpu_math.head_attention(q, k, v, 0.3)
    want = mx.fast.scaled_dot_product_attention(*(a.transpose(0, 2, 1, 3) for a in (q, k, v)), scale=0.3)
    assert got.shape == (2, positions, 8, 24)
    assert np.abs(np.array(got) - np.array(want.transpose(0, 2, 1, 3))).max() <= 1e-5


@pytest.mark.parametrize("frames", [3, 41])
def test_first_convolution_with_relu_is_mlxs(monkeypatch: pytest.MonkeyPatch, frames: int) -> None:
    """The one-channel stride-2 convolution as tap matrices times weights, in blocks of rows shared among threads,
    is MLX's Conv2d and ReLU, inside the zero border it returns."""
    import mlx.nn as nn

    mx.random.seed(13)
    monkeypatch.setattr(cpu_math, "CONV_ROWS", 4)
    conv = nn.Conv2d(1, 6, 3, stride=2, padding=1)
    mel = mx.random.normal((1, frames, 11))
    want = np.array(nn.relu(conv(mel[..., None])))[0]
    got = cpu_math.conv2d_stride2_relu(np.array(mel)[0], np.array(conv.weight), np.array(conv.bias))
    assert got.shape == ((frames + 1) // 2 + 2, 6 + 2, 6)
    assert not got[[0, -1]].any() and not got[:, [0, -1]].any()
    assert np.abs(got[1:-1, 1:-1] - want).max() <= 1e-5


@pytest.mark.parametrize("frames", [5, 40])
def test_glu_depthwise_silu_is_the_mlx_chain(frames: int) -> None:
    """GLU, a 'same' depthwise convolution over time and SiLU, the rows shared among threads (each recomputing the
    GLU of the rows around its share), are what MLX's operations give one after the other."""
    mx.random.seed(14)
    y = mx.random.normal((frames, 2 * 6)) * 3
    weight, bias = mx.random.normal((6, 9)), mx.random.normal((6,))
    a, gate = mx.split(y, 2, axis=-1)
    conv = mx.conv1d((a * mx.sigmoid(gate))[None], weight[..., None], padding=4, groups=6)[0] + bias
    want = conv * mx.sigmoid(conv)
    got = cpu_math.glu_depthwise_silu(np.array(y), np.array(weight), np.array(bias))
    assert got.shape == (frames, 6)
    assert np.abs(got - np.array(want)).max() <= 1e-5


@pytest.mark.parametrize("frames", [8, 9, 40])
def test_depthwise_convolutions_are_mlxs_grouped_ones(frames: int) -> None:
    """The CPU's shifted multiply-adds give what MLX's grouped convolutions give (odd and even lengths, the
    ceil of a stride-2 output included; the stride-2 one with its pointwise convolution and ReLU), to float32
    rounding."""
    import mlx.nn as nn

    mx.random.seed(10)
    conv1 = nn.Conv1d(6, 6, 9, padding=4, groups=6)
    x = mx.random.normal((1, frames, 6))
    got = cpu_math.depthwise_conv1d(x, conv1.weight, conv1.bias)
    assert got.shape == (1, frames, 6)
    assert np.abs(np.array(got) - np.array(conv1(x))).max() <= 1e-5
    conv2, pointwise = nn.Conv2d(5, 5, 3, stride=2, padding=1, groups=5), nn.Conv2d(5, 3, 1)
    y = mx.random.normal((1, frames, 7, 5))
    want = np.array(nn.relu(pointwise(conv2(y))))[0]
    depthwise = (np.array(conv2.weight), np.array(conv2.bias))
    pointwise_np = (np.array(pointwise.weight).reshape(3, 5).T, np.array(pointwise.bias))
    got2 = cpu_math.separable_conv2d_stride2_relu(np.array(y)[0], depthwise, pointwise_np)
    assert got2.shape == want.shape == ((frames + 1) // 2, 4, 3)
    assert np.abs(got2 - want).max() <= 1e-5
    bordered = np.pad(np.array(y)[0], ((1, 1), (1, 1), (0, 0)))  # the same input given with its zero border
    assert np.array_equal(cpu_math.separable_conv2d_stride2_relu(bordered, depthwise, pointwise_np, padded=True), got2)


@pytest.mark.parametrize("rows", [1, 40])
def test_silu_of_a_fresh_array_is_silu(rows: int) -> None:
    """One thread (a row) or the rows shared among threads, each with its own scratch."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, rows, 16)).astype(np.float32) * 4
    weight = mx.array(np.eye(16, dtype=np.float32))
    got = np.array(cpu_math.silu_of_fresh(mx.array(x) @ weight))  # a product's output, held by nobody else
    np.testing.assert_allclose(got, x / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)


def test_gelu_rows_is_gelu() -> None:
    """The numpy GELU of Whisper's CPU decode steps: the MLX one's formula, in place."""
    x = np.random.default_rng(5).standard_normal((3, 500)).astype(np.float32) * 5
    want = np.array(cpu_math.gelu(mx.array(x)))
    got = cpu_math.gelu_rows(x.copy())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("which", ["numpy", "mlx"])
def test_one_blas_runs_single_threaded_inside_and_is_restored_after_overlapping_holders(which: str) -> None:
    """Two engines' threads may hold it at once: the library stays at one thread until the last leaves, and the other
    BLAS (numpy's own beside the OpenBLAS preloaded for MLX) is never touched."""
    from threadpoolctl import ThreadpoolController

    from omnid import blas

    def threads() -> dict[str, int]:
        return {i["filepath"]: i["num_threads"] for i in ThreadpoolController().info() if i["user_api"] == "blas"}

    numpy_libs = [p for p in threads() if "numpy" in p]
    assert numpy_libs, "numpy's wheel brings its own OpenBLAS"
    assert blas.status().name == "openblas", "the OpenBLAS for MLX is preloaded (make setup installs it)"
    held = numpy_libs if which == "numpy" else [p for p in threads() if p not in numpy_libs]
    assert held
    context = cpu_math.numpy_blas_single_threaded if which == "numpy" else cpu_math.mlx_blas_single_threaded
    # Both libraries at two threads first, whatever the environment set (the suite runs with one BLAS thread per
    # process: conftest.py), so that holding one to a single thread is seen and the other's staying is too.
    with ThreadpoolController().limit(limits=2, user_api="blas"):
        before = threads()
        assert all(n == 2 for n in before.values()), before
        outer, inner = context(), context()
        outer.__enter__()
        inner.__enter__()
        inside = threads()
        outer.__exit__(None, None, None)  # the first out is not the last
        still = threads()
        inner.__exit__(None, None, None)
        assert all(inside[p] == 1 and still[p] == 1 for p in held)
        assert {p: n for p, n in inside.items() if p not in held} == {p: n for p, n in before.items() if p not in held}
        assert threads() == before


@pytest.mark.parametrize("rows", [1, 7, 14, 63])
def test_products_by_column_blocks_are_the_whole_product(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """A few rows by a transposed weight, its columns split between the threads and into blocks for the BLAS's
    small-matrix kernel (on a CPU whose BLAS has none, blocks as if it had): the product of x by the weight."""
    from omnid.engine import numpy_layers
    from omnid.engine.numpy_layers import Linear, by_columns

    rng = np.random.default_rng(rows)
    weight = rng.standard_normal((1000, 512), np.float32)  # (out, in), as MLX keeps it: 1000 columns, not 8s
    bias = rng.standard_normal(1000, np.float32)
    x = rng.standard_normal((rows, 512), np.float32)
    expected = x.astype(np.float64) @ weight.T.astype(np.float64) + bias
    for blocks in (numpy_layers.small_product_columns, lambda r, d: cpu_math.SMALL_PRODUCT // (r * d) // 8 * 8 or None):
        monkeypatch.setattr(numpy_layers, "small_product_columns", blocks)
        out = np.full((rows, 1000), np.nan, np.float32)
        by_columns(x, [(Linear(weight.T, bias), out)])
        assert np.abs(out - expected).max() <= 1e-4


def test_small_product_columns_keep_a_product_within_the_small_kernels_size() -> None:
    for rows, depth in ((1, 1024), (7, 1024), (14, 4096), (63, 1024)):
        columns = cpu_math.small_product_columns(rows, depth)
        if columns is not None:
            assert columns % 8 == 0 and 0 < rows * depth * columns <= cpu_math.SMALL_PRODUCT
    assert cpu_math.small_product_columns(500, 1024) is None  # too many rows for even 8 columns


def test_mlx_openblas_runs_the_kernels_the_cpu_has() -> None:
    """An OpenBLAS older than the CPU would fall back to generic SSE3 kernels (Prescott), several times slower:
    the preload names the family from the CPU's instructions, and leaves numpy's and other architectures alone."""
    from threadpoolctl import ThreadpoolController

    from omnid import blas

    avx512 = blas.AVX512 | {"avx2", "fma"}
    assert blas.coretype(frozenset(avx512), "x86_64") == "SkylakeX"
    assert blas.coretype(frozenset({"avx2", "fma", "sse3"}), "x86_64") == "Haswell"
    assert blas.coretype(frozenset({"sse3"}), "x86_64") is None
    assert blas.coretype(frozenset(avx512), "aarch64") is None
    import os
    import platform

    chosen = blas.coretype(blas._cpu_flags(), platform.machine().lower())
    if chosen is None or not blas.status().path or os.environ.get("OPENBLAS_CORETYPE"):
        return  # nothing chosen here: OpenBLAS's own choice, or the user's
    real = os.path.realpath(blas.status().path)
    mlx_lib = [i for i in ThreadpoolController().info() if os.path.realpath(i["filepath"]) == real]
    assert [i["architecture"] for i in mlx_lib] == [chosen]
    assert blas.status().reason.endswith(f"{chosen} kernels")
