"""Tensor-core (WMMA) statements: rendering, CPU semantics (lower_wmma), the fp16 GEMM template."""

from __future__ import annotations

from compiled import load_func

import ctypes

import numpy as np
import pytest

from tests.cuda_kernels import single_warp_mma, tensorcore_gemm, wmma_gemm
from tilec.codegen.cuda.source import render_cuda
from tilec.passes.lower_wmma import lower_wmma
from tilec.errors import CodegenError, ScheduleError
from tilec.ir import loop as L
from tilec.ir.verify import verify
from tilec.ir.visitor import walk
from tilec.schedule.gpu.tensorcore_knobs import WmmaGemmConfig


def test_wmma_statements_render_as_nvcuda_wmma_calls() -> None:
    src = render_cuda(tensorcore_gemm().func)
    text = src.text
    assert "nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> acc[2][2];" in text
    assert "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> fa[2];" \
        in text
    assert "nvcuda::wmma::mma_sync(acc[fi][fj], fa[fi], fb[fj], acc[fi][fj]);" in text
    assert "nvcuda::wmma::load_matrix_sync(fa[fi], &sA[" in text and ", 32);" in text
    assert "nvcuda::wmma::store_matrix_sync(&C[" in text and "128, nvcuda::wmma::mem_row_major);" in text
    (la,) = src.launches
    assert (la.grid, la.block, la.shared_bytes) == ((2, 2, 1), (64, 2, 1), (64 * 32 + 32 * 64) * 2)
    assert src.wmma_params == ("C",)  # A and B reach the fragments through shared memory


def _run_on_cpu(func: L.PrimFunc, arrays: dict[str, np.ndarray]) -> None:
    """Run a PrimFunc whose thread loops need no barrier semantics on the LLVM CPU backend."""
    kernel = load_func(func, func.name)
    ptrs = [arrays[p.name].ctypes.data for p in func.params]
    kernel.function((ctypes.c_void_p * len(ptrs))(*ptrs))


def test_lower_wmma_gives_the_cpu_meaning() -> None:
    case = single_warp_mma(m=32, n=48, k=64)
    lowered = verify(lower_wmma(case.func))
    assert not any(isinstance(n, L.WMMA_STMTS) for n in walk(lowered.body))
    assert "if (((tx % 32) == 0))" not in str(lowered) and "% 32) == 0)" in str(lowered)
    inputs = case.make_inputs(np.random.default_rng(0))
    _run_on_cpu(lowered, inputs)
    np.testing.assert_allclose(inputs["C"], case.expected(inputs)["C"], rtol=1e-5, atol=1e-4)


def test_lower_wmma_leaves_other_functions_alone() -> None:
    from tests.cuda_kernels import elementwise

    func = elementwise().func
    assert lower_wmma(func) is func


def test_misaligned_windows_and_bad_fragments_are_codegen_errors() -> None:
    case = single_warp_mma()
    bad = _replace_origin(case.func, (L.const(0), L.const(1)))
    with pytest.raises(CodegenError, match="32-byte aligned"):
        render_cuda(bad)
    frag = L.Buffer("acc", "float16", (16, 16), "wmma.accumulator")
    body = L.For("tx", L.const(0), L.const(32), L.Allocate(frag, L.WmmaFill("acc", (), L.const(0.0, "float32"))),
                 "threadIdx.x")
    with pytest.raises(CodegenError, match=r"must be float32\[..., 16, 16\]"):
        render_cuda(L.PrimFunc("badfrag", (), body))
    outside = L.For("tx", L.const(0), L.const(16), L.Allocate(L.Buffer("acc", "float32", (16, 16), "wmma.accumulator"),
                    L.WmmaFill("acc", (), L.const(0.0, "float32"))), "threadIdx.x")
    with pytest.raises(CodegenError, match="blocks of whole warps"):
        render_cuda(L.PrimFunc("halfwarp", (), outside))


def _replace_origin(func: L.PrimFunc, origin: tuple[L.Expr, ...]) -> L.PrimFunc:
    def rewrite(s):  # type: ignore[no-untyped-def]
        if isinstance(s, L.WmmaLoad) and s.buffer == "A":
            return L.WmmaLoad(s.frag, s.index, s.buffer, origin)
        if isinstance(s, L.Seq):
            return L.Seq(tuple(rewrite(x) for x in s.stmts))
        if isinstance(s, L.For):
            return L.For(s.var, s.begin, s.end, rewrite(s.body), s.kind)
        if isinstance(s, L.Allocate):
            return L.Allocate(s.buffer, rewrite(s.body))
        return s

    return L.PrimFunc(func.name, func.params, rewrite(func.body))


def test_gemm_template_rejects_bad_shapes_and_knobs() -> None:
    with pytest.raises(ScheduleError, match="M = 100 is not a multiple"):
        wmma_gemm(100, 64, 64)
    with pytest.raises(ScheduleError, match="multiple of 16"):
        wmma_gemm(64, 64, 64, WmmaGemmConfig(block_k=24))
    with pytest.raises(ScheduleError, match="whole number of 16x16"):
        wmma_gemm(64, 64, 64, WmmaGemmConfig(block_m=32, warps_m=4))


@pytest.mark.parametrize("cfg", [WmmaGemmConfig(), WmmaGemmConfig(128, 64, 16, 4, 1), WmmaGemmConfig(32, 32, 64, 1, 1)])
def test_gemm_template_configs_render_and_verify(cfg: WmmaGemmConfig) -> None:
    func = wmma_gemm(128, 128, 128, cfg)
    src = render_cuda(func)
    assert src.launches[0].block == (32 * cfg.warps_n, cfg.warps_m, 1)
    assert src.launches[0].grid == (128 // cfg.block_n, 128 // cfg.block_m, 1)
    verify(lower_wmma(func))
