"""Winograd F(2x2, 3x3) (tilec.schedule.cpu.winograd): 3x3 stride-1 convolutions, their input gradients
(taps running backwards) and their filter gradients as 16 GEMMs, checked against torch in float64.

Most cases lower the threshold on channels so that small, fast shapes take the Winograd path; a
test at the default threshold shows which real layers take it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from reference import conv2d_grad_shapes, torch_conv2d_grads
from tilec.bench.ops import conv2d_source
from tilec.ops.sources import conv_source
from tilec.schedule import params

# F(2x2, 3x3) adds and subtracts up to 16 transformed terms per product: about one decimal digit
# below the direct sum, still far inside these bounds for sums of a few thousand O(1) terms.
RTOL, ATOL = 2e-4, 2e-3


def allow_small() -> Any:
    """Any size takes the GEMM templates, and any GEMM-able 3x3 convolution the Winograd form (the
    caches know the lowering parameters: kernels lowered under others are never handed out)."""
    return params.overridden(gemm_min_work=1, gemm_min_columns=1, winograd_min_channels=1, winograd_min_tiles=1)


@pytest.fixture
def small_channels():
    with allow_small():
        yield


def winograd_statements(src: str, shapes: dict[str, tuple[int, ...]], dtype: str = "float32",
                        target: str = "llvm") -> set[str]:
    """The statements (by output) whose 16 GEMMs the loop IR holds."""
    loops = tilec.explain(src, shapes, dtypes={k: dtype for k in shapes}, stage="loop", target=target)
    params = loops.splitlines()[0]
    return {p.split(".wM:")[0].split()[-1] for p in params.split(", ") if ".wM:" in p}


def check_conv_and_gradients(shape: dict[str, int], dtype=np.float32, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x, f, dy = (rng.standard_normal(dims).astype(dtype) for dims in conv2d_grad_shapes(shape).values())
    y_ref, dx_ref, df_ref = torch_conv2d_grads(x, f, dy, shape["stride"], shape["pad"])
    src = conv2d_source(shape)
    tol = dict(rtol=RTOL, atol=ATOL) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(tilec.compile(src)(x, f), y_ref, **tol)
    dx, df = tilec.grad(src, wrt=["X", "F"])(x, f, dy)
    np.testing.assert_allclose(dx, dx_ref, **tol)
    np.testing.assert_allclose(df, df_ref, **tol)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 2), c=st.integers(1, 24), co=st.integers(1, 20), h=st.integers(1, 9), w=st.integers(1, 9),
       pad=st.integers(0, 2))
def test_conv_and_both_gradients_match_torch(n, c, co, h, w, pad):
    if h + 2 * pad < 3 or w + 2 * pad < 3:
        return  # no output: the bench rejects the shape
    with allow_small():
        shape = dict(N=n, C=c, H=h, W=w, CO=co, KH=3, KW=3, stride=1, pad=pad)
        check_conv_and_gradients(shape, seed=n * 1000 + c * 31 + co)
        if min(h, w) < 3:
            return  # bounds inference narrows the taps' ranges to the few that reach the image
        shapes = conv2d_grad_shapes(shape)
        assert winograd_statements(conv2d_source(shape), {k: shapes[k] for k in ("X", "F")}) == {"Y"}
        assert winograd_statements(tilec.grad(conv2d_source(shape), wrt=["X", "F"]).source, shapes) == {"DI_1", "DK_2"}


def test_float64_and_ragged_tiles(small_channels):
    check_conv_and_gradients(dict(N=2, C=5, H=7, W=4, CO=6, KH=3, KW=3, stride=1, pad=1), dtype=np.float64)


@pytest.mark.parametrize("order", ["ij", "ji"])
def test_any_index_order_and_taps_running_backwards(small_channels, order):
    """A hand-written input gradient: taps subtracted, the filter's taps in either order, an
    offset other than the padding's."""
    filt = "K[i, j, c, co]" if order == "ij" else "K[j, i, c, co]"
    src = f"""function (D[N, H, W, CO], K[A, B, C, CO]) -> (O) {{
        O[n, x, y, c: N, H + 1, W, C] = +(D[n, x - i + 1, y - j, co] * {filt});
    }}"""
    rng = np.random.default_rng(3)
    d = rng.standard_normal((2, 6, 5, 7))
    k = rng.standard_normal((3, 3, 4, 7))
    kk = k if order == "ij" else k.transpose(1, 0, 2, 3)
    ref = np.zeros((2, 7, 5, 4))
    for i in range(3):
        for j in range(3):
            for x in range(7):
                for y in range(5):
                    if 0 <= x - i + 1 < 6 and 0 <= y - j < 5:
                        ref[:, x, y, :] += d[:, x - i + 1, y - j, :] @ kk[i, j].T
    np.testing.assert_allclose(tilec.compile(src)(d, k), ref, rtol=1e-9, atol=1e-9)
    assert winograd_statements(src, {"D": d.shape, "K": k.shape}, "float64") == {"O"}


