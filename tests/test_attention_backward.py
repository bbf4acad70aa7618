"""The fused attention-backward template: tilec.grad of the attention source, against torch
autograd (float32), finite differences (float64 reference), and the unfused derived program."""

from __future__ import annotations


import numpy as np
import pytest
import torch

import tilec
from tilec.ops import kernels, torch_ops
from tilec.ops.sources import attention_source
from tilec.autodiff import derive
from tilec.errors import ScheduleError
from tilec.frontend import parse
from tilec.ir.bounds import bind
from tilec.schedule.cpu import attention_backward
from tilec.schedule.patterns import attention_backward as backward_pattern
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.pipeline import resolve_target

SMALL = TemplateSchedule((TemplateConfig(0, "attention_backward", (("bk", 16), ("bq", 8), ("mr", 4))),))
NAMES = ("Q", "K", "V")


def inputs(b: int, h: int, s: int, t: int, d: int, e: int, seed: int, dtype=np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(dtype) for shape in ((b, h, s, d), (b, h, t, d), (b, h, t, e),
                                                                  (b, h, s, e))]


def torch_grads(q, k, v, do, causal: bool, scale: float, wrt: list[str]) -> list[np.ndarray]:
    """torch autograd of sdpa in float64 (causal: torch's top-left mask, t <= s)."""
    xs = [torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (q, k, v)]
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril() if causal else None
    out = torch.nn.functional.scaled_dot_product_attention(*xs, attn_mask=mask, scale=scale)
    grads = torch.autograd.grad(out, xs, torch.from_numpy(do.astype(np.float64)))
    return [grads[NAMES.index(n)].numpy() for n in wrt]


def fused(fn: tilec.Function, arrays: list[np.ndarray]) -> bool:
    """Whether `fn` lowers to the fused backward kernel for these inputs (its transposed-Q
    workspace is there, the derived program's dP is not)."""
    shapes = dict(zip(fn.inputs, (a.shape for a in arrays)))
    dtypes = {name: str(a.dtype) for name, a in zip(fn.inputs, arrays)}
    loop = fn.explain(shapes, dtypes, stage="loop")
    return ".Qt" in loop and "DP_0" not in loop


def as_list(out) -> list[np.ndarray]:
    return list(out) if isinstance(out, tuple) else [out]


# ------------------------------------------------------------------ values


@pytest.mark.parametrize("b, h, s, t, d, e, causal, wrt, small", [
    (2, 3, 37, 45, 20, 12, False, "QKV", True),  # S != T, neither a multiple of a block
    (1, 2, 45, 37, 20, 12, True, "QKV", True),  # causal with more queries than keys
    (1, 1, 70, 33, 16, 16, True, "VQ", False),  # default knobs: several query blocks, one key block
    (2, 1, 13, 29, 64, 70, True, "K", True),  # more keys than queries: keys no query sees get 0
    (1, 2, 9, 9, 5, 3, False, "Q", True),
    (1, 1, 1, 1, 1, 1, False, "KV", False),
    (16, 4, 16, 16, 8, 8, True, "QKV", False),  # the small transformer's: default knobs shrink to 16 x 16
    (2, 2, 7, 11, 8, 8, False, "QKV", False),  # default knobs shrunk past sequences shorter than a block
])
def test_fused_gradients_match_torch(b, h, s, t, d, e, causal, wrt, small):
    scale = 0.3
    arrays = inputs(b, h, s, t, d, e, seed=s * 31 + t)
    fn = tilec.grad(attention_source(causal, scale), wrt=list(wrt))
    if small:
        fn = fn.with_schedule(SMALL)
    assert fused(fn, arrays)
    got = as_list(fn(*arrays))
    want = torch_grads(*arrays, causal=causal, scale=scale, wrt=list(wrt))
    for name, g, w in zip(wrt, got, want):
        assert g.shape == w.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max(), err_msg=name)


def test_default_knobs_shrink_to_short_sequences():
    assert attention_backward.default_knobs(512, 512) == attention_backward.AttentionBackwardKnobs()
    small = attention_backward.default_knobs(16, 16)
    assert (small.bq, small.bk) == (16, 16)
    odd = attention_backward.default_knobs(7, 11)
    assert (odd.bq, odd.bk) == (8, 16) and not attention_backward.knob_problems(odd)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-7), (np.float32, 1e-4)])
