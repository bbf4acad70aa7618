"""Differential tests of the torch.compile backend's lazy views (tilec.torch_backend.program.Value):
random chains of views (permute, transpose, split and merge reshapes, slices with steps, selects,
unsqueeze, expand) ending in a reduction, a matrix product or an elementwise op, compiled with
backend="tilec" and compared with eager torch on random inputs (hypothesis draws the chains)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tilec.torch_backend as tb  # noqa: E402


def _apply(x: "torch.Tensor", step: tuple) -> "torch.Tensor":
    kind, a, b = step
    if kind == "permute":
        dims = list(range(x.dim()))
        a %= x.dim()
        b %= x.dim()
        dims[a], dims[b] = dims[b], dims[a]
        return x.permute(dims)
    if kind == "split" and x.shape[a % x.dim()] % 2 == 0:
        d = a % x.dim()
        return x.reshape(*x.shape[:d], 2, x.shape[d] // 2, *x.shape[d + 1:])
    if kind == "merge" and x.dim() >= 2:
        d = a % (x.dim() - 1)
        return x.reshape(*x.shape[:d], x.shape[d] * x.shape[d + 1], *x.shape[d + 2:]) \
            if x.is_contiguous() else x.contiguous().reshape(*x.shape[:d], -1, *x.shape[d + 2:])
    if kind == "slice":
        d = a % x.dim()
        n = x.shape[d]
        start, step = b % max(n - 1, 1), 1 + b % 2
        if start < n:
            return x.narrow(d, 0, n)[(slice(None),) * d + (slice(start, None, step),)]
    if kind == "select" and x.dim() >= 2:
        d = a % x.dim()
        return x.select(d, b % x.shape[d])
    if kind == "unsqueeze":
        return x.unsqueeze(a % (x.dim() + 1))
    if kind == "expand":
        ones = [d for d in range(x.dim()) if x.shape[d] == 1]
        if ones:
            shape = list(x.shape)
            shape[ones[a % len(ones)]] = 2 + b % 3
            return x.expand(*shape)
    return x


STEP = st.tuples(st.sampled_from(["permute", "split", "merge", "slice", "select", "unsqueeze", "expand"]),
                 st.integers(0, 7), st.integers(0, 7))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=5), end=st.sampled_from(["sum_last", "sum_all", "scale", "mm"]),
       seed=st.integers(0, 2**16))
def test_random_view_chains_match_eager(steps: list, end: str, seed: int) -> None:
    torch.manual_seed(seed)
    x = torch.randn(4, 6, 8)
    w = torch.randn(8, 3)

    def f(x: "torch.Tensor", w: "torch.Tensor") -> "torch.Tensor":
        y = x * 1.5  # a kernel-internal value, so every view below is the program's
        for s in steps:
            y = _apply(y, s)
        if end == "sum_last":
            return y.sum(-1)
        if end == "sum_all":
            return y.sum()
        if end == "mm":
            flat = y.reshape(-1, y.shape[-1])
            return flat[:, :3] @ w[:min(3, flat.shape[-1])] if flat.shape[-1] >= 3 else flat.sum(-1)
        return y * 2.0 + 1.0

    torch._dynamo.reset()
    got = torch.compile(f, backend="tilec")(x, w)
    want = f(x, w)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_split_axis_reduction_is_bounded() -> None:
    """A reduction over the inner half of a split axis sums that half only (regression: the
    split's inner index ran over the whole axis)."""
    x = torch.randn(4, 17, 128)
    w = torch.randn(128, 128)

    def f(x: "torch.Tensor") -> "torch.Tensor":
        return (x @ w).view(4, 17, 4, 32).transpose(1, 2).sum(-1)

    torch._dynamo.reset()
    tb.reset_coverage()
    torch.testing.assert_close(torch.compile(f, backend="tilec")(x), f(x), rtol=1e-4, atol=1e-3)
    assert tb.coverage()["kernels"] >= 1 and not tb.coverage()["fallback"]
