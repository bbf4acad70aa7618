"""CUDA C rendering of hand-built GPU PrimFuncs, checked as text and by compiling with nvcc.

No GPU is needed: tests/test_cuda_gpu.py launches the same kernels where one exists.
"""

from __future__ import annotations

import sys

import pytest

from tests.cuda_kernels import V, all_cases, tensorcore_cases, axpy4, block_sum, c, elementwise, half_ops, int_semantics, ld
from tilec.codegen.cuda.source import render_cuda, translation_unit
from tilec.codegen.cuda.nvcc import CudaCompileError, check_arch, compile_cubin
from tilec.errors import CodegenError, TilecError
from tilec.ir import loop as L


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_test_kernel_compiles_with_nvcc(arch: str) -> None:
    sources = [render_cuda(case.func) for case in all_cases() + tensorcore_cases()] + [render_cuda(f) for f in _extra_funcs()]
    cubin = compile_cubin(translation_unit(sources), arch)
    assert cubin[:4] == b"\x7fELF"  # a cubin is an ELF image
    for s in sources:
        for la in s.launches:
            assert la.kernel.encode() in cubin


def test_generated_cuda_compiles_without_warnings(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Unused prelude helpers and an unused `tilec_thread0` must not trip nvcc's #177 (or any warning)."""
    import subprocess

    source = translation_unit([render_cuda(block_sum().func), render_cuda(elementwise().func)])
    (tmp_path / "k.cu").write_text(source)
    proc = subprocess.run(["nvcc", "-cubin", "-arch=sm_80", "-std=c++17", "-o", str(tmp_path / "k.cubin"),
                           str(tmp_path / "k.cu")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "warning" not in proc.stderr + proc.stdout, proc.stderr


def _extra_funcs() -> list[L.PrimFunc]:
    """Kernels that only the render tests use, compiled with the others."""
    return [_wide_index_func(), _guarded_func(), _cast_func()]


def test_elementwise_kernel_signature_and_launch() -> None:
    src = render_cuda(elementwise(n=1000, threads=128).func)
    assert 'extern "C" __global__ void __launch_bounds__(128) ew_k0(const float* __restrict__ A, ' \
           "const float* __restrict__ B, float* __restrict__ C)" in src.text
    (la,) = src.launches
    assert (la.grid, la.block, la.shared_bytes, la.args, la.writes) == ((8, 1, 1), (128, 1, 1), 0, ("A", "B", "C"), ("C",))
    assert "const int bx = (int)blockIdx.x;" in src.text and "const int tx = (int)threadIdx.x;" in src.text
    assert "tilec_fmax(" in src.text and "expf(" in src.text
    assert src.params == elementwise().func.params


def test_reduction_uses_shared_memory_barriers_and_thread0() -> None:
    src = render_cuda(block_sum(rows=8, cols=1000, threads=128).func)
    (la,) = src.launches
    assert la.shared_bytes == 128 * 4
    assert "extern __shared__ __align__(128) unsigned char tilec_smem[];" in src.text
    assert "float* part = reinterpret_cast<float*>(tilec_smem + 0);" in src.text
    assert src.text.count("__syncthreads();") == 1 + 7  # after the partial sums and each tree step
    assert "float acc[1];" in src.text  # the per-thread accumulator
    assert "if (tilec_thread0) {\n" in src.text  # the final store runs once per block


def test_guard_where_a_thread_loop_is_shorter_than_the_block() -> None:
    text = render_cuda(_guarded_func()).text
    assert "if (tx < 100) {" in text
    assert render_cuda(_guarded_func()).launches[0].block == (128, 1, 1)


def _guarded_func() -> L.PrimFunc:
    a = L.Buffer("A", "float32", (128,))
    body = L.For("bx", c(0), c(1), L.seq(
        L.For("tx", c(0), c(128), L.Store("A", (V("tx"),), L.const(1.0, "float32")), "threadIdx.x"),
        L.Barrier(),
        L.For("tx", c(0), c(100), L.Store("A", (V("tx"),), L.add(ld("A", V("tx")), ld("A", L.add(V("tx"), c(28))))),
              "threadIdx.x")), "blockIdx.x")
    return L.PrimFunc("guarded", (a,), body)


def test_barrier_under_a_guard_is_refused() -> None:
    a = L.Buffer("A", "float32", (128,))
    body = L.For("bx", c(0), c(1), L.seq(
        L.For("tx", c(0), c(128), L.Store("A", (V("tx"),), L.const(1.0, "float32")), "threadIdx.x"),
        L.For("tx", c(0), c(64), L.seq(L.Barrier(), L.Store("A", (V("tx"),), L.const(2.0, "float32"))),
              "threadIdx.x")), "blockIdx.x")
    with pytest.raises(CodegenError, match="Barrier under a thread-dependent"):
        render_cuda(L.PrimFunc("bad_barrier", (a,), body))
    cond = L.For("tx", c(0), c(64), L.If(L.Cmp("lt", V("tx"), c(3)), L.Barrier()), "threadIdx.x")
    with pytest.raises(CodegenError, match="every thread of the block must reach it"):
        render_cuda(L.PrimFunc("bad_barrier2", (a,), cond))


def test_float4_when_aligned_scalar_otherwise() -> None:
    aligned = render_cuda(axpy4(misalign=0).func)
    assert "const float4 A_v4 = *reinterpret_cast<const float4*>(&A[" in aligned.text
    assert "*reinterpret_cast<float4*>(&C[" in aligned.text and "make_float4(" in aligned.text
    assert aligned.aligned_params == ("A", "B", "C")
    scalar = render_cuda(axpy4(misalign=1).func)
    assert "float4" not in scalar.text.split("tilec_fmod(double")[1]
    assert "#pragma unroll" in scalar.text and scalar.aligned_params == ()


def test_float16_is_computed_in_float_and_rounded_where_stored() -> None:
    text = render_cuda(half_ops().func).text
    assert "const __half* __restrict__ X" in text and "__half* __restrict__ H" in text
    store = next(line for line in text.splitlines() if line.strip().startswith("H["))
    assert store.count("__float2half_rn(") == 1, store  # one rounding, of the whole expression
    assert "tanhf(__half2float(X[" in store
    assert "((float)(__half2float(H[" in text


def test_integer_semantics_helpers() -> None:
    text = render_cuda(int_semantics().func).text
    assert "tilec_floordiv<int>(IA[tx], IB[tx])" in text and "tilec_floormod<int>(" in text
    assert "((int)((unsigned long long)(IA[tx]) * (unsigned long long)(1073741824)))" in text
    assert "tilec_fmod(FA[tx], FB[tx])" in text and "(FA[tx] != 0)" in text
    assert "(!(FA[tx] == FA[tx]))" in text and "tilec_iabs<int>(IB[tx])" in text


def test_index_width_32_bit_where_proven_64_bit_otherwise() -> None:
    assert "long long" not in render_cuda(elementwise().func).text.split("tilec_fmod(double")[1]
    text = render_cuda(_wide_index_func()).text
    assert "const long long bx = (long long)blockIdx.x;" in text
    assert "65536LL" in text  # strides and constants are 64-bit too
    # a division of a provably non-negative index by a positive constant stays a plain C division
    assert "tilec_floordiv" not in render_cuda(_cast_func()).text.split("tilec_fmod(double")[1]


def _wide_index_func() -> L.PrimFunc:
    n = 2**31 + 2**16  # more elements than an int can index
    a = L.Buffer("Big", "int8", (n // 65536, 65536))
    body = L.For("bx", c(0), c(n // 65536), L.For("tx", c(0), c(256), L.Store(
        "Big", (V("bx"), V("tx")), L.const(1, "int8")), "threadIdx.x"), "blockIdx.x")
    return L.PrimFunc("wide", (a,), body)


def _cast_func() -> L.PrimFunc:
    x = L.Buffer("X", "float64", (64,))
    y = L.Buffer("Y", "float16", (16,))
    i = V("tx")
    body = L.For("tx", c(0), c(64), L.seq(
        L.Store("X", (i,), L.Cast("float64", L.Cast("int64", ld("X", i, dtype="float64")))),
        L.If(L.Cmp("eq", L.Bin("mod", i, c(4)), c(0)), L.Store(
            "Y", (L.Bin("div", i, c(4)),), L.Cast("float16", L.Call("sigmoid", (ld("X", i, dtype="float64"),),
                                                                   "float64")))),
    ), "threadIdx.x")
    return L.PrimFunc("casts", (x, y), body)


@pytest.mark.parametrize("make, message", [
    (lambda: L.For("bx", c(0), V("n"), L.Seq(()), "blockIdx.x"), "must run over"),
    (lambda: L.For("tx", c(0), c(2048), L.Seq(()), "threadIdx.x"), "exceeds CUDA's limits"),
    (lambda: L.For("tx", c(0), c(4), L.For("bx", c(0), c(4), L.Seq(()), "blockIdx.x"), "threadIdx.x"),
     "nested inside a thread loop"),
    (lambda: L.For("tx", c(0), c(4), L.For("t2", c(0), c(4), L.Seq(()), "threadIdx.x"), "threadIdx.x"),
     "inside another threadIdx.x loop"),
    (lambda: L.Allocate(L.Buffer("t", "float32", (4,), "local"), L.For(
        "tx", c(0), c(4), L.Store("t", (V("tx"),), L.const(0.0, "float32")), "threadIdx.x")),
     "allocated outside the thread loops"),
    (lambda: L.For("tx", c(0), c(4), L.Allocate(L.Buffer("s", "float32", (4,), "shared"), L.Store(
        "s", (V("tx"),), L.const(0.0, "float32"))), "threadIdx.x"), "allocated inside a thread loop"),
])
def test_ill_formed_gpu_kernels_are_clear_codegen_errors(make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(CodegenError, match=message):
        render_cuda(L.PrimFunc("bad", (), make()))


def test_compile_errors_show_the_nvcc_message() -> None:
    with pytest.raises(CudaCompileError, match=r"(?s)nvcc failed for sm_80.*undefined.*reproduce with: nvcc"):
        compile_cubin('extern "C" __global__ void k() { undefined_thing(); }\n', "sm_80")
    with pytest.raises(TilecError, match="sm_NN"):
        check_arch("compute_80")


def test_compiled_cubins_are_cached_on_disk(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tilec.codegen.cuda import nvcc
    from tilec.config import options

    monkeypatch.setattr(options, "cache_dir", tmp_path)
    monkeypatch.setattr(options, "disk_cache", True)
    text = render_cuda(elementwise().func).text
    first = compile_cubin(text, "sm_80")
    monkeypatch.setattr(nvcc, "_nvcc", lambda source, arch: pytest.fail("recompiled a cached cubin"))
    assert compile_cubin(text, "sm_80") == first
    assert list((tmp_path / "kernels").rglob("*.o"))


def test_modules_import_without_cuda_bindings(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Without cuda-python and pycuda: imports work; device_arch and load_cuda raise a TilecError."""
    from tilec.codegen.cuda import loader as cuda_runtime

    for name in ("cuda", "cuda.bindings", "cuda.bindings.driver", "pycuda", "pycuda.driver"):
        monkeypatch.setitem(sys.modules, name, None)
    cuda_runtime.default_launcher.cache_clear()
    try:
        with pytest.raises(cuda_runtime.CudaUnavailable, match="cuda-python is not installed") as info:
            cuda_runtime.device_arch()
        assert isinstance(info.value, TilecError) and "cuda-sim" in str(info.value)
        with pytest.raises(TilecError, match="no GPU can run CUDA kernels"):
            cuda_runtime.load_cuda(render_cuda(elementwise().func), "sm_90")
        with pytest.raises(TilecError, match="unknown CUDA binding"):
            cuda_runtime.device_arch("opencl")
    finally:
        cuda_runtime.default_launcher.cache_clear()