def test_fused_gradient_against_finite_differences(causal, dtype, tol):
    """<dL/dX, U> of L = sum(attention(Q, K, V) * dO), central differences in float64 numpy."""
    q, k, v, do = inputs(1, 2, 11, 19, 6, 5, seed=3, dtype=dtype)
    fn = tilec.grad(attention_source(causal, 0.4), wrt=list(NAMES)).with_schedule(SMALL)
    assert fused(fn, [q, k, v, do])
    grads = as_list(fn(q, k, v, do))

    def loss(q64, k64, v64):
        s = np.einsum("bhsd,bhtd->bhst", q64, k64) * 0.4
        if causal:
            s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return float((np.einsum("bhst,bhte->bhse", p, v64) * do.astype(np.float64)).sum())

    rng = np.random.default_rng(7)
    base = [a.astype(np.float64) for a in (q, k, v)]
    eps = 1e-5
    for n, grad in enumerate(grads):
        assert grad.dtype == dtype
        u = rng.standard_normal(base[n].shape)
        plus = [a + eps * u if i == n else a for i, a in enumerate(base)]
        minus = [a - eps * u if i == n else a for i, a in enumerate(base)]
        numeric = (loss(*plus) - loss(*minus)) / (2 * eps)
        assert abs(float((grad.astype(np.float64) * u).sum()) - numeric) <= tol * max(1.0, abs(numeric)), NAMES[n]


def test_fused_matches_the_unfused_derived_program():
    arrays = inputs(2, 2, 50, 66, 8, 8, seed=5)
    fn = tilec.grad(attention_source(True, 0.25), wrt=list(NAMES))
    plain = fn.with_schedule(TemplateSchedule((TemplateConfig(0, "default"),)))
    assert fused(fn, arrays) and not fused(plain, arrays)
    for g, w in zip(as_list(fn(*arrays)), as_list(plain(*arrays))):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * np.abs(w).max())


UNSCALED_3D = """function (Q[H, S, D], K[H, T, D], V[H, T, E]) -> (O) {
    L[h, s, t: H, S, T] = +(Q[h, s, d] * K[h, t, d]);
    M[h, s, 0: H, S, 1] = >(L[h, s, t]);
    X = exp(L - M);
    R[h, s, 0: H, S, 1] = +(X[h, s, t]);
    P = X / R;
    O[h, s, e: H, S, E] = +(P[h, s, t] * V[h, t, e]);
}"""


def test_one_batch_axis_and_no_scale():
    q, k, v, do = (a[0] for a in inputs(1, 3, 19, 23, 8, 5, seed=9))
    fn = tilec.grad(UNSCALED_3D, wrt=list(NAMES)).with_schedule(SMALL)
    assert fused(fn, [q, k, v, do])
    want = torch_grads(q[None], k[None], v[None], do[None], causal=False, scale=1.0, wrt=list(NAMES))
    for g, w in zip(fn(q, k, v, do), want):
        np.testing.assert_allclose(g, w[0], rtol=1e-4, atol=2e-5 * np.abs(w).max())


TWO_PASS = TemplateSchedule((TemplateConfig(0, "attention_backward", (("bk", 16), ("bq", 8), ("panel", False))),))


@pytest.mark.parametrize("causal, wrt", [(False, "QKV"), (True, "QKV"), (True, "KV"), (False, "Q")])
def test_two_passes_without_a_panel(causal, wrt):
    arrays = inputs(2, 1, 29, 37, 12, 10, seed=11)
    fn = tilec.grad(attention_source(causal, 0.3), wrt=list(wrt)).with_schedule(TWO_PASS)
    shapes = dict(zip(fn.inputs, (a.shape for a in arrays)))
    loop = fn.explain(shapes, stage="loop")
    assert ".lse" in loop and ".panel_s" not in loop
    want = torch_grads(*arrays, causal=causal, scale=0.3, wrt=list(wrt))
    for name, g, w in zip(wrt, as_list(fn(*arrays)), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max(), err_msg=name)


