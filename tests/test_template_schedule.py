"""Template schedules: per-statement template and knobs, replayable, validated."""

from __future__ import annotations

import numpy as np
import pytest

import tilec
from tilec import TemplateConfig, TemplateSchedule
from tilec.bench.ops import attention_source
from tilec.pipeline import resolve_target

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
rng = np.random.default_rng(11)


def config(stmt: int, template: str, **knobs: object) -> TemplateConfig:
    return TemplateConfig(stmt, template, tuple(sorted(knobs.items())))


@pytest.mark.parametrize("knobs", [
    dict(mr=4, nr=2, kc=64, mc=40), dict(mr=1, nr=1, kc=7, mc=3, threads=1),
    dict(mr=6, nr=4, kc=128, mc=132, pack_a=False), dict(mr=12, nr=2, kc=256, mc=24, threads=2),
])
def test_gemm_knobs_compute_the_same_product(knobs):
    """`nr` in vectors here: 24 accumulators at most, within what 16 registers (AVX2) allow too."""
    knobs = dict(knobs, nr=knobs["nr"] * resolve_target("llvm").lanes("float32"))
    a, b = rng.standard_normal((77, 50)).astype(np.float32), rng.standard_normal((50, 90)).astype(np.float32)
    schedule = TemplateSchedule((config(0, "implicit_gemm", **knobs),))
    np.testing.assert_allclose(tilec.compile(GEMM).with_schedule(schedule)(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_default_template_forces_the_plain_loop_nest():
    a, b = rng.standard_normal((300, 300)).astype(np.float32), rng.standard_normal((300, 300)).astype(np.float32)
    fn = tilec.compile(GEMM).with_schedule(TemplateSchedule((config(0, "default"),)))
    assert "C.Bp" not in fn.explain({"A": a.shape, "B": b.shape}, stage="loop")
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-3)


def test_attention_knobs_through_a_template_schedule():
    q, k, v = (rng.standard_normal((1, 2, 30, 16)).astype(np.float32) for _ in range(3))
    schedule = TemplateSchedule((config(0, "attention", bq=3, bk=16),))
    out = tilec.compile(attention_source({"D": 16}, True)).with_schedule(schedule)(q, k, v)
    s = np.einsum("bhsd,bhtd->bhst", q, k) / 4.0
    s = np.where(np.tril(np.ones((30, 30), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(out, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)


def test_json_round_trip_and_keys():
    s = TemplateSchedule((config(0, "implicit_gemm", mr=4, nr=32), config(2, "default")))
    assert TemplateSchedule.from_json(s.to_json()) == s
    assert s.key().startswith("templates:") and TemplateSchedule().key() == "default"
    assert s.key() != TemplateSchedule((config(0, "implicit_gemm", mr=6, nr=32),)).key()


@pytest.mark.parametrize("make, match", [
    (lambda: config(0, "nope"), "unknown template"),
    (lambda: config(0, "implicit_gemm", zz=1), "no knob"),
    (lambda: TemplateSchedule((config(0, "default"), config(0, "default"))), "more than once"),
    (lambda: TemplateConfig.from_json({"template": "default"}), "not a template config"),
])
def test_malformed_configs_are_refused(make, match):
    with pytest.raises(tilec.ScheduleError, match=match):
        make()


@pytest.mark.parametrize("schedule, match", [
    (TemplateSchedule((config(0, "attention"),)), "does not apply"),
    (TemplateSchedule((config(0, "implicit_gemm", mr=4, mc=10),)), "multiple of mr"),
    (TemplateSchedule((config(5, "default"),)), "has 1 statement"),
])
def test_configs_that_do_not_fit_the_program_are_refused(schedule, match):
    a = np.ones((8, 8), np.float32)
    with pytest.raises(tilec.ScheduleError, match=match):
        tilec.compile(GEMM).with_schedule(schedule)(a, a)


def test_implicit_gemm_on_a_statement_that_is_not_a_gemm():
    src = "function (A[N, K]) -> (O) { O[i: N] = >(A[i, j]); }"
    with pytest.raises(tilec.ScheduleError, match="sum of products"):
        tilec.compile(src).with_schedule(TemplateSchedule((config(0, "implicit_gemm"),)))(np.ones((4, 4), np.float32))


@pytest.mark.parametrize("knobs", [dict(bq=6, bk=20), dict(bq=0, bk=64), dict(bk=8)])
def test_bad_attention_knobs_are_schedule_errors(knobs):
    """Out of the record's bounds: refused when the config is made; not a multiple of the lanes: when it
    is applied to the statement."""
    q = np.ones((1, 1, 8, 4), np.float32)
    with pytest.raises(tilec.ScheduleError, match="multiple of|out of range"):
        schedule = TemplateSchedule((config(0, "attention", **knobs),))
        tilec.compile(attention_source({"D": 4}, False)).with_schedule(schedule)(q, q, q)
