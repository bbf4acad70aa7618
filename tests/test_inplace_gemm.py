"""The in-place GEMM template (tilec/schedule/cpu/implicit_gemm/inplace.py): both operands read in place, the
column where one operand is contiguous, tiles stored through the layout copy that reads them."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

import tilec
from reference import conv2d_grad_shapes, torch_conv2d_grads
from tilec.autotune.space import space_for
from tilec.autotune.task import backward_tasks
from tilec.bench.ops import conv2d_source
from tilec.errors import ScheduleError
from tilec.pipeline import resolve_target
from tilec.ir.bounds import bind
from tilec.schedule.patterns.layout_copy import output_copy
from tilec.schedule.cpu.implicit_gemm import IMPLICIT_GEMM
from tilec.schedule.params import LoweringParams
from tilec.schedule.templates.base import Choice, Context
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule
from tilec.target import Target

rng = np.random.default_rng(23)
TARGET = resolve_target("llvm")


def gemm_choice(bp, index: int) -> Choice | None:
    """The heuristic's implicit-GEMM choice for a statement (its variant plan and knobs)."""
    return IMPLICIT_GEMM.heuristic(index, Context(bp, TARGET, LoweringParams()))


def params(src: str, shapes: dict[str, tuple[int, ...]], schedule: TemplateSchedule | None = None,
           target: Target = TARGET) -> str:
    """The loop IR's parameter line: which tensors and workspaces the kernel has."""
    f = tilec.compile(src, target) if schedule is None else tilec.compile(src, target).with_schedule(schedule)
    return f.explain(shapes, stage="loop").splitlines()[0]


def override(stmt: int, **knobs: object) -> TemplateSchedule:
    base = dict(mr=6, nr=16, kc=256, mc=6, threads=0, pack_a=False, pack_b=False)
    base.update(knobs)
    return TemplateSchedule((TemplateConfig(stmt, "implicit_gemm", tuple(sorted(base.items()))),))


def assert_gradients_match_torch(grad: tilec.Function, shapes: dict[str, tuple[int, ...]], shape: dict[str, int]) -> None:
    x, f, dy = (rng.standard_normal(shapes[k]).astype(np.float32) for k in ("X", "F", "DO"))
    _, dx_ref, df_ref = torch_conv2d_grads(x, f, dy, shape["stride"], shape["pad"])
    dx, df = grad(x, f, dy)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(df, df_ref, rtol=1e-4, atol=1e-3)


# Channels a multiple of the vector width (the in-place column); output channels ragged against
# the 6-row register tile; strides, asymmetric kernels and padding.
CASES = [dict(N=2, C=16, H=9, W=7, CO=20, KH=3, KW=3, stride=1, pad=1),
         dict(N=1, C=32, H=10, W=10, CO=13, KH=3, KW=2, stride=2, pad=1),
         dict(N=3, C=64, H=6, W=5, CO=70, KH=5, KW=3, stride=1, pad=2),
         dict(N=2, C=48, H=7, W=8, CO=24, KH=2, KW=2, stride=1, pad=0)]