@pytest.mark.parametrize("s", [496, 512, 40])
def test_the_transposed_queries_rows_are_an_odd_number_of_cache_lines(s):
    """Q^T's and dO^T's rows, as Kt's in the forward kernel (attention.odd_lines_row): 496 queries (31
    lines) once got a row of 32 lines, 2 KiB, whose columns fall into a few cache sets."""
    arrays = inputs(1, 1, s, 24, 16, 16, seed=s)
    fn = tilec.grad(attention_source(False, 0.25), wrt=["Q", "K", "V"])
    loop = fn.explain(dict(zip(fn.inputs, (a.shape for a in arrays))), stage="loop")
    for workspace in (".Qt: float32[", ".dOt: float32["):
        row = int(loop.split(workspace)[1].split("]")[0].split(", ")[-1])
        assert s <= row and (row * 4 // 64) % 2 == 1 and row * 4 % 64 == 0, (workspace, row)
    want = torch_grads(*arrays, causal=False, scale=0.25, wrt=["Q", "K", "V"])
    for name, g, w in zip("QKV", as_list(fn(*arrays)), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max(), err_msg=name)


@pytest.mark.parametrize("b, h, s, t, causal", [(1, 1, 70, 83, True), (1, 3, 41, 50, False)])
def test_fewer_heads_than_cores_split_the_keys(b, h, s, t, causal):
    """Fewer batch-and-heads than cores: pass 2 split over key blocks, dQ summed from parts."""
    arrays = inputs(b, h, s, t, 12, 10, seed=s + t)
    target = resolve_target("llvm").with_cores(4)
    fn = tilec.grad(attention_source(causal, 0.3), wrt=list(NAMES), target=target).with_schedule(SMALL)
    shapes = dict(zip(fn.inputs, (a.shape for a in arrays)))
    assert ".dqpart" in fn.explain(shapes, stage="loop")
    want = torch_grads(*arrays, causal=causal, scale=0.3, wrt=list(NAMES))
    for name, g, w in zip(NAMES, fn(*arrays), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5 * np.abs(w).max(), err_msg=name)


# ------------------------------------------------------------------ matching and fallback


def bound(source: str, wrt: list[str], dtype: str = "float32"):
    program = derive(parse(source, {}), wrt)
    shapes = {"Q": (1, 2, 5, 4), "K": (1, 2, 7, 4), "V": (1, 2, 7, 3), "DO": (1, 2, 5, 3), "DO2": (1, 2, 5, 7)}
    shapes = {p.name: shapes[p.name] for p in program.params}
    return bind(program, shapes, {n: dtype for n in shapes})


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("wrt", [["Q", "K", "V"], ["Q"], ["K"], ["V"], ["K", "V"], ["V", "Q"]])
def test_matcher_recognises_every_derived_gradient(causal, wrt):
    bp = bound(attention_source(causal, 0.5), wrt)
    plan = backward_pattern.match(0, bp, attention_backward.DTYPES)
    assert plan is not None and plan.consumed == len(bp.statements)
    written = {"Q": plan.dq, "K": plan.dk, "V": plan.dv}
    assert {n for n, out in written.items() if out is not None} == set(wrt)
    assert set(bp.program.outputs) == {out for out in written.values() if out is not None}
    assert plan.causal == causal and plan.scale == 0.5 and (plan.s, plan.t, plan.d, plan.e) == (5, 7, 4, 3)


def test_float64_is_fused_too():
    arrays = inputs(1, 2, 6, 9, 4, 3, seed=1, dtype=np.float64)
    fn = tilec.grad(attention_source(True, 0.5), wrt=list(NAMES))
    assert fused(fn, arrays)
    for g, w in zip(as_list(fn(*arrays)), torch_grads(*arrays, causal=True, scale=0.5, wrt=list(NAMES))):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_a_program_that_also_returns_the_probabilities_falls_back():
    """O2 = 2 P adds to P's gradient: not the attention gradient, lowered unfused, still right."""
    source = attention_source(False, 0.5).replace("P = E / R;", "P = E / R;\n    O2 = P * 2.0;")
    source = source.replace("-> (O)", "-> (O, O2)")
    fn = tilec.grad(source, wrt=list(NAMES))
    q, k, v, do = inputs(1, 2, 6, 9, 4, 3, seed=4)
    do2 = np.random.default_rng(5).standard_normal((1, 2, 6, 9)).astype(np.float32)
    shapes = dict(zip(fn.inputs, (a.shape for a in (q, k, v, do, do2))))
    assert ".Qt" not in fn.explain(shapes, stage="loop")
    xs = [torch.from_numpy(a.astype(np.float64)).requires_grad_() for a in (q, k, v)]
    p = torch.softmax(xs[0] @ xs[1].transpose(-1, -2) * 0.5, -1)
    loss = ((p @ xs[2]) * torch.from_numpy(do)).sum() + (2 * p * torch.from_numpy(do2)).sum()
    for g, w in zip(fn(q, k, v, do, do2), torch.autograd.grad(loss, xs)):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-5)


