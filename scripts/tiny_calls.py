"""Time tiny tilec calls with torch imported, optionally under a busy competitor process.

    PYTHONPATH=. python scripts/tiny_calls.py [--calls 200] [--quick]

Each configuration runs in a fresh subprocess (so the pool/OpenMP choice is made afresh):
kernels: attention B=H=1, S=D=16 (tilec.ops), a 32^3 GEMM and a 64x64 add (tilec.compile);
competitors: none ("quiet"), one process spinning per core ("spin"), or a process running torch
matmuls on torch's threads ("torch"); with or without a torch op (an in-place add on 2^20 floats,
which runs on torch's OpenMP team) right before each tilec call; with the default pool choice and
with TILEC_OWN_THREADS=1. Prints median, p90 and p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

CHILD = r"""
import sys, time, numpy as np, torch, tilec
from tilec.ops import torch_ops as T
calls, torch_before = int(sys.argv[1]), sys.argv[2] == "1"
gemm = tilec.compile("C[i, j: M, N] = +(A[i, k] * B[k, j])")
add = tilec.compile("function (A[N, M], B[N, M]) -> (C) { C = A + B; }")
rng = np.random.default_rng(0)
g = rng.standard_normal((32, 32)).astype(np.float32)
e = rng.standard_normal((64, 64)).astype(np.float32)
q = torch.randn(1, 1, 16, 16)
x = torch.randn(1 << 20)  # big enough for torch's parallel_for: wakes its OpenMP team
kernels = {"attention 1x1x16x16": lambda: T.attention(q, q, q), "gemm 32^3": lambda: gemm(g, g),
           "add 64x64": lambda: add(e, e)}
for name, call in kernels.items():
    for _ in range(20):
        call()
    times = []
    for _ in range(calls):
        if torch_before:
            x.add_(1.0)
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    times.sort()
    q50, q90, q99 = (times[int(len(times) * f)] * 1e3 for f in (0.5, 0.9, 0.99))
    print(f"{name}\t{q50:.3f}\t{q90:.3f}\t{q99:.3f}")
"""


def run_case(calls: int, torch_before: bool, own: bool) -> list[str]:
    env = {**os.environ, "TILEC_OWN_THREADS": "1" if own else "0"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(calls), "1" if torch_before else "0"], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return out.stdout.strip().splitlines()


COMPETITORS = {
    "quiet": [],
    "spin": ["while True: pass"],  # one per core
    "torch": ["import torch\nx = torch.randn(256, 256)\nwhile True: x @ x"],  # one process, torch's threads
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--competitor", nargs="+", choices=list(COMPETITORS), default=list(COMPETITORS))
    parser.add_argument("--pool", nargs="+", choices=["default", "own"], default=["default", "own"])
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print("competitor\ttorch op before\tpool\tkernel\tmedian ms\tp90 ms\tp99 ms")
    for competitor in args.competitor:
        codes = COMPETITORS[competitor]
        codes = codes * cores if competitor == "spin" else codes
        others = [subprocess.Popen([sys.executable, "-c", code]) for code in codes]
        try:
            time.sleep(2.0 if others else 0)  # let them start (torch's import takes a while)
            for torch_before in (False, True):
                for pool in args.pool:
                    for line in run_case(args.calls, torch_before, pool == "own"):
                        print(f"{competitor}\t{'yes' if torch_before else 'no'}\t{pool}\t{line}", flush=True)
        finally:
            for p in others:
                p.kill()
                p.wait()
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