def test_fused_epilogue(small_channels):
    src = """function (I[N, H, W, C], K[KH, KW, C, CO], Bias[CO]) -> (O) {
        T[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]);
        O = relu(T + Bias);
    }"""
    rng = np.random.default_rng(4)
    i, k, bias = rng.standard_normal((1, 6, 6, 8)), rng.standard_normal((3, 3, 8, 16)), rng.standard_normal(16)
    ip = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    t = sum(ip[:, a:a + 6, b:b + 6, :] @ k[a, b] for a in range(3) for b in range(3))
    np.testing.assert_allclose(tilec.compile(src)(i, k, bias), np.maximum(t + bias, 0), rtol=1e-9, atol=1e-9)
    assert winograd_statements(src, {"I": i.shape, "K": k.shape, "Bias": bias.shape}, "float64") == {"T"}


@pytest.mark.parametrize("shape", [dict(N=1, C=8, H=9, W=9, CO=8, KH=3, KW=3, stride=2, pad=1),
                                   dict(N=1, C=8, H=9, W=9, CO=8, KH=5, KW=5, stride=1, pad=2),
                                   dict(N=1, C=8, H=9, W=9, CO=8, KH=3, KW=2, stride=1, pad=1)])
def test_other_convolutions_keep_the_direct_form(small_channels, shape):
    shapes = conv2d_grad_shapes(shape)
    assert winograd_statements(conv2d_source(shape), {k: shapes[k] for k in ("X", "F")}) == set()
    assert winograd_statements(tilec.grad(conv2d_source(shape), wrt=["X", "F"]).source, shapes) == set()


def test_default_threshold_picks_the_wide_layers():
    """At the default thresholds the 256-channel ResNet layer takes the Winograd form and the
    64-channel one (whose 16 small GEMMs run too slowly to gain) does not."""
    for channels, expected in ((256, {"DI_1", "DK_2"}), (64, set())):
        shape = dict(N=8, C=channels, H=14, W=14, CO=channels, KH=3, KW=3, stride=1, pad=1)
        shapes = conv2d_grad_shapes(shape)
        assert winograd_statements(tilec.grad(conv2d_source(shape), wrt=["X", "F"]).source, shapes) == expected
    check_conv_and_gradients(dict(N=1, C=128, H=6, W=7, CO=128, KH=3, KW=3, stride=1, pad=1))


@pytest.mark.parametrize("target, expected", [("llvm -mcpu=znver4", set()), ("llvm -mcpu=znver3", {"Y"})])
def test_bfloat16_takes_the_pair_dot_product_where_the_cpu_has_it(target, expected):
    """A wide bfloat16 layer with a bias (its products held in float32 for the epilogue, the form
    tilec.nn's convolutions take) runs on bfloat16 pairs where the CPU has the pair dot product (twice
    float32's products per instruction; Winograd's transforms would run in float32), and as
    Winograd's 16 float32 GEMMs where the products are converted to float32 anyway."""
    src = conv_source((1, 1), ((1, 1), (1, 1)), (1, 1), True, 1, False, False)
    shapes = {"X": (8, 256, 14, 14), "F": (256, 256, 3, 3), "Bias": (256,)}
    assert winograd_statements(src, shapes, "bfloat16", target) == expected
