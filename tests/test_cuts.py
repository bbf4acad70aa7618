"""Statements cut out of their programs (tilec.schedule.cuts): a cut computes what its statements
compute inside the program (differential, on the fuzzer's random programs, against the reference
interpreter), and a record tuned on a cut serves every program that holds the statement
(tilec.records.lookup), which is how `tilec tune model` tunes a fused kernel statement by statement."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from fuzz_programs import Case, cases
from hypothesis import HealthCheck, event, given, settings

import tilec
from tilec.errors import TilecError
from tilec.ir import tensor as T
from tilec.ir.bounds import bind
from tilec.schedule.cuts import cut


def _interp(source: str, arrays: list[np.ndarray], sizes: dict[str, int] | None = None) -> tuple | TilecError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = tilec.compile(source, target="interp", **(sizes or {}))(*arrays)
        except TilecError as err:
            return err
    return out if isinstance(out, tuple) else (out,)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_a_cut_computes_what_its_statement_computes_in_the_program(case: Case) -> None:
    program = tilec.parse(case.source)
    every = T.Program(program.params, tuple(st.output for st in program.statements), program.statements)
    whole = _interp(str(every), list(case.arrays))  # (the parser's temporaries are outputs too)
    if isinstance(whole, TilecError):
        event("refused")  # (the fuzzer's programs may be: tests/test_fuzz_differential.py judges those)
        return
    event("run")
    values = dict(zip(program.input_names, case.arrays)) | dict(zip(every.outputs, whole))
    bp = bind(program, {n: a.shape for n, a in zip(program.input_names, case.arrays)},
              {n: str(a.dtype) for n, a in zip(program.input_names, case.arrays)},
              {"K": int(values["K"])})  # (the scalar input the fuzzer reads as a size, as a call binds it)
    for index in range(len(bp.statements)):
        part = cut(bp, index, 1)
        assert tilec.parse(part.source, dict(part.sizes)).statements[part.first:] == program.statements[index:index + 1]
        got = _interp(part.source, [values[n] for n, _ in part.shapes], dict(part.sizes))
        assert not isinstance(got, TilecError), f"statement {index} alone: {got}\n{part.source}"
        for name, value in zip(part.program.outputs, got):
            np.testing.assert_array_equal(value, values[name], err_msg=f"{name}, statement {index} alone")


# A small MLP block as the backend fuses it: two matmuls (the second reads a transposed weight)
# with elementwise statements between them, and the same first matmul in a second program.
MLP = """function (X[M, K], W1[K, H], W2[N, H], B[N]) -> (Y) {
    U[m, h: M, H] = +(X[m, k] * W1[k, h]);
    G = tanh(U);
    V[m, n: M, N] = +(G[m, h] * W2[n, h]);
    Y = V + B;
}"""
OTHER = """function (P[R, C], Q[C, D]) -> (Z) {
    T[r, d: R, D] = +(P[r, c] * Q[c, d]);
    Z = T * T;
}"""
MLP_SHAPES = {"X": (48, 40), "W1": (40, 72), "W2": (24, 72), "B": (24,)}
OTHER_SHAPES = {"P": (48, 40), "Q": (40, 72)}
DISTINCT = {"mr": 4, "nr": 16, "mc": 8, "kc": 8}  # a register block no heuristic picks for these shapes


@pytest.fixture
def records(tmp_path, monkeypatch):
    from tilec.config import options
    from tilec.records import lookup

    monkeypatch.setattr(options, "records_path", tmp_path / "records.sqlite")
    monkeypatch.setattr(lookup, "_warned", set())
    return tmp_path / "records.sqlite"


def test_a_record_of_a_statement_alone_serves_every_program_that_holds_it(records) -> None:
    from tilec.autotune.task import tasks_for
    from tilec.records import RecordDB

    alone = tasks_for(MLP, MLP_SHAPES, alone=True)
    whole = tasks_for(MLP, MLP_SHAPES)
    assert [t.template for t in alone] == [t.template for t in whole] == ["implicit_gemm", "implicit_gemm"]
    assert all(len(t.program.statements) < len(tilec.parse(MLP).statements) for t in alone)
    assert len({t.key for t in alone} | {t.key for t in whole}) == 4  # a cut is a task of its own
    (other,) = tasks_for(OTHER, OTHER_SHAPES, alone=True)
    assert other.key == alone[0].key  # the same matmul at the same shapes, names aside
    with RecordDB(records) as db:
        db.add(alone[0].record(DISTINCT, 1e-4, trial=3))
    rng = np.random.default_rng(0)
    arrays = {n: rng.standard_normal(s).astype(np.float32) for n, s in {**MLP_SHAPES, **OTHER_SHAPES}.items()}
    mlp, second = tilec.compile(MLP), tilec.compile(OTHER)
    for fn, shapes in ((mlp, MLP_SHAPES), (second, OTHER_SHAPES)):
        templates = fn.explain(shapes, stage="templates")
        assert f"<- tuning record of the statement alone 1 of {records}" in templates, templates
        assert "acc: float32[4, 16]" in fn.explain(shapes, stage="loop")  # the record's register block
    x, w1, w2, b = (arrays[n] for n in MLP_SHAPES)
    np.testing.assert_allclose(mlp(x, w1, w2, b), np.tanh(x @ w1) @ w2.T + b, rtol=1e-4, atol=1e-4)
    p, q = arrays["P"], arrays["Q"]
    np.testing.assert_allclose(second(p, q), (p @ q) ** 2, rtol=1e-4, atol=1e-4)


def test_a_statement_alone_at_a_near_shape_serves_too(records) -> None:
    from tilec.autotune.task import tasks_for
    from tilec.records import RecordDB

    (tuned,) = tasks_for(OTHER, {"P": (64, 40), "Q": (40, 64)}, alone=True)
    with RecordDB(records) as db:
        db.add(tuned.record(DISTINCT, 1e-4, trial=1))
    templates = tilec.compile(MLP).explain(MLP_SHAPES, stage="templates")
    assert "<- nearest-shape reuse of tuning record of the statement alone 1 of" in templates, templates
    assert "tuned at v0=64x40 v1=40x64" in templates


@pytest.mark.parametrize("channels, tuned", [(64, ["implicit_gemm"]), (128, [])])
def test_a_convolution_that_untuned_calls_run_with_winograd_is_no_tuning_task(channels, tuned):
    # Winograd has no knobs: a record of implicit-GEMM knobs for its statement would replace the
    # faster algorithm (Zen 5, 256 -> 256 channels at 14x14: 2.9 ms untuned, 4.5 ms with such a record)
    from tilec.autotune.task import tasks_for
    from tilec.bench.ops.cases import select_cases

    case = select_cases("conv2d", [f"N=1,C={channels},H=8,W=8,CO={channels},KH=3,KW=3,stride=1,pad=1"])[0]
    shapes = {"X": (1, channels, 8, 8), "F": (channels, channels, 3, 3)}
    fn = tilec.compile(case.source())
    heuristic = fn.explain(shapes, stage="templates")
    assert ("winograd" in heuristic) == (channels >= 128)
    assert [t.template for t in tasks_for(case.source(), shapes)] == tuned
    assert [t.template for t in tasks_for(case.source(), shapes, alone=True)] == tuned


# A 1x1 convolution's gradients as tilec.torch_backend builds them: the weights and the output's gradient
# laid out anew (NCHW -> NHWC, [CO, C, KH, KW] -> [KH, KW, C, CO]) before the two products.
CONV_GRAD = """function (X[N, C, H, W], F[CO, C, KH, KW], DO[N, CO, DO_D2, DO_D3]) -> (DX, DF) {
    I[n, h, w, c: N, H, W, C] = =(X[n, c, h, w]);
    K[i, j, c, co: KH, KW, C, CO] = =(F[co, c, i, j]);
    DY[n, x, y, co: N, (H + 0 - KH) / 1 + 1, (W + 0 - KW) / 1 + 1, CO] = +(DO[n, co, x, y]);
    DI[n, x, y, c: N, H, W, C] = +(DY[n, x - i, y - j, co] * K[i, j, c, co]);
    DK[i, j, c, co: KH, KW, C, CO] = +(DY[n, x, y, co] * I[n, x + i, y + j, c]);
    DF[co, c, i, j: CO, C, KH, KW] = +(DK[i, j, c, co]);
    DX[n, c, h, w: N, C, H, W] = +(DI[n, h, w, c]);
}"""


def test_a_cut_reads_its_operands_through_the_layout_copies_that_feed_them():
    """A statement reads a copied operand as the program does: through the copy, which the heuristic
    may fold into its packing. Given K as an input instead, the cut of DI read its B transposed and
    ran 0.108 ms on Zen 5 where the whole program ran 0.062 (8 images of 512 channels at 1x1, 512
    filters), and `tilec tune model` reported gains on ResNet-18 that its step never saw."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((2, 24, 3, 3), (16, 24, 1, 1), (2, 16, 3, 3))]
    program = tilec.parse(CONV_GRAD)
    bp = bind(program, dict(zip(program.input_names, (a.shape for a in arrays))),
              {n: "float32" for n in program.input_names})
    every = T.Program(program.params, tuple(st.output for st in program.statements), program.statements)
    values = dict(zip(program.input_names, arrays)) | dict(zip(every.outputs, _interp(str(every), arrays)))
    for index, copies, inputs in ((3, ["K", "DY"], {"F", "DO"}), (4, ["I", "DY"], {"X", "DO"})):
        part = cut(bp, index, 1)
        statements = tilec.parse(part.source, dict(part.sizes)).statements
        assert [st.output for st in statements] == copies + [statements[-1].output] and part.first == 2
        assert {n for n, _ in part.shapes} == inputs
        got = _interp(part.source, [values[n] for n, _ in part.shapes], dict(part.sizes))
        np.testing.assert_allclose(got[0], values[statements[-1].output], rtol=1e-6, atol=1e-6)
