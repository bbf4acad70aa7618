"""The attention-backward template's second form: a gradient program whose softmax is shifted by the
forward's saved logsumexp (what the torch.compile backend writes for torch's flash backward), written
by hand here, against torch autograd in float64; and the backend's own flash backward."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilec
from tilec.frontend import parse
from tilec.ir.bounds import bind
from tilec.schedule.cpu import attention_backward
from tilec.schedule.patterns import attention_backward as backward_pattern

from test_attention_backward import fused, inputs, torch_grads

OUTPUTS = {"DQ": "    DQ[b, h, s, d: B, H, S, D] = +(DS[b, h, s, t] * K[b, h, t, d]);\n",
           "DK": "    DK[b, h, t, d: B, H, T, D] = +(DS[b, h, s, t] * Q[b, h, s, d]);\n",
           "DV": "    DV[b, h, t, e: B, H, T, F] = +(P[b, h, s, t] * DO[b, h, s, e]);\n"}


def saved_source(causal: bool, scale: float, wanted: str = "DQ DK DV", row: str = "P[b, h, s, t] * DP[b, h, s, t]",
                 lse_copy: bool = True) -> str:
    """The second form for outputs `wanted`; the logsumexp LSE laid out (B, S, H) as torch keeps it
    (copied into rows first), or (B, H, S, 1) and read as it is."""
    names = wanted.split()
    scores = "Zc" if causal else "Z"
    mask = ("    Neg = -1.0e30;\n"
            "    Zc[b, h, s, t: B, H, S, T] = >(Z[b, h, s, t]), s - t < S default Neg;\n") if causal else ""
    lse = "Lse" if lse_copy else "LSE"
    gradient = (f"    DP[b, h, s, t: B, H, S, T] = +(DO[b, h, s, e] * V[b, h, t, e]);\n"
                f"    Row[b, h, s, 0: B, H, S, 1] = +({row});\n"
                f"    DS = P * (DP - Row) * {float(scale)!r};\n") if {"DQ", "DK"} & set(names) else ""
    return (f"function (Q[B, H, S, D], K[B, H, T, D], V[B, H, T, F], DO[B, H, S, F], "
            f"LSE{'[B, S, H]' if lse_copy else '[B, H, S, 1]'}) -> ({', '.join(names)}) {{\n"
            f"    L[b, h, s, t: B, H, S, T] = +(Q[b, h, s, d] * K[b, h, t, d]);\n"
            f"    Z = L * {float(scale)!r};\n"
            f"{mask}"
            + ("    Lse[b, h, s, 0: B, H, S, 1] = =(LSE[b, s, h]);\n" if lse_copy else "")
            + f"    X = exp({scores} - {lse});\n"
            f"    R[b, h, s, 0: B, H, S, 1] = +(X[b, h, s, t]);\n"
            f"    P = X / R;\n"
            + (OUTPUTS["DV"] if "DV" in names else "") + gradient
            + "".join(OUTPUTS[n] for n in ("DQ", "DK") if n in names) + "}")


def logsumexp(q: np.ndarray, k: np.ndarray, scale: float, causal: bool, lse_copy: bool) -> np.ndarray:
    z = np.einsum("bhsd,bhtd->bhst", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        z = np.where(np.tril(np.ones(z.shape[-2:], bool)), z, -np.inf)
    m = z.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True))).astype(np.float32)
    return lse.squeeze(-1).transpose(0, 2, 1).copy() if lse_copy else lse


@pytest.mark.parametrize("b, h, s, t, d, e, causal, lse_copy", [
    (2, 3, 37, 45, 20, 12, False, True),  # S != T, neither a multiple of a block
    (1, 2, 45, 37, 20, 12, True, True),  # causal with more queries than keys
    (2, 2, 7, 11, 8, 8, False, False),  # the logsumexp read as it is
    (1, 1, 130, 70, 16, 16, True, False),  # several query and key blocks
])
@pytest.mark.parametrize("shift", [0.0, 3.0])
def test_saved_form_is_fused_and_matches_torch(b, h, s, t, d, e, causal, lse_copy, shift):
    """The gradients do not depend on the shift (the program normalises E by its own sum): a
    logsumexp off by 3 gives the same gradients, as the program says."""
    scale = 0.3
    q, k, v, do = inputs(b, h, s, t, d, e, seed=s * 7 + t)
    lse = logsumexp(q, k, scale, causal, lse_copy) + np.float32(shift)
    fn = tilec.compile(saved_source(causal, scale, lse_copy=lse_copy))
    arrays = [q, k, v, do, lse]
    assert fused(fn, arrays)
    want = torch_grads(q, k, v, do, causal=causal, scale=scale, wrt=["Q", "K", "V"])
    for name, g, w in zip("QKV", fn(*arrays), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max(), err_msg=name)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_saved_form_in_16_bits_is_summed_in_float32(dtype):
    """16-bit inputs and gradients: every sum in float32 and each gradient rounded once, so the error is
    that one rounding's (half a unit in the last place, relative), however many blocks are summed."""
    import ml_dtypes

    low = getattr(ml_dtypes, dtype) if dtype == "bfloat16" else np.float16
    q, k, v, do = (a.astype(low) for a in inputs(1, 2, 200, 200, 16, 16, seed=3))
    lse = logsumexp(q, k, 0.25, True, True).astype(low)  # (float32 would promote the program's tensors)
    fn = tilec.compile(saved_source(True, 0.25))
    assert fused(fn, [q, k, v, do, lse])
    want = torch_grads(*(a.astype(np.float64) for a in (q, k, v, do)), causal=True, scale=0.25, wrt=["Q", "K", "V"])
    eps = float(ml_dtypes.finfo(low).eps)
    for name, g, w in zip("QKV", fn(q, k, v, do, lse), want):
        assert g.dtype == low
        err = np.abs(g.astype(np.float64) - w)
        assert (err <= eps * np.abs(w) + 1e-3 * eps * np.abs(w).max()).all(), (name, err.max())