LOOKALIKES = [
    # the output gradient of a program that also returns the probabilities: P is not elided
    ("P = E / R;", "P = E / R;\n    O2 = P * 2.0;", ["Q"]),
    # a softmax over the wrong axis
    ("M[b, h, s, 0: B, H, S, 1] = >(Z[b, h, s, t]);", "M[b, h, 0, t: B, H, 1, T] = >(Z[b, h, s, t]);", ["Q", "K"]),
    # not exp
    ("E = exp(Z - M);", "E = tanh(Z - M);", ["Q", "K", "V"]),
]


@pytest.mark.parametrize("old, new, wrt", LOOKALIKES)
def test_programs_that_only_look_like_attention_are_not_fused(old, new, wrt):
    source = attention_source(False, 0.5)
    assert old in source
    edited = source.replace(old, new).replace("-> (O)", "-> (O, O2)" if "O2" in new else "-> (O)")
    bp = bound(edited, wrt)
    assert backward_pattern.match(0, bp, attention_backward.DTYPES) is None


# ------------------------------------------------------------------ knobs


def test_knobs_round_trip_and_are_checked():
    config = TemplateConfig(0, "attention_backward", (("bk", 32), ("bq", 48), ("mr", 6), ("panel", False)))
    schedule = TemplateSchedule.from_json(TemplateSchedule((config,)).to_json())
    assert schedule.configs[0].knob_record() == attention_backward.AttentionBackwardKnobs(48, 32, 6, False)
    arrays = inputs(1, 1, 5, 7, 4, 3, seed=2)
    fn = tilec.grad(attention_source(False, 0.5), wrt=list(NAMES))
    bad = TemplateSchedule((TemplateConfig(0, "attention_backward", (("bk", 24), ("bq", 10), ("mr", 4))),))
    with pytest.raises(ScheduleError, match="multiple"):
        fn.with_schedule(bad)(*arrays)
    forward = tilec.compile(attention_source(False, 0.5))
    with pytest.raises(ScheduleError, match="does not apply"):
        forward.with_schedule(TemplateSchedule((TemplateConfig(0, "attention_backward"),)))(*arrays[:3])


# ------------------------------------------------------------------ the torch op


@pytest.mark.parametrize("causal", [False, True])
def test_torch_attention_backward_uses_the_fused_kernel(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 21, 8, requires_grad=True) for _ in range(3))
    out = torch_ops.attention(q, k, v, causal)
    dy = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), dy)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    want = torch.autograd.grad(ref, (q, k, v), dy)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    source = attention_source(causal, 1 / np.sqrt(8))
    fn = kernels._BACKWARD[(source, NAMES, "llvm")]
    assert fused(fn, [t.detach().numpy() for t in (q, k, v, dy)])


@pytest.mark.parametrize("causal", [False, True])
def test_torch_attention_gradcheck_through_the_fused_kernel(causal):
    torch.manual_seed(1)
    q, k, v = (torch.randn(*shape, dtype=torch.float64, requires_grad=True)
               for shape in ((1, 2, 5, 3), (1, 2, 7, 3), (1, 2, 7, 2)))
    assert torch.autograd.gradcheck(lambda q, k, v: torch_ops.attention(q, k, v, causal, 0.7), (q, k, v),
                                    eps=1e-6, atol=1e-7, rtol=1e-5)
    fn = kernels._BACKWARD[(attention_source(causal, 0.7), NAMES, "llvm")]
    dy = np.zeros((1, 2, 5, 2))
    assert fused(fn, [t.detach().numpy() for t in (q, k, v)] + [dy])
