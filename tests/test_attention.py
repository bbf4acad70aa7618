"""The fused attention template (and the vector exp it relies on) against numpy."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tilec
from compiled import load_func
from tilec.autodiff import derive
from tilec.bench.ops import attention_source
from tilec.ir import loop as L
from tilec.ir.bounds import bind
from tilec.pipeline import resolve_target
from tilec.schedule.cpu import attention
from tilec.schedule.patterns import attention as attention_pattern


def reference(q, k, v, causal, scale):
    s = np.einsum("...sd,...td->...st", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        rows, cols = s.shape[-2:]
        s = np.where(np.arange(cols)[None, :] <= np.arange(rows)[:, None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v.astype(np.float64)


def shapes(b, h, s, t, d):
    return {"Q": (b, h, s, d), "K": (b, h, t, d), "V": (b, h, t, d)}


@pytest.mark.parametrize("b, h, s, t, d, causal", [
    (1, 2, 13, 70, 5, False), (2, 1, 40, 40, 16, True), (1, 1, 7, 130, 64, False),
    (2, 3, 65, 65, 64, True), (1, 2, 100, 100, 33, True), (1, 1, 1, 1, 1, False),
])
def test_fused_attention_matches_numpy(b, h, s, t, d, causal):
    rng = np.random.default_rng(s * 7 + t)
    q, k, v = (rng.standard_normal(x).astype(np.float32) for x in shapes(b, h, s, t, d).values())
    src = attention_source({"D": d}, causal)
    loop = tilec.explain(src, shapes(b, h, s, t, d), stage="loop")
    assert "O.Kt" in loop and "L[" not in loop.splitlines()[0]  # fused: the score matrix is never a buffer
    np.testing.assert_allclose(tilec.compile(src)(q, k, v), reference(q, k, v, causal, 1 / np.sqrt(d)),
                               rtol=1e-4, atol=1e-5)


def test_causal_attention_visits_only_blocks_up_to_the_diagonal():
    loop = tilec.explain(attention_source({"D": 16}, True), shapes(1, 1, 256, 256, 16), stage="loop")
    kb_loop = next(line for line in loop.splitlines() if "for O.kb" in line)
    assert "min(" in kb_loop  # the key-block loop ends at the diagonal


@pytest.mark.parametrize("edit", [
    lambda src: src.replace("E = exp(Z - M)", "E = exp(M - Z)"),  # not a softmax
    lambda src: src.replace("P = E / R", "P = E * R"),
    lambda src: src.replace("-> (O)", "-> (O, P)"),  # an intermediate is an output: cannot elide it
])
def test_programs_that_only_look_like_attention_are_not_fused(edit):
    src = edit(attention_source({"D": 8}, False))
    bp = bind(tilec.parse(src), shapes(1, 1, 8, 8, 8), {n: "float32" for n in "QKV"})
    assert attention_pattern.match(0, bp, attention.DTYPES) is None


@pytest.mark.parametrize("ceiling", [None, 0.0, 3.0, 100.0])
def test_vector_exp_is_accurate_and_handles_special_values(ceiling):
    """exp(x), and exp(min(x, c)) (the exponential clamps to its ceiling c itself: softmax's
    e^(s - max) with c = 0 builds 2^n as one factor), against numpy: within 5e-7 relative where
    the result is normal, 0 below FLT_MIN (never a subnormal), inf past FLT_MAX, NaN for NaN."""
    n = 64
    x: L.Expr = L.Load("A", (L.Var("r"), L.Var("i")), "float32")
    if ceiling is not None:
        x = L.Bin("min", x, L.Const(ceiling, "float32"))
    body = L.Store("O", (L.Var("r"), L.Var("i")), L.Call("exp", (x,), "float32"))
    func = L.PrimFunc("tilec_kernel", (L.Buffer("A", "float32", (200, n)), L.Buffer("O", "float32", (200, n))),
                      L.For("r", L.const(0), L.const(200), L.For("i", L.const(0), L.const(n), body, "vectorized")))
    kernel = load_func(func)
    values = np.concatenate([np.linspace(-90, 90, 12777), [np.inf, -np.inf, np.nan, 0.0, -0.0, 88.7, 88.72, 88.7229,
                                                           88.73, 89.5, 1e6, -87.3, -87.34, -103.0, -200.0, 1e-30]])
    a = np.resize(values, (200, n)).astype(np.float32)
    out = np.empty_like(a)
    kernel.function((ctypes.c_void_p * 2)(a.ctypes.data, out.ctypes.data))
    clamped = a if ceiling is None else np.minimum(a, np.float32(ceiling))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        ref = np.exp(clamped.astype(np.float64)).astype(np.float32)
    normal = np.isfinite(ref) & (ref >= np.finfo(np.float32).tiny)
    assert np.max(np.abs(out[normal] - ref[normal]) / ref[normal]) < 5e-7
    assert np.array_equal(np.isinf(out), np.isinf(ref)) and np.array_equal(np.isnan(out), np.isnan(ref))
    assert np.all(out[np.isfinite(ref) & ~normal] == 0.0)


@pytest.mark.parametrize("bq, bk", [(1, 16), (4, 32), (None, 128)])
def test_attention_knobs(bq, bk):
    """Small blocks, and the tallest 128-wide block the template accepts on the target (8 rows
    with AVX-512's 16 lanes and 32 registers, 2 with AVX2's 8 and 16)."""
    if bq is None:
        target = resolve_target("llvm")
        assert target.host is not None
        bq = 2 * target.host.vector_registers // (bk // target.lanes("float32"))
    rng = np.random.default_rng(bq * bk)
    src = attention_source({"D": 24}, True)
    q, k, v = (rng.standard_normal(x).astype(np.float32) for x in shapes(1, 2, 37, 37, 24).values())
    bp = bind(tilec.parse(src), {n: a.shape for n, a in zip("QKV", (q, k, v))}, {n: "float32" for n in "QKV"})
    assert attention_pattern.match(0, bp, attention.DTYPES) is not None
    schedule = tilec.TemplateSchedule((tilec.TemplateConfig(0, "attention", (("bk", bk), ("bq", bq))),))
    fn = tilec.compile(src).with_schedule(schedule)
    assert ".Kt" in fn.explain({n: a.shape for n, a in zip("QKV", (q, k, v))}, stage="loop")  # the fused kernel
    out = fn(q, k, v)
    np.testing.assert_allclose(out, reference(q, k, v, True, 1 / np.sqrt(24)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("b, h, s, t, causal, bq, bk, groups", [
    (1, 2, 37, 37, True, 6, 64, 2), (1, 1, 100, 100, True, 4, 32, 3), (2, 1, 50, 70, False, 2, 16, 4),
    (1, 3, 64, 64, True, 6, 32, 8), (1, 1, 29, 29, True, 3, 16, 5),
])
def test_query_blocks_that_share_each_key_block_match_numpy(b, h, s, t, causal, bq, bk, groups):
    """groups query blocks per work item, each with its own running max, sum and accumulator; in
    causal attention a query block skips the key blocks wholly right of it, and the item's last
    query blocks may lie past S (computed, never stored)."""
    rng = np.random.default_rng(s + groups)
    q, k, v = (rng.standard_normal(x).astype(np.float32) for x in shapes(b, h, s, t, 16).values())
    config = (("bk", bk), ("bq", bq), ("groups", groups))
    fn = tilec.compile(attention_source({"D": 16}, causal)).with_schedule(
        tilec.TemplateSchedule((tilec.TemplateConfig(0, "attention", config),)))
    np.testing.assert_allclose(fn(q, k, v), reference(q, k, v, causal, 0.25), rtol=1e-4, atol=1e-5)


def test_default_groups_keep_every_core_busy_and_fit_the_rows():
    def plan(batch: int, s: int):
        bp = bind(tilec.parse(attention_source({"D": 8}, False)), shapes(1, batch, s, s, 8), {n: "float32" for n in "QKV"})
        found = attention_pattern.match(0, bp, attention.DTYPES)
        assert found is not None
        return found
    assert attention.default_groups(plan(32, 512), 6, 2) == attention.GROUPS
    assert attention.default_groups(plan(1, 512), 6, 2) == attention.GROUPS  # 22 items of 24 rows
    assert attention.default_groups(plan(1, 40), 6, 2) == 1  # 2 items of 24 rows: fewer than 4 a core
    assert attention.default_groups(plan(2, 10), 6, 1) == 1  # no item of 2 blocks fits 10 rows
    for batch, s, cores in ((3, 100, 2), (1, 300, 16), (8, 7, 4)):
        groups = attention.default_groups(plan(batch, s), 6, cores)
        assert groups == 1 or (groups * 6 <= s and batch * -(-s // (groups * 6)) >= attention.ITEMS_PER_CORE * cores)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("causal", [False, True])
def test_16_bit_q_and_v_are_widened_once_and_match_numpy(dtype, causal):
    """16-bit Q and V get float32 copies per batch (as K^T does) instead of a conversion at every
    read in the micro-GEMMs; float32 inputs are read in place."""
    import ml_dtypes  # noqa: F401 - numpy's bfloat16

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(x).astype(dtype) for x in shapes(2, 1, 45, 45, 16).values())
    src = attention_source({"D": 16}, causal)
    given = {n: a.shape for n, a in zip("QKV", (q, k, v))}
    loop = tilec.explain(src, given, {n: dtype for n in "QKV"}, stage="loop")
    assert "O.Qf" in loop and "O.Vf" in loop
    assert "O.Qf" not in tilec.explain(src, given, stage="loop")
    want = reference(*(a.astype(np.float32) for a in (q, k, v)), causal, 0.25)
    np.testing.assert_allclose(tilec.compile(src)(q, k, v).astype(np.float32), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("keys, bk", [(512, 64), (512, 48), (100, 32), (1024, 128), (16, 16)])
def test_the_transposed_keys_rows_are_an_odd_number_of_cache_lines(keys, bk):
    # rows of 512 keys (2 KiB apart) put a key block's strip of Kt into a few cache sets: on Zen 5
    # the default 6 x 64 blocks ran 9.8 ms instead of 7.1 (B4 H8 S512 D64)
    q = np.random.default_rng(3).standard_normal((1, 2, 24, 16)).astype(np.float32)
    k = np.random.default_rng(4).standard_normal((1, 2, keys, 16)).astype(np.float32)
    fn = tilec.compile(attention_source({"D": 16})).with_schedule(tilec.TemplateSchedule((tilec.TemplateConfig(
        0, "attention", (("bk", bk), ("bq", 6))),)))
    loop = fn.explain({"Q": q.shape, "K": k.shape, "V": k.shape}, stage="loop")
    row = int(loop.split("O.Kt: float32[")[1].split("]")[0].split(", ")[-1])
    padded = -(-keys // bk) * bk
    assert padded <= row < padded + 2 * attention.LINE_FLOATS and (row // attention.LINE_FLOATS) % 2 == 1
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(16)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(fn(q, k, k), (p / p.sum(-1, keepdims=True)) @ k, rtol=1e-4, atol=1e-4)


def logsumexp_program(causal: bool, dtype: str) -> str:
    """Attention as the torch.compile backend writes a training forward (tilec.torch_backend.lowering.attention):
    its reductions name their own index variables, and the rows' logsumexp M + log(R) is an output
    too (converted to float32 for 16-bit inputs, as torch's is), which torch's backward reads."""
    mask = ["Neg = -1e+30;", "Zc[b0, b1, s, t: B, H, S, T] = >(Z[b0, b1, s, t]), s - t < S default Neg;"] if causal else []
    scores = "Zc" if causal else "Z"
    lse = ["L = M + log(R);", "LF = as_float(L, 32);"] if dtype != "float32" else ["LF = M + log(R);"]
    return "\n".join([
        "function (Q[B, H, S, D], K[B, H, T, D], V[B, H, T, E]) -> (O, LSE) {",
        "Raw[b0, b1, s, t: B, H, S, T] = +(Q[b0, b1, s, d] * K[b0, b1, t, d]);",
        "Z = Raw * 0.125;", *mask,
        f"M[i0, i1, i2, 0: B, H, S, 1] = >({scores}[i0, i1, i2, i3]);",
        f"X = exp({scores} - M);",
        "R[i0, i1, i2, 0: B, H, S, 1] = +(X[i0, i1, i2, i3]);",
        "P = X / R;",
        "O[b0, b1, s, e: B, H, S, E] = +(P[b0, b1, s, t] * V[b0, b1, t, e]);", *lse,
        "LSE[i0, i1, i2: B, H, S] = =(LF[i0, i1, i2, 0]);", "}"])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_chain_that_also_stores_its_logsumexp_is_fused(causal, dtype):
    """The template writes the logsumexp from its running max and sum: the backend's training forward
    had run as a chain of GEMMs and a materialised score matrix (the logsumexp read M and R, and the
    reductions' index variables had other names than the scores')."""
    b, h, s, t, d = 1, 2, 37, 70, 32  # (wider bfloat16 heads without a mask run as GEMMs of pairs: `profitable`)
    src = logsumexp_program(causal, dtype)
    sizes = {"Q": (b, h, s, d), "K": (b, h, t, d), "V": (b, h, t, d)}
    loop = tilec.explain(src, sizes, {n: dtype for n in "QKV"}, stage="loop")
    # fused: the scores are never a buffer (K transposed, or in pairs for AMX's tiles)
    assert ("O.Kt" in loop or "O.Kp" in loop) and "Raw[" not in loop.splitlines()[0]
    rng = np.random.default_rng(11)
    q, k, v = (rng.standard_normal(x).astype(np.dtype(dtype)) for x in sizes.values())
    out, lse = tilec.compile(src)(q, k, v)
    assert out.dtype == np.dtype(dtype) and lse.dtype == np.float32 and lse.shape == (b, h, s)
    scores = np.einsum("...sd,...td->...st", q.astype(np.float64), k.astype(np.float64)) * 0.125
    if causal:
        scores = np.where(np.arange(t)[None, :] <= np.arange(s)[:, None], scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    want_lse = (top + np.log(np.exp(scores - top).sum(-1, keepdims=True)))[..., 0]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)  # float32 inside the kernel either way
    np.testing.assert_allclose(out.astype(np.float64), reference(q, k, v, causal, 0.125), **tol)


@pytest.mark.parametrize("dtype, causal, d, fused_anyway", [
    ("bfloat16", False, 64, False), ("bfloat16", True, 64, True), ("bfloat16", False, 32, True),
    ("float16", False, 64, True), ("float32", False, 64, True)])
def test_wide_unmasked_bfloat16_heads_run_as_gemms_of_pairs(dtype, causal, d, fused_anyway, without_tiles):
    """Where the CPU has the pair dot product (and no AMX: test_amx_tiles has those), a bfloat16
    chain without a mask and with heads wider than two vectors of pairs runs as GEMMs (twice the
    float32 rate), forward and backward; the results are the same either way within bfloat16's
    rounding of the probabilities."""
    from tilec.schedule.cpu.implicit_gemm.packed import bf16_dot

    sizes = shapes(1, 2, 48, 48, d)
    src = attention_source({"D": d}, causal)
    templates = tilec.explain(src, sizes, {n: dtype for n in "QKV"}, stage="templates")
    fused = templates.splitlines()[0].startswith("0: attention")
    assert fused == (fused_anyway or not bf16_dot(resolve_target("llvm"))), templates
    gradient = str(derive(tilec.parse(src), ["Q", "K", "V"]))  # the backward template follows the same rule
    backward = tilec.explain(gradient, {**sizes, "DO": sizes["Q"]}, {n: dtype for n in ("Q", "K", "V", "DO")},
                             stage="templates")
    assert ("attention_backward" in backward) == fused, backward
    rng = np.random.default_rng(d)
    q, k, v = (rng.standard_normal(x).astype(np.dtype(dtype)) for x in sizes.values())
    got = tilec.compile(src)(q, k, v).astype(np.float64)
    np.testing.assert_allclose(got, reference(q, k, v, causal, 1 / np.sqrt(d)), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("bits, l1, causal, d, want", [
    (256, 32 << 10, False, 64, (6, 32)), (256, 32 << 10, True, 64, (4, 32)), (512, 48 << 10, False, 64, (6, 64)),
    (512, 48 << 10, True, 64, (6, 64)), (512, 32 << 10, False, 64, (6, 32)), (512, 48 << 10, False, 128, (6, 32)),
])
def test_default_blocks_come_from_the_l1_cache_and_the_register_file(bits, l1, causal, d, want):
    """64 keys where their K^T and V tiles fill at most two thirds of L1 (else 32); 4 query rows for
    causal attention on 16 vector registers (less of the diagonal block wasted), else 6."""
    from dataclasses import replace

    from tilec.target import Target

    host = resolve_target("llvm").host
    assert host is not None
    target = Target("llvm", replace(host, vector_bits=bits, l1d_bytes=l1))
    bp = bind(tilec.parse(attention_source({"D": d}, causal)), shapes(2, 4, 256, 256, d), {n: "float32" for n in "QKV"})
    plan = attention_pattern.match(0, bp, attention.DTYPES)
    assert plan is not None
    assert (attention.default_bq(plan, target), attention.default_bk(plan, target)) == want


@pytest.mark.parametrize("causal, s, t, groups", [(False, 256, 256, 4), (True, 256, 256, 4), (False, 64, 200, 1),
                                                   (True, 100, 100, 2), (True, 7, 300, 1)])
def test_blocks_inside_and_across_the_mask_both_match_numpy(causal, s, t, groups):
    """Key blocks inside the scores skip the mask (one arm of the block), blocks across the diagonal
    or past T take the masked arm: a work item meets both, in either order, with every block size."""
    rng = np.random.default_rng(s + t)
    q, k, v = (rng.standard_normal(x).astype(np.float32) for x in shapes(1, 2, s, t, 32).values())
    for bq, bk in ((4, 32), (6, 64), (3, 48)):
        knobs = (("bq", bq), ("bk", bk), ("groups", groups))
        f = tilec.compile(attention_source({"D": 32}, causal)).with_schedule(
            tilec.TemplateSchedule((tilec.TemplateConfig(0, "attention", knobs),)))
        np.testing.assert_allclose(f(q, k, v), reference(q, k, v, causal, 1 / np.sqrt(32)), rtol=1e-4, atol=1e-5)