def bound(source: str):
    shapes = {"Q": (1, 2, 5, 4), "K": (1, 2, 7, 4), "V": (1, 2, 7, 3), "DO": (1, 2, 5, 3), "LSE": (1, 5, 2)}
    if "LSE[B, H, S, 1]" in source:
        shapes["LSE"] = (1, 2, 5, 1)
    dtypes = {n: "float32" for n in shapes}
    return bind(parse(source, {}), shapes, dtypes)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("wanted", ["DQ DK DV", "DQ", "DK", "DV", "DK DV", "DV DQ"])
def test_matcher_recognises_every_subset_of_the_saved_form(causal, wanted):
    bp = bound(saved_source(causal, 0.5, wanted))
    plan = backward_pattern.match(0, bp, attention_backward.DTYPES)
    assert plan is not None and plan.consumed == len(bp.statements) and plan.saved is not None
    written = {"DQ": plan.dq, "DK": plan.dk, "DV": plan.dv}
    assert {n for n, out in written.items() if out is not None} == set(wanted.split())
    assert plan.saved.lse == "LSE" and plan.saved.axes == (0, 2, 1)
    assert plan.causal == causal and plan.scale == 0.5 and (plan.s, plan.t, plan.d, plan.e) == (5, 7, 4, 3)


@pytest.mark.parametrize("old, new", [
    ("P[b, h, s, t] * DP[b, h, s, t]", "DO[b, h, s, e] * DO[b, h, s, e]"),  # a row sum over e, not over t
    ("DS = P * (DP - Row) * 0.5;", "DS = P * (DP - Row) * 0.25;"),  # another scale than the scores'
    ("X = exp(Z - Lse);", "X = exp(Z - Lse) * 2.0;"),
    ("P = X / R;", "P = R / X;"),
    ("Lse[b, h, s, 0: B, H, S, 1] = =(LSE[b, s, h]);", "Lse[b, h, s, 0: B, H, S, 1] = +(LSE[b, s, h]);"),
])
def test_programs_that_only_look_like_the_saved_form_are_not_fused(old, new):
    source = saved_source(False, 0.5)
    assert old in source
    bp = bound(source.replace(old, new))
    assert backward_pattern.match(0, bp, attention_backward.DTYPES) is None