@pytest.mark.parametrize("shape", CASES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_weight_gradient_is_stored_straight_into_the_weights_layout(shape):
    grad = tilec.grad(conv2d_source(shape), wrt=["X", "F"])
    shapes = conv2d_grad_shapes(shape)
    line = params(grad.source, shapes)
    assert re.search(r" DK_\d+\.Bpan: ", line)  # the weight gradient's product reads the input in panels ...
    assert not re.search(r" DK_\d+: ", line)  # ... and stores straight into DF: the product is never materialised
    if shape["stride"] == 1:
        assert not re.search(r" (I|DY_0): ", line)  # both operands' layout copies read through
    assert_gradients_match_torch(grad, shapes, shape)


def test_heuristic_keeps_the_usual_column_when_it_is_as_contiguous():
    """The forward conv's output copy reads the product's column (co) at the same stride either way:
    the packed templates keep it (and the copy)."""
    shape = CASES[0]
    bp = bind(tilec.parse(conv2d_source(shape)), {"X": (2, 16, 9, 7), "F": (20, 16, 3, 3)},
              {"X": "float32", "F": "float32"})
    product = next(k for k, s in enumerate(bp.statements) if s.output == "Y")
    assert output_copy(product, bp) is not None
    choice = gemm_choice(bp, product)
    assert choice is not None and choice.plan.variant != "inplace" and choice.knobs.pack_b


GEMM = "function (A[M, K], B[K, N]) -> (C) { C[i, j: M, N] = +(A[i, k] * B[k, j]); }"


@pytest.mark.parametrize("m,n,k,nr", [(50, 64, 40, 16), (7, 32, 300, 32), (13, 3, 5, 3)])
def test_a_plain_matmul_in_place_when_asked(m, n, k, nr):
    if nr == 3:  # three vectors wide: 48 columns with AVX-512, 24 with AVX2
        n = nr = 3 * resolve_target("llvm").lanes("float32")
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    schedule = override(0, nr=nr)
    assert "C.Bpan: " in params(GEMM, {"A": a.shape, "B": b.shape}, schedule)
    got = tilec.compile(GEMM).with_schedule(schedule)(a, b)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_in_place_needs_whole_vectors_of_columns():
    a = rng.standard_normal((8, 8)).astype(np.float32)
    b = rng.standard_normal((8, 40)).astype(np.float32)  # 40 columns: no nr of whole vectors divides it
    with pytest.raises(ScheduleError, match="pack_b=False does not apply"):
        tilec.compile(GEMM).with_schedule(override(0, nr=32))(a, b)


def test_in_place_without_a_layout_copy_stores_at_the_outputs_stride():
    """No copy to store through: the tiles go to the output itself, the column (c) 9 elements
    apart; B (I) needs zero borders and is no copy, so its panels are filled from it directly."""
    src = """function (DO[N, CO, H, W], I[N, H, W, C]) -> (DF) {
        DF[co, c, i, j: CO, C, 3, 3] = +(DO[n, co, x, y] * I[n, x + i - 1, y + j - 1, c]);
    }"""
    do = rng.standard_normal((2, 10, 6, 5)).astype(np.float32)
    i_ = rng.standard_normal((2, 6, 5, 32)).astype(np.float32)
    schedule = override(0, nr=32)
    assert "DF.Bpan: " in params(src, {"DO": do.shape, "I": i_.shape}, schedule)
    got = tilec.compile(src).with_schedule(schedule)(do, i_)
    padded = np.pad(i_.astype(np.float64), ((0, 0), (1, 1), (1, 1), (0, 0)))
    ref = np.stack([np.stack([np.einsum("noxy,nxyc->oc", do, padded[:, a:a + 6, b:b + 5, :]) for b in range(3)], -1)
                    for a in range(3)], -2)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_tuner_space_offers_the_in_place_template_and_its_points_compute_right():
    shape = CASES[0]
    shapes = {"X": (2, 16, 9, 7), "F": (20, 16, 3, 3)}
    tasks = backward_tasks(conv2d_source(shape), shapes, ["X", "F"], label="conv backward")
    dw = next(t for t in tasks if t.default_config()["pack_b"] is False)
    space = space_for(dw)
    inplace = [c for c in (space.config(i) for i in range(len(space))) if c["pack_b"] is False]
    assert inplace and all(c["pack_a"] is False for c in inplace)
    grad = tilec.grad(conv2d_source(shape), wrt=["X", "F"])
    x = rng.standard_normal(shapes["X"]).astype(np.float32)
    f = rng.standard_normal(shapes["F"]).astype(np.float32)
    dy = rng.standard_normal((2, 20, 9, 7)).astype(np.float32)
    _, dx_ref, df_ref = torch_conv2d_grads(x, f, dy, 1, 1)
    for config in [inplace[k] for k in rng.choice(len(inplace), size=min(4, len(inplace)), replace=False)]:
        dx, df = grad.with_schedule(dw.schedule(config))(x, f, dy)
        np.testing.assert_allclose(dx, dx_ref, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(df, df_ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("share", [1.2, 4, 30])  # L2 budget = panel bytes / share: every level of the reduction split
@pytest.mark.parametrize("shape", CASES[:3], ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_reduction_blocks_give_the_same_weight_gradient(shape, share, monkeypatch):
    """With a small L2 budget the weight gradient's reduction runs in blocks (split at each level
    of the reduction loops, ragged last chunks), its partial sums saved between them."""
    grad = tilec.grad(conv2d_source(shape), wrt=["X", "F"])
    shapes = conv2d_grad_shapes(shape)
    panels = re.search(r" DK_\d+\.Bpan: float32\[([\d, ]+)\]", params(grad.source, shapes))
    assert panels
    panel_bytes = 4 * int(np.prod([int(d) for d in panels.group(1).split(",")][1:]))
    small_l2 = replace(TARGET, host=replace(TARGET.host, l2_bytes=2 * int(panel_bytes / share)))  # budget: half of L2
    grad = tilec.grad(conv2d_source(shape), wrt=["X", "F"], target=small_l2)
    assert re.search(r" DK_\d+\.partial: ", params(grad.source, shapes, target=small_l2))
    assert_gradients_match_torch(grad, shapes, shape)


def test_reduction_blocks_split_the_loop_whose_inner_loops_fit():
    from tilec.ir import loop as L
    from tilec.schedule.cpu.implicit_gemm import inplace as inplace_gemm

    shape = dict(N=8, C=64, H=56, W=56, CO=64, KH=3, KW=3, stride=1, pad=1)
    bp = bind(tilec.parse(tilec.grad(conv2d_source(shape), wrt=["F"]).source),
              {"X": (8, 64, 56, 56), "F": (64, 64, 3, 3), "DO": (8, 64, 56, 56)},
              {"X": "float32", "F": "float32", "DO": "float32"})
    index = next(k for k, b in enumerate(bp.statements) if b.output.startswith("DK"))
    choice = gemm_choice(bp, index)
    assert choice is not None and choice.plan.variant == "inplace"
    plan = choice.plan.gemm
    panels = L.Buffer("P", "float32", (1, 8, 58, 58, 64))  # a 6.9 MB column panel: overflows L2
    budget, sums = 512 * 1024, LoweringParams().inplace_sums_bytes  # half of a 1 MiB L2
    blocking = inplace_gemm.reduction_blocks(plan, panels, "float32", 2, budget, sums)
    assert blocking is not None
    level, chunk = blocking
    assert [v for v, _, _ in plan.red][level] == "x" and chunk == 14  # (n, 14 rows of x): a quarter MiB of panel
    small = L.Buffer("P", "float32", (1, 8, 8, 8, 64))
    assert inplace_gemm.reduction_blocks(plan, small, "float32", 2, budget, sums) is None  # fits: one block


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_take_the_weight_gradient_by_output_channels(threads):
    """Stored through the copy onto F[co, c, i, j], the units nest row tiles (co) outermost and the
    taps (i, j) innermost, so that each thread writes its own run of F's rows rather than every thread
    a tap of every cache line; the gradient is the same with any number of threads."""
    from tilec.schedule.cpu.implicit_gemm import inplace as inplace_gemm

    shape = dict(N=2, C=32, H=2, W=2, CO=24, KH=3, KW=3, stride=1, pad=1)
    shapes = conv2d_grad_shapes(shape)
    src = tilec.grad(conv2d_source(shape), wrt=["X", "F"]).source
    bp = bind(tilec.parse(src), shapes, {k: "float32" for k in shapes})
    index = next(k for k, b in enumerate(bp.statements) if b.output.startswith("DK"))
    choice = gemm_choice(bp, index)
    assert choice is not None and choice.plan.variant == "inplace" and choice.plan.out_copy is not None
    plan, knobs = choice.plan.gemm, choice.knobs
    assert inplace_gemm.unit_order(bp.statements[index], plan, knobs.mr, knobs.nr, bp, choice.plan.out_copy) == \
        ("tile", "panel", "outer")
    # onto its own layout DK[i, j, c, co] the taps are outermost: the order that shares B's panel
    assert inplace_gemm.unit_order(bp.statements[index], plan, knobs.mr, knobs.nr, bp, None) == \
        ("outer", "panel", "tile")
    schedule = override(index, mr=knobs.mr, nr=knobs.nr, mc=knobs.mr, threads=threads)
    assert_gradients_match_torch(tilec.compile(src).with_schedule(schedule), shapes, shape)
