"""Numpy references and comparison helpers shared by the acceptance tests.

Nothing here imports tilec: these are the ground truth the compiler is checked against.
"""

from __future__ import annotations

import numpy as np

# Tolerances per result dtype. float32 results come from sums of at most a few hundred
# terms of O(1) values, so 1e-4 relative / absolute is generous but still catches any
# wrong index, wrong bound or wrong aggregation.
TOLERANCES = {
    np.dtype(np.float32): dict(rtol=1e-4, atol=1e-4),
    np.dtype(np.float64): dict(rtol=1e-10, atol=1e-10),
}


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def randn(r: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    """Standard-normal values of the given shape and dtype (int32: small signed ints)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "i":
        return r.integers(-5, 6, size=shape).astype(dtype)
    return r.standard_normal(shape).astype(dtype)


def uniform(r: np.random.Generator, lo: float, hi: float, *shape: int, dtype=np.float32):
    return r.uniform(lo, hi, size=shape).astype(dtype)


def assert_matches(out, ref, dtype=None, **tol) -> None:
    """`out` has `ref`'s shape and dtype (or `dtype`) and its values (exact for ints/bools)."""
    ref = np.asarray(ref)
    expected_dtype = np.dtype(dtype) if dtype is not None else ref.dtype
    assert isinstance(out, np.ndarray) or np.isscalar(out), (
        f"expected a numpy array, got {type(out)!r}"
    )
    out = np.asarray(out)
    assert out.shape == ref.shape, f"shape {out.shape} != expected {ref.shape}"
    assert out.dtype == expected_dtype, f"dtype {out.dtype} != expected {expected_dtype}"
    if expected_dtype.kind in "iub":
        np.testing.assert_array_equal(out, ref.astype(expected_dtype))
    else:
        kw = dict(TOLERANCES.get(expected_dtype, dict(rtol=1e-4, atol=1e-4)))
        kw.update(tol)
        np.testing.assert_allclose(out, ref.astype(np.float64), **kw)


def conv2d_nhwc(I, K, stride=1, dilation=1, pad=0, out_hw=None):
    """Reference 2-D convolution (cross-correlation, as in deep-learning frameworks).

    I: [N, H, W, CI], K: [KH, KW, CI, CO], zero padding of `pad` cells before each spatial
    dim (and as many after as the output needs).

        O[n, x, y, co] = sum_{i, j, ci} Ipad[n, stride*x + dilation*i, stride*y + dilation*j, ci]
                                         * K[i, j, ci, co]

    `out_hw` defaults to the usual ((H + 2*pad - dilation*(KH-1) - 1) // stride + 1, ...).
    Computed in float64.
    """
    I = np.asarray(I, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    n, h, w, ci = I.shape
    kh, kw, ci2, co = K.shape
    assert ci == ci2
    if out_hw is None:
        oh = (h + 2 * pad - dilation * (kh - 1) - 1) // stride + 1
        ow = (w + 2 * pad - dilation * (kw - 1) - 1) // stride + 1
    else:
        oh, ow = out_hw
    need_h = stride * (oh - 1) + dilation * (kh - 1) + 1
    need_w = stride * (ow - 1) + dilation * (kw - 1) + 1
    Ip = np.zeros((n, max(need_h, h + pad), max(need_w, w + pad), ci))
    Ip[:, pad:pad + h, pad:pad + w, :] = I
    O = np.zeros((n, oh, ow, co))
    for i in range(kh):
        for j in range(kw):
            x0, y0 = dilation * i, dilation * j
            xs = slice(x0, x0 + stride * (oh - 1) + 1, stride)
            ys = slice(y0, y0 + stride * (ow - 1) + 1, stride)
            window = Ip[:, xs, ys, :]
            O += np.einsum("nxyc,cd->nxyd", window, K[i, j])
    return O


def max_pool_2x2_nhwc(I):
    """Non-overlapping 2x2 max pool, stride 2, dropping an odd last row/column."""
    n, h, w, c = I.shape
    oh, ow = h // 2, w // 2
    return I[:, :2 * oh, :2 * ow, :].reshape(n, oh, 2, ow, 2, c).max(axis=(2, 4))


def max_pool_3x3_same(I):
    """3x3 window max, stride 1, output the size of the input, windows clipped at the border
    (cells outside the input are ignored, not treated as 0)."""
    h, w = I.shape
    Ip = np.full((h + 2, w + 2), -np.inf)
    Ip[1:-1, 1:-1] = I
    out = np.full((h, w), -np.inf)
    for i in range(3):
        for j in range(3):
            out = np.maximum(out, Ip[i:i + h, j:j + w])
    return out.astype(I.dtype)


def correlate1d_same_offset(I, K, offset):
    """O[x] = sum_i I[x + i - offset] * K[i] for x in [0, len(I)), out-of-range terms skipped."""
    n = len(I)
    O = np.zeros(n)
    for x in range(n):
        for i in range(len(K)):
            t = x + i - offset
            if 0 <= t < n:
                O[x] += float(I[t]) * float(K[i])
    return O


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softmax_rows(X):
    X = np.asarray(X, dtype=np.float64)
    E = np.exp(X - X.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def int_trunc_div(a, b):
    """Tile integer `/`: rounded toward zero (as PlaidML's generated C code divides), with division
    by zero giving 0."""
    a = np.asarray(a)
    b = np.asarray(b)
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe) * np.where((a >= 0) == (safe > 0), 1, -1)
    return np.where(b == 0, 0, q).astype(np.result_type(a, b))


# ------------------------------------------------------------------ shared Tile programs

MATMUL = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
CONV_NHWC_SAME = ("function (I[N, H, W, C], K[KH, KW, C, F]) -> (O) { O[n, x, y, f: N, H, W, F] = "
                  "+(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, f]); }")
SOFTMAX = """
function (X[N, C]) -> (O) {
    M[i, 0: N, 1] = >(X[i, j]);
    E = exp(X - M);
    S[i, 0: N, 1] = +(E[i, j]);
    O = E / S;
}
"""


def conv2d_grad_shapes(shape: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """A conv2d gradient's input shapes (X, F and the output gradient DO) for the bench's shape keys
    (N, C, H, W, CO, KH, KW, stride, pad)."""
    n, c, h, w, co, kh, kw = (shape[k] for k in ("N", "C", "H", "W", "CO", "KH", "KW"))
    s, p = shape["stride"], shape["pad"]
    return {"X": (n, c, h, w), "F": (co, c, kh, kw), "DO": (n, co, (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1)}


def torch_conv2d_grads(x, f, dy, stride, pad):
    """(y, dX, dF) of torch's conv2d in float64: the reference for tilec's derived conv gradients."""
    import pytest

    torch = pytest.importorskip("torch")
    xt = torch.from_numpy(x.astype(np.float64)).requires_grad_()
    ft = torch.from_numpy(f.astype(np.float64)).requires_grad_()
    y = torch.nn.functional.conv2d(xt, ft, stride=stride, padding=pad)
    dx, df = torch.autograd.grad(y, (xt, ft), torch.from_numpy(dy.astype(np.float64)))
    return y.detach().numpy(), dx.numpy(), df.numpy()
