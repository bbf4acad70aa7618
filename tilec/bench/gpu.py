"""`tilec bench --target cuda`: tilec's GPU kernels against cuBLAS, cuDNN and SDPA (through torch).

The cases are issue 6's acceptance shapes: GEMM 4096^3 in float16 (tensor cores) and float32
(CUDA cores; torch's TF32 off so cuBLAS does true float32), conv2d 3x3 256->256 14x14 batch 32
(implicit GEMM, NHWC) and attention forward B=4 H=16 S=2048 D=64 in float16. Both sides run on torch CUDA
tensors on torch's current stream and are timed with CUDA events around `repeats` calls after
a warm-up; the ratio is baseline time / tilec time (> 1: tilec faster), as in the CPU bench.
Without a GPU, `require_gpu` raises NoGpu (the CLI exits 2 with its message).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tilec.errors import TilecError
from tilec.bench.ops import attention_source


class NoGpu(TilecError):
    """No CUDA GPU, driver, binding or CUDA-enabled torch: the GPU bench cannot run here."""


@dataclass(frozen=True)
class GpuCase:
    name: str
    shape: str
    dtype: str
    source: str
    make_inputs: Callable[[np.random.Generator], list[np.ndarray]]
    baseline: str
    baseline_fn: Callable[[Any, list[Any]], Callable[[], Any]]  # (torch, inputs on the GPU) -> a call
    flops: float


def _randn(r: np.random.Generator, dtype: str, *shape: int) -> np.ndarray:
    return r.standard_normal(shape).astype(dtype)


GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
CONV_NHWC = ("function (I[N, H, W, C], K[KH, KW, C, F]) -> (O) { O[n, x, y, f: N, H, W, F] = "
             "+(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, f]); }")


def cases(quick: bool = False) -> list[GpuCase]:
    """The acceptance cases (quick: small shapes of the same programs, for a smoke test)."""
    g = 256 if quick else 4096
    nb, hw, ch = (2, 6, 16) if quick else (32, 14, 256)
    b, h, s, d = (1, 2, 64, 16) if quick else (4, 16, 2048, 64)

    def gemm(dtype: str) -> GpuCase:
        return GpuCase("gemm", f"{g}x{g}x{g}", dtype, GEMM,
                       lambda r: [_randn(r, dtype, g, g), _randn(r, dtype, g, g)],
                       "torch.matmul (cuBLAS)", lambda torch, x: lambda: torch.matmul(x[0], x[1]), 2.0 * g ** 3)

    def conv_baseline(torch: Any, x: list[Any]) -> Callable[[], Any]:
        xi = x[0].permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)  # NHWC storage, as tilec's
        w = x[1].permute(3, 2, 0, 1).contiguous()
        return lambda: torch.nn.functional.conv2d(xi, w, padding=1)

    def attention_baseline(torch: Any, x: list[Any]) -> Callable[[], Any]:
        return lambda: torch.nn.functional.scaled_dot_product_attention(x[0], x[1], x[2])

    att_dtype = "float16"  # the acceptance case; float32 statistics and accumulation inside the template
    return [
        gemm("float16"),
        gemm("float32"),
        GpuCase("conv2d", f"N={nb} {hw}x{hw} {ch}->{ch} 3x3", "float32", CONV_NHWC,
                lambda r: [_randn(r, "float32", nb, hw, hw, ch), _randn(r, "float32", 3, 3, ch, ch)],
                "torch conv2d (cuDNN)", conv_baseline, 2.0 * nb * hw * hw * ch * ch * 9),
        GpuCase("attention", f"B={b} H={h} S={s} D={d}", att_dtype, attention_source({"D": d}),
                lambda r: [_randn(r, att_dtype, b, h, s, d) for _ in range(3)],
                "torch SDPA", attention_baseline, 4.0 * b * h * s * s * d),
    ]


def require_gpu() -> Any:
    """torch with a CUDA device and tilec's CUDA runtime, or NoGpu saying what is missing."""
    try:
        import torch
    except ImportError:
        raise NoGpu("the GPU bench needs PyTorch with CUDA for its baselines (cuBLAS, cuDNN, SDPA)") from None
    if not torch.cuda.is_available():
        raise NoGpu("no CUDA GPU is visible (torch.cuda.is_available() is False); `tilec bench --target cuda` "
                    "needs one. Use --target cuda-sim for a correctness smoke test of the GPU kernels on the CPU")
    from tilec.codegen.cuda.loader import device_arch

    try:
        device_arch()
    except TilecError as err:
        raise NoGpu(f"tilec's CUDA runtime cannot reach the GPU: {err}") from None
    return torch


def time_cuda(torch: Any, call: Callable[[], Any], warmup: int, repeats: int) -> float:
    """Milliseconds per call, by CUDA events on torch's current stream."""
    for _ in range(warmup):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        call()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / repeats


def run(quick: bool = False, warmup: int = 3, repeats: int = 10) -> list[dict[str, Any]]:
    """Every case: correctness against the baseline, then both timed; one dict per case."""
    from tilec.entry import compile_source

    torch = require_gpu()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for case in cases(quick):
        r = np.random.default_rng(0)
        inputs = [torch.from_numpy(a).cuda() for a in case.make_inputs(r)]
        fn = compile_source(case.source, "cuda")
        out = fn(*inputs)
        want = case.baseline_fn(torch, inputs)()
        if case.name == "conv2d":
            want = want.permute(0, 2, 3, 1)
        tol = 2e-2 if case.dtype == "float16" else 1e-2
        np.testing.assert_allclose(torch.as_tensor(out).float().cpu().numpy(), want.float().cpu().numpy(),
                                   rtol=tol, atol=tol)
        t_tilec = time_cuda(torch, functools.partial(fn, *inputs), warmup, repeats)
        t_base = time_cuda(torch, case.baseline_fn(torch, inputs), warmup, repeats)
        rows.append({"op": case.name, "shape": case.shape, "dtype": case.dtype, "target": "cuda",
                     "tilec_ms": t_tilec, "baseline_ms": t_base, "ratio": t_base / t_tilec,
                     "tflops": case.flops / t_tilec / 1e9, "baseline": case.baseline,
                     "device": torch.cuda.get_device_name()})
    return rows


def smoke_sim() -> list[dict[str, Any]]:
    """The quick shapes through the GPU emulator (target cuda-sim) against numpy: correctness only."""
    from tilec.entry import compile_source

    rows = []
    for case in cases(quick=True):
        if case.dtype == "float16" and case.name == "gemm":
            a, b = case.make_inputs(np.random.default_rng(0))
            want: np.ndarray = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
            got = compile_source(case.source, "cuda-sim")(a, b)
            ok = bool(np.allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2, atol=2e-2))
        else:
            arrays = case.make_inputs(np.random.default_rng(0))
            got = compile_source(case.source, "cuda-sim")(*arrays)
            want = compile_source(case.source, "llvm")(*arrays)  # the CPU backend as the reference
            tol = 2e-2 if case.dtype == "float16" else 1e-3
            ok = bool(np.allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol))
        rows.append({"op": case.name, "shape": case.shape, "dtype": case.dtype, "target": "cuda-sim", "ok": ok})
    return rows


__all__ = ["GpuCase", "NoGpu", "cases", "require_gpu", "run", "smoke_sim", "time_cuda"]
