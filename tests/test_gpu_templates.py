"""The GPU templates (tilec.schedule.gpu.gemm, gpu_gemm_tc, gpu_attention) on the emulator
(target cuda-sim) against numpy, their knob records, and nvcc builds of every template's CUDA C.

Tests marked `gpu` run the same programs on a real GPU and skip cleanly without one.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec
from tilec.bench.ops import attention_source
from tilec.pipeline import Signature, lower_program
from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.pipeline import resolve_target
from tilec.schedule.gpu.gemm import GpuGemmKnobs
from tilec.ir.visitor import walk
from tilec.schedule.template_schedule import TemplateConfig, TemplateSchedule

from test_attention import reference as attention_reference
from reference import CONV_NHWC_SAME, MATMUL, assert_matches, conv2d_nhwc, randn, rng

SIM_GPU = resolve_target("cuda-sim").gpu

BATCHED = "C[b, i, j: B, M, N] = +(A[b, i, k] * W[b, k, j])"
TRANSPOSED = "C[i, j: M, N] = +(A[k, i] * B[j, k])"  # A^T B^T: neither operand contiguous in k for B
GEMM_BIAS_RELU = """
function (A[M, K], B[K, N], Bias[N]) -> (O) {
    C[i, j: M, N] = +(A[i, k] * B[k, j]);
    D = C + Bias;
    O = relu(D);
}
"""
CONV_STRIDE2 = ("function (I[N, H, W, C], K[KH, KW, C, F]) -> (O) { O[n, x, y, f: N, 4, 4, F] = "
                "+(I[n, 2 * x + i - 1, 2 * y + j - 1, c] * K[i, j, c, f]); }")


@dataclass(frozen=True)
class Case:
    """A Tile program on given input shapes, with an optional template schedule."""

    name: str
    source: str
    shapes: tuple[tuple[int, ...], ...]
    knobs: tuple[tuple[str, object], ...] | None = None  # gpu_gemm knobs for statement 0
    dtype: str = "float32"
    template: str = "gpu_gemm"

    def schedule(self) -> TemplateSchedule | None:
        if self.knobs is None:
            return None
        return TemplateSchedule((TemplateConfig(0, self.template, self.knobs),))

    def compile(self, target: str = "cuda-sim") -> tilec.Function:
        fn = tilec.compile(self.source, target=target)
        schedule = self.schedule()
        return fn if schedule is None else fn.with_schedule(schedule)

    def gpu_func(self, target: str = "cuda-sim") -> L.PrimFunc:
        fn = self.compile(target)
        sig = Signature(tuple(zip(fn.inputs, self.shapes)), tuple((n, self.dtype) for n in fn.inputs), ())
        func = lower_program(fn.program, sig, self.schedule(), fn.target)[1]
        return dataclasses.replace(func, name=self.name)


def knobs(bm: int, bn: int, bk: int, tm: int, tn: int, double_buffer: bool = True) -> tuple[tuple[str, object], ...]:
    return tuple(sorted(dataclasses.asdict(GpuGemmKnobs(bm, bn, bk, tm, tn, double_buffer)).items()))


def numpy_ref(case: Case, arrays: list[np.ndarray]) -> np.ndarray:
    if case.source == MATMUL:
        return arrays[0].astype(np.float32) @ arrays[1].astype(np.float32)
    if case.source == BATCHED:
        return arrays[0] @ arrays[1]
    if case.source == TRANSPOSED:
        return arrays[0].T @ arrays[1].T
    if case.source == GEMM_BIAS_RELU:
        return np.maximum(arrays[0] @ arrays[1] + arrays[2], 0)
    if case.source == CONV_NHWC_SAME:
        return conv2d_nhwc(arrays[0], arrays[1], pad=1)
    if case.source == CONV_STRIDE2:
        return conv2d_nhwc(arrays[0], arrays[1], stride=2, pad=1, out_hw=(4, 4))
    if case.source in ATTENTION_REFS:
        causal, scale = ATTENTION_REFS[case.source]
        return attention_reference(*arrays, causal, scale).astype(np.float32)
    raise AssertionError(case.source)


GEMM_CASES = [
    Case("gemm_default", MATMUL, ((64, 64), (64, 64))),
    Case("gemm_odd", MATMUL, ((33, 70), (70, 45)), knobs(32, 32, 16, 2, 2)),
    Case("gemm_odd_single_buffer", MATMUL, ((37, 19), (19, 53)), knobs(16, 32, 4, 2, 4, False)),
    Case("gemm_rect_thread_tile", MATMUL, ((48, 64), (64, 40)), knobs(16, 64, 8, 4, 1)),
    Case("gemm_batched", BATCHED, ((3, 20, 36), (3, 36, 28)), knobs(16, 16, 8, 2, 2)),
    Case("gemm_transposed", TRANSPOSED, ((40, 24), (28, 40)), knobs(16, 16, 8, 2, 2)),
    Case("gemm_bias_relu", GEMM_BIAS_RELU, ((40, 36), (36, 52), (52,)), knobs(32, 32, 8, 4, 2)),
    Case("conv_same", CONV_NHWC_SAME, ((2, 9, 7, 5), (3, 3, 5, 6)), knobs(32, 16, 8, 2, 2)),
    Case("conv_same_default", CONV_NHWC_SAME, ((2, 8, 8, 16), (3, 3, 16, 32))),
    Case("conv_stride2", CONV_STRIDE2, ((1, 8, 8, 4), (3, 3, 4, 8)), knobs(16, 8, 8, 2, 1, False)),
]


def attention(d: int, causal: bool) -> str:
    source = attention_source({"D": d}, causal)
    ATTENTION_REFS[source] = (causal, 1.0 / np.sqrt(d))
    return source


def att(bq: int, bk: int) -> tuple[tuple[str, object], ...]:
    return (("bk", bk), ("bq", bq))


def qkv(b: int, h: int, s: int, t: int, d: int) -> tuple[tuple[int, ...], ...]:
    return ((b, h, s, d), (b, h, t, d), (b, h, t, d))


ATTENTION_REFS: dict[str, tuple[bool, float]] = {}
ATTENTION_CASES = [
    Case("att_odd", attention(5, False), qkv(1, 2, 13, 70, 5), att(8, 16), template="gpu_attention"),
    Case("att_causal_batch", attention(16, True), qkv(2, 2, 40, 40, 16), att(16, 8), template="gpu_attention"),
    Case("att_causal_ragged", attention(8, True), qkv(1, 1, 37, 37, 8), att(8, 16), template="gpu_attention"),
    Case("att_default", attention(32, False), qkv(1, 1, 20, 24, 32)),
    Case("att_default_causal", attention(8, True), qkv(1, 3, 33, 33, 8)),
    # float16 Q/K/V/O: float32 statistics and accumulators, one rounding per output cell
    Case("att_fp16_odd", attention(5, False), qkv(1, 2, 13, 70, 5), att(8, 16), "float16", "gpu_attention"),
    Case("att_fp16_causal_ragged", attention(16, True), qkv(2, 1, 37, 37, 16), att(16, 8), "float16",
         "gpu_attention"),
    Case("att_fp16_default", attention(64, False), qkv(1, 2, 20, 33, 64), None, "float16"),
    Case("att_fp16_default_causal", attention(8, True), qkv(1, 3, 33, 33, 8), None, "float16"),
]


def tc(bm: int, bn: int, bk: int, wm: int, wn: int) -> tuple[tuple[str, object], ...]:
    return (("block_k", bk), ("block_m", bm), ("block_n", bn), ("warps_m", wm), ("warps_n", wn))


TC_CASES = [
    Case("tc_gemm_default", MATMUL, ((64, 48), (48, 64)), None, "float16"),
    Case("tc_gemm_odd", MATMUL, ((33, 40), (40, 45)), tc(32, 32, 16, 1, 1), "float16", "gpu_tensorcore"),
    Case("tc_gemm_warps", MATMUL, ((50, 20), (20, 70)), tc(32, 64, 16, 2, 1), "float16", "gpu_tensorcore"),
    Case("tc_gemm_batched", BATCHED, ((2, 17, 24), (2, 24, 30)), tc(16, 32, 16, 1, 2), "float16", "gpu_tensorcore"),
    Case("tc_conv_same", CONV_NHWC_SAME, ((1, 6, 5, 8), (3, 3, 8, 16)), tc(32, 16, 32, 1, 1), "float16",
         "gpu_tensorcore"),
]


def run_case(case: Case, seed: int = 0, target: str = "cuda-sim") -> None:
    r = rng(seed)
    arrays = [randn(r, *s, dtype=case.dtype) for s in case.shapes]
    out = case.compile(target)(*arrays)
    if case.dtype == "float16":  # float32 accumulation, one rounding per cell
        # a causal chain's mask constant (Neg = -1.0e30) is a literal: weak, it keeps the output float16
        out_dtype = np.float16
        want = numpy_ref(case, [a.astype(np.float32) for a in arrays]).astype(out_dtype)
        assert_matches(out, want, dtype=out_dtype, rtol=1e-2, atol=1e-2)
    else:
        assert_matches(out, numpy_ref(case, arrays), dtype=np.float32, rtol=1e-4, atol=1e-4)


def shared_buffers(func: L.PrimFunc) -> set[str]:
    return {n.buffer.name for n in walk(func.body) if isinstance(n, L.Allocate) and n.buffer.scope == "shared"}


@pytest.mark.parametrize("case", GEMM_CASES, ids=lambda c: c.name)
def test_gemm_template_matches_numpy_on_the_emulator(case: Case) -> None:
    func = case.gpu_func()
    assert any(name.endswith(".sA") for name in shared_buffers(func)), "the GEMM template was not used"
    run_case(case)


@pytest.mark.parametrize("case", TC_CASES, ids=lambda c: c.name)
def test_fp16_gemm_runs_on_tensor_cores_on_the_emulator(case: Case) -> None:
    func = case.gpu_func()
    assert any(isinstance(n, L.WmmaMma) for n in walk(func.body)), "the tensor-core template was not used"
    run_case(case)


def test_fp16_knob_errors_and_fp32_refused_on_tensor_cores() -> None:
    a16, a32 = randn(rng(0), 32, 32, dtype="float16"), randn(rng(0), 32, 32)
    big = TemplateSchedule((TemplateConfig(0, "gpu_tensorcore", tc(256, 256, 64, 4, 4)),))
    with pytest.raises(ScheduleError, match="shared memory"):
        tilec.compile(MATMUL, target="cuda-sim").with_schedule(big)(a16, a16)
    bad = TemplateSchedule((TemplateConfig(0, "gpu_tensorcore", tc(24, 32, 16, 1, 1)),))
    with pytest.raises(ScheduleError, match="multiple of 16"):
        tilec.compile(MATMUL, target="cuda-sim").with_schedule(bad)(a16, a16)
    ok = TemplateSchedule((TemplateConfig(0, "gpu_tensorcore", tc(32, 32, 16, 1, 1)),))
    with pytest.raises(ScheduleError, match="float32 stays on the CUDA cores"):
        tilec.compile(MATMUL, target="cuda-sim").with_schedule(ok)(a32, a32)


@pytest.mark.parametrize("case", ATTENTION_CASES, ids=lambda c: c.name)
def test_fused_attention_matches_numpy_on_the_emulator(case: Case) -> None:
    func = case.gpu_func()
    launches = func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)
    assert len(launches) == 1 and any(name.endswith(".sK") for name in shared_buffers(func)), "not fused"
    assert {p.name for p in func.params} == {"Q", "K", "V", "O"}  # no score matrix
    run_case(case)


def test_fp16_attention_keeps_float32_statistics_on_both_templates() -> None:
    from tilec.ir.bounds import bind
    from tilec.pipeline import resolve_target
    from tilec.schedule.cpu.attention import ATTENTION
    from tilec.schedule.gpu.attention import GPU_ATTENTION
    from tilec.schedule.params import LoweringParams
    from tilec.schedule.templates.base import Context

    case = next(c for c in ATTENTION_CASES if c.name == "att_fp16_default")
    func = case.gpu_func()
    allocs = {n.buffer.name: n.buffer.dtype for n in walk(func.body) if isinstance(n, L.Allocate)}
    assert allocs and set(allocs.values()) == {"float32"}, allocs
    stores = [n for n in walk(func.body) if isinstance(n, L.Store) and n.buffer == "O"]
    assert stores and all(isinstance(n.value, L.Cast) and n.value.dtype == "float16" for n in stores)
    fn = case.compile()
    bp = bind(fn.program, dict(zip(fn.inputs, case.shapes)), {n: "float16" for n in fn.inputs}, {})
    assert GPU_ATTENTION.match(0, Context(bp, resolve_target("cuda-sim"), LoweringParams())) is not None
    # the CPU template reads float16 into float32 too (tilec.schedule.cpu.attention), rounding the output once
    assert ATTENTION.match(0, Context(bp, resolve_target("llvm"), LoweringParams())) is not None
    inputs = [randn(rng(1), *s, dtype="float16") for s in case.shapes]
    out = tilec.compile(case.source)(*inputs)
    reference = tilec.compile(case.source, target="interp")(*inputs)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), reference.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_causal_attention_skips_the_blocks_right_of_the_diagonal() -> None:
    causal = ATTENTION_CASES[1].gpu_func()
    key_loops = [n for n in walk(causal.body) if isinstance(n, L.For) and n.var.endswith(".kb")]
    assert len(key_loops) == 1 and isinstance(key_loops[0].end, L.Bin) and key_loops[0].end.op == "min"


def test_attention_knob_errors_say_why() -> None:
    case = ATTENTION_CASES[0]
    arrays = [randn(rng(0), *s) for s in case.shapes]
    for knob, message in ((att(2048, 16), "threads per block"), (att(8, 256), "registers per thread"),
                          (att(0, 16), "out of range: it must be 1 to")):
        with pytest.raises(ScheduleError, match=message):  # out of the record's bounds: when the config is made
            fn = tilec.compile(case.source, target="cuda-sim").with_schedule(
                TemplateSchedule((TemplateConfig(0, "gpu_attention", knob),)))
            fn(*arrays)


def test_guards_only_where_the_shapes_do_not_divide() -> None:
    even = Case("even", MATMUL, ((64, 32), (32, 64)), knobs(32, 32, 16, 2, 2)).gpu_func()
    odd = Case("odd", MATMUL, ((33, 32), (32, 64)), knobs(32, 32, 16, 2, 2)).gpu_func()
    def zero_filled_loads(f: L.PrimFunc) -> int:
        return sum(isinstance(n, L.If) and n.orelse is not None for n in walk(f.body))

    def guarded_output_stores(f: L.PrimFunc) -> int:
        return sum(isinstance(n, L.If) and any(isinstance(x, L.Store) and x.buffer == "C" for x in walk(n.then))
                   for n in walk(f.body))

    assert zero_filled_loads(even) == 0 and guarded_output_stores(even) == 0
    assert zero_filled_loads(odd) > 0 and guarded_output_stores(odd) == 1
    assert sum(isinstance(n, L.Barrier) for n in walk(even.body)) == 2  # double buffered: prologue + one per step
    single = Case("single", MATMUL, ((64, 32), (32, 64)), knobs(32, 32, 16, 2, 2, False)).gpu_func()
    assert sum(isinstance(n, L.Barrier) for n in walk(single.body)) == 2  # before and after the multiply


def test_epilogue_is_fused_and_intermediates_elided() -> None:
    func = Case("bias", GEMM_BIAS_RELU, ((40, 36), (36, 52), (52,)), knobs(32, 32, 8, 4, 2)).gpu_func()
    launches = func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)
    assert len(launches) == 1
    assert {p.name for p in func.params} == {"A", "B", "Bias", "O"}


def test_small_products_and_non_gemms_keep_the_default_binding() -> None:
    func = Case("tiny", MATMUL, ((8, 8), (8, 8))).gpu_func()
    assert not shared_buffers(func)


@pytest.mark.parametrize("bad, message", [
    (GpuGemmKnobs(64, 64, 16, 3, 4), "must divide the block tile"),
    (GpuGemmKnobs(128, 128, 16, 2, 2), "threads per block"),
    (GpuGemmKnobs(128, 128, 8, 16, 16), "registers per thread"),
    (GpuGemmKnobs(256, 256, 32, 16, 8), "shared memory"),
    (GpuGemmKnobs(0, 64, 16, 4, 4), "out of range: it must be 1 to"),
])
def test_illegal_knobs_are_schedule_errors_with_the_reason(bad: GpuGemmKnobs, message: str) -> None:
    a = randn(rng(0), 64, 64)
    with pytest.raises(ScheduleError, match=message):  # the record's bounds are checked when the config is made
        schedule = TemplateSchedule((TemplateConfig(0, "gpu_gemm", tuple(dataclasses.asdict(bad).items())),))
        fn = tilec.compile(MATMUL, target="cuda-sim").with_schedule(schedule)
        fn(a, a)


def test_template_misuse_is_a_clear_schedule_error() -> None:
    a = randn(rng(0), 32, 32)
    gpu = TemplateSchedule((TemplateConfig(0, "gpu_gemm", knobs(16, 16, 8, 2, 2)),))
    with pytest.raises(ScheduleError, match="is a GPU template"):
        tilec.compile(MATMUL).with_schedule(gpu)(a, a)
    cpu = TemplateSchedule((TemplateConfig(0, "implicit_gemm"),))
    with pytest.raises(ScheduleError, match="is a CPU template"):
        tilec.compile(MATMUL, target="cuda-sim").with_schedule(cpu)(a, a)
    softmax = "function (X[N, C]) -> (O) { M[i, 0: N, 1] = >(X[i, j]); O = X - M; }"
    with pytest.raises(ScheduleError, match="does not apply"):
        tilec.compile(softmax, target="cuda-sim").with_schedule(gpu)(a)


def _legal_knobs() -> st.SearchStrategy[GpuGemmKnobs]:
    sizes = st.sampled_from([4, 8, 16, 32, 64])
    return st.builds(GpuGemmKnobs, sizes, sizes, st.sampled_from([1, 2, 3, 4, 8, 16]), st.sampled_from([1, 2, 4]),
                     st.sampled_from([1, 2, 4]), st.booleans()).filter(lambda k: not k.problems(SIM_GPU))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=_legal_knobs(), m=st.integers(1, 40), n=st.integers(1, 40), kk=st.integers(1, 24))
def test_random_legal_gemm_knobs_match_numpy(k: GpuGemmKnobs, m: int, n: int, kk: int) -> None:
    case = Case("random", MATMUL, ((m, kk), (kk, n)), tuple(dataclasses.asdict(k).items()))
    run_case(case, seed=m * n + kk)


def test_knob_records_round_trip_through_json() -> None:
    config = TemplateConfig(0, "gpu_gemm", knobs(32, 64, 8, 2, 4, False))
    assert TemplateConfig.from_json(config.to_json()) == config
    assert config.knob_record() == GpuGemmKnobs(32, 64, 8, 2, 4, False)


# ------------------------------------------------------------------ nvcc and real GPUs

RANDOM_KNOBS = [GpuGemmKnobs(8, 16, 3, 2, 4, False), GpuGemmKnobs(64, 32, 16, 4, 4), GpuGemmKnobs(4, 64, 1, 1, 2)]


def all_cases() -> list[Case]:
    """Every case the emulator tests run (and a sample of legal random knob records)."""
    extra = [Case(f"random_{i}", MATMUL, ((29, 23), (23, 31)), tuple(dataclasses.asdict(k).items()))
             for i, k in enumerate(RANDOM_KNOBS)]
    return GEMM_CASES + TC_CASES + ATTENTION_CASES + extra


@functools.cache
def _sources() -> list:
    from tilec.codegen.cuda.source import render_cuda

    return [render_cuda(case.gpu_func("cuda")) for case in all_cases()]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_template_kernel_compiles_with_nvcc(arch: str) -> None:
    from tilec.codegen.cuda.source import translation_unit
    from tilec.codegen.cuda.nvcc import compile_cubin

    sources = _sources()
    assert any("float4" in s.text for s in sources), "no 128-bit loads in the aligned GEMM cases"
    assert compile_cubin(translation_unit(sources), arch)


@pytest.mark.gpu
@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.name)
def test_templates_on_a_real_gpu_match_numpy(case: Case) -> None:
    from tilec.codegen.cuda.loader import CudaUnavailable, device_arch

    try:
        device_arch()
    except CudaUnavailable as e:
        pytest.skip(f"no GPU: {e}")
    run_case(case, seed=3, target="cuda")


# ------------------------------------------------------------------ tilec bench --target cuda


def test_bench_cuda_without_a_gpu_exits_2_with_a_message(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from tilec import cli
    from tilec.bench import gpu

    def no_gpu() -> None:
        raise gpu.NoGpu("no CUDA GPU is visible")

    monkeypatch.setattr(gpu, "require_gpu", no_gpu)
    assert cli.main(["bench", "--target", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "Traceback" not in err


def test_bench_gpu_cases_are_the_acceptance_shapes() -> None:
    from tilec.bench import gpu

    names = [(c.name, c.dtype, c.shape) for c in gpu.cases()]
    assert names == [("gemm", "float16", "4096x4096x4096"), ("gemm", "float32", "4096x4096x4096"),
                     ("conv2d", "float32", "N=32 14x14 256->256 3x3"), ("attention", "float16", "B=4 H=16 S=2048 D=64")]