# ------------------------------------------------------------------ the backend's flash backward


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
def test_backend_flash_backward_is_fused_and_no_further_from_float64_than_torch(dtype, causal):
    """torch.compile(backend="tilec") of SDPA's training step: the backward program is one fused
    kernel, and its gradients are no further from float64's than eager torch's own (torch's
    Delta = rowsum(dO out) keeps a 16-bit out's rounding; the kernel sums P dP in float32). Scores of
    a few units make the softmax peaked, where that rounding shows."""
    from tilec.torch_backend import tasks

    gen = torch.Generator().manual_seed(5)
    q = torch.empty(2, 3, 11, 8).uniform_(-3, 3, generator=gen).to(dtype)
    k, v = (torch.empty(2, 3, 17, 8).uniform_(-3, 3, generator=gen).to(dtype) for _ in range(2))
    dy = torch.empty(2, 3, 11, 8).uniform_(-3, 3, generator=gen).to(dtype)

    def sdpa(q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    torch._dynamo.reset()
    known = set(tasks.PROGRAMS)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    got = torch.autograd.grad(torch.compile(sdpa, backend="tilec", dynamic=False)(*leaves), leaves, dy)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    eager = torch.autograd.grad(sdpa(*leaves), leaves, dy)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    exact = torch.autograd.grad(sdpa(*leaves), leaves, dy.double())
    for name, g, e, x in zip("qkv", got, eager, exact):
        ours, theirs = (g.double() - x).abs().max().item(), (e.double() - x).abs().max().item()
        assert ours <= 1.25 * theirs + 1e-6 * x.abs().max().item(), (name, ours, theirs)
    firsts = [tilec.explain(src, {n: shape for n, shape, _ in sig}, {n: dt for n, _, dt in sig},
                            stage="templates").splitlines()[0] for src, sig in tasks.PROGRAMS if (src, sig) not in known]
    assert any(line.startswith("0: attention_backward") for line in firsts), firsts


@pytest.mark.parametrize("wanted", ["DV", "DQ", "DK DV"])
def test_saved_form_subsets_are_fused_and_match_torch(wanted):
    """Fewer gradients than all three (only dV: no dP is formed; the log-sum-exp pass alone feeds it)."""
    q, k, v, do = inputs(1, 3, 29, 41, 12, 10, seed=9)
    lse = logsumexp(q, k, 0.4, True, True)
    fn = tilec.compile(saved_source(True, 0.4, wanted))
    arrays = [q, k, v, do, lse]
    assert fused(fn, arrays)
    names = wanted.split()
    want = torch_grads(q, k, v, do, causal=True, scale=0.4, wrt=[n[1] for n in names])
    got = fn(*arrays)
    for name, g, w in zip(names, got if isinstance(got, tuple) else (got,), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max(), err_msg=name)


@settings(max_examples=20, deadline=None)
@given(dims=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 40), st.integers(1, 40), st.integers(1, 24),
                      st.integers(1, 24)),
       causal=st.booleans(), lse_copy=st.booleans(), shift=st.floats(-4, 4), seed=st.integers(0, 2**31 - 1))
def test_saved_form_on_random_shapes_matches_torch(dims, causal, lse_copy, shift, seed):
    """Any batch, heads, sequence lengths (queries past keys with causal masks included) and head
    widths, with any shift of the logsumexp: the fused kernel's gradients are torch's."""
    b, h, s, t, d, e = dims
    q, k, v, do = inputs(b, h, s, t, d, e, seed=seed)
    lse = logsumexp(q, k, 0.35, causal, lse_copy) + np.float32(shift)
    fn = tilec.compile(saved_source(causal, 0.35, lse_copy=lse_copy))
    arrays = [q, k, v, do, lse]
    # (with one query or one key, the causal guard t <= s is always true or a range of t, and bounds
    # inference folds it away: no mask is left for the pattern to see)
    assert fused(fn, arrays) or (causal and min(s, t) == 1)
    want = torch_grads(q, k, v, do, causal=causal, scale=0.35, wrt=["Q", "K", "V"])
    for name, g, w in zip("QKV", fn(*arrays), want):  # (a gradient of exact zeros keeps float32's rounding)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6 + 2e-5 * np.abs(w).max(), err_msg=name)
