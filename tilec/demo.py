"""The main job (`bash scripts/main.sh`): compile Tile kernels on the host CPU, check them
against numpy, and time them side by side with numpy in this process.

Autotuning (`tilec tune`) and training with tilec ops arrive with their own issues; this job
runs what exists and says so. `tilec bench` runs the acceptance benchmarks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

import tilec
from tilec.bench.overhead import measure, report

KERNELS: dict[str, tuple[str, Callable[..., Any], Callable[..., Any]]] = {
    "gemm": ("C[i, j: M, N] = +(A[i, k] * B[k, j])", lambda r: (r(256, 256), r(256, 256)), lambda a, b: a @ b),
    "softmax": ("function (X[N, K]) -> (O) { M[i, 0: N, 1] = >(X[i, j]); E = exp(X - M); "
                "S[i, 0: N, 1] = +(E[i, j]); O = E / S; }",
                lambda r: (r(512, 512),),
                lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
    "conv2d_3x3_same": (
        "function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) { "
        "O[n, x, y, co: N, H, W, CO] = +(I[n, x + i - 1, y + j - 1, c] * K[i, j, c, co]); }",
        lambda r: (r(1, 32, 32, 16), r(3, 3, 16, 16)),
        lambda i, k: _conv_reference(i, k)),
}


def _time(fn, args, repeats: int = 5) -> float:
    fn(*args)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    rng = np.random.default_rng(0)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    print(f"tilec {tilec.__version__} on {tilec.target.host_target().cpu}, "
          f"{tilec.target.host_target().cores} cores\n")
    print(f"{'kernel':<18}{'max |err|':>12}{'tilec ms':>11}{'numpy ms':>11}{'ratio':>8}")
    for name, (src, make, reference) in KERNELS.items():
        args = make(r)
        fn = tilec.compile(src)
        out = fn(*args)
        err = float(np.abs(out - reference(*args)).max())
        t_tilec = _time(fn, args)
        t_ref = _time(reference, args)
        print(f"{name:<18}{err:>12.2e}{t_tilec * 1e3:>11.3f}{t_ref * 1e3:>11.3f}{t_ref / t_tilec:>8.2f}")
    print()
    print(report(measure()))
    print("\nNot yet in this build: `tilec tune` and training with tilec ops (see the open issues).")


def _conv_reference(i: np.ndarray, k: np.ndarray) -> np.ndarray:
    padded = np.pad(i, ((0, 0), (1, 1), (1, 1), (0, 0)))
    h, w = i.shape[1:3]
    return sum(np.einsum("nhwc,co->nhwo", padded[:, a:a + h, b:b + w], k[a, b]) for a in range(3) for b in range(3))


if __name__ == "__main__":
    main()
