"""Compile time and call overhead of the front half of tilec (figures for BENCHMARKS.md).

- compile time: source text -> callable kernel for a 512x512x512 GEMM, with the disk
  cache off, in this process (the first compile also builds the parser);
- call overhead: calling a cached kernel on tiny arrays, minus the time of the raw
  ctypes call into the same machine code (i.e. what tilec's Python layer adds).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

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
    import tilec
    from tilec.config import options

    saved = options.disk_cache
    options.disk_cache = False
    try:
        a = np.ones((512, 512), np.float32)
        start = time.perf_counter()
        tilec.compile(GEMM)(a, a)
        first = time.perf_counter() - start
        times = []
        for k in range(repeats):  # a distinct program each time defeats the in-memory cache
            src = f"function (A[M, L], B[L, N]) -> (C{k}) {{ C{k}[i, j: M, N] = +(A[i, k] * B[k, j]); }}"
            start = time.perf_counter()
            tilec.compile(src)(a, a)
            times.append(time.perf_counter() - start)
    finally:
        options.disk_cache = saved

    fn = tilec.compile(GEMM)
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


def report(o: Overhead) -> str:
    return (f"compile 512^3 GEMM from source (disk cache off): first {o.first_compile_s * 1e3:.0f} ms "
            f"(includes parser construction), then {o.compile_s * 1e3:.0f} ms median\n"
            f"call a cached kernel on 4x4 arrays: {o.call_us:.1f} us, raw ctypes call {o.raw_call_us:.1f} us, "
            f"tilec overhead {o.overhead_us:.1f} us")


if __name__ == "__main__":
    print(report(measure()))
