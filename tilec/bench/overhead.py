"""Compile time and call overhead of the front half of tilec (figures for BENCHMARKS.md).

- compile time: source text -> callable kernel for a 512x512x512 GEMM, with the disk
  cache off, in this process (the first compile also builds the parser);
- call overhead: calling a cached kernel on tiny arrays, minus the time of the raw
  ctypes call into the same machine code (i.e. what tilec's Python layer adds);
- eager call of tilec.nn.functional on a small torch tensor (relu on 64 elements, linear 4x8 by
  8x8), without and with autograd recording, beside torch's own call (`functional`; needs torch).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"


@dataclass(frozen=True)
class Overhead:
    first_compile_s: float  # includes building the parser
    compile_s: float  # median of fresh compiles of distinct programs
    call_us: float  # median tilec call on 4x4 arrays
    raw_call_us: float  # median raw ctypes call of the same kernel
    overhead_us: float


def _median(xs: list[float]) -> float:
    return float(np.median(xs))


def measure(repeats: int = 5) -> Overhead:
    from tilec.entry import compile_source
    from tilec.config import options

    saved = options.disk_cache
    options.disk_cache = False
    try:
        a = np.ones((512, 512), np.float32)
        start = time.perf_counter()
        compile_source(GEMM)(a, a)
        first = time.perf_counter() - start
        times = []
        for k in range(repeats):  # a distinct program each time defeats the in-memory cache
            src = f"function (A[M, L], B[L, N]) -> (C{k}) {{ C{k}[i, j: M, N] = +(A[i, k] * B[k, j]); }}"
            start = time.perf_counter()
            compile_source(src)(a, a)
            times.append(time.perf_counter() - start)
    finally:
        options.disk_cache = saved

    fn = compile_source(GEMM)
    x = np.ones((4, 4), np.float32)
    fn(x, x)
    calls = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(1000):
            fn(x, x)
        calls.append((time.perf_counter() - start) * 1e3)  # µs per call
    kernel = next(iter(fn._by_signature.values()))
    out = np.empty((4, 4), np.float32)
    ptrs = (ctypes.c_void_p * 3)(x.ctypes.data, x.ctypes.data, out.ctypes.data)
    raws = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(1000):
            kernel.loaded.function(ptrs)
        raws.append((time.perf_counter() - start) * 1e3)
    call, raw = _median(calls), _median(raws)
    return Overhead(first, _median(times), call, raw, call - raw)


@dataclass(frozen=True)
class FunctionalCall:
    name: str
    tilec_us: float  # best of 7 medians-of-1000 calls
    torch_us: float
    requires_grad: bool


def _per_call_us(fn: Callable[[], object], calls: int = 1000) -> float:
    for _ in range(100):
        fn()
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def functional() -> list[FunctionalCall]:
    """The per-call time of small eager tilec.nn.functional calls and of torch's (see the module doc)."""
    import torch.nn.functional as TF

    import tilec.nn.functional as F

    found = []
    for requires_grad in (False, True):
        found += _functional_calls(F, TF, requires_grad)
    return found


def _functional_calls(F: Any, TF: Any, requires_grad: bool) -> list[FunctionalCall]:
    import torch

    x = torch.randn(64, requires_grad=requires_grad)
    a = torch.randn(4, 8, requires_grad=requires_grad)
    w = torch.randn(8, 8, requires_grad=requires_grad)
    b = torch.randn(8, requires_grad=requires_grad)
    return [FunctionalCall("relu [64]", _per_call_us(lambda: F.relu(x)), _per_call_us(lambda: TF.relu(x)),
                           requires_grad),
            FunctionalCall("linear [4, 8] x [8, 8] + [8]", _per_call_us(lambda: F.linear(a, w, b)),
                           _per_call_us(lambda: TF.linear(a, w, b)), requires_grad)]


def report_functional(calls: list[FunctionalCall]) -> str:
    return "\n".join(f"tilec.nn.functional.{c.name}{' (requires grad)' if c.requires_grad else ''}: "
                     f"{c.tilec_us:.1f} us per call, torch {c.torch_us:.1f} us" for c in calls)


def report(o: Overhead) -> str:
    return (f"compile 512^3 GEMM from source (disk cache off): first {o.first_compile_s * 1e3:.0f} ms "
            f"(includes parser construction), then {o.compile_s * 1e3:.0f} ms median\n"
            f"call a cached kernel on 4x4 arrays: {o.call_us:.1f} us, raw ctypes call {o.raw_call_us:.1f} us, "
            f"tilec overhead {o.overhead_us:.1f} us")


if __name__ == "__main__":
    print(report(measure()))
    print(report_functional(functional()))
