"""Time tilec's 3x3 conv at 14^2 (forward + backward) right after torch's own, on each parallel path.

    PYTHONPATH=. python scripts/conv_after_torch.py [--steps 10] [--path default|openmp|pool]

N=8, 256 -> 256 channels, padding 1, through tilec.ops; before each timed tilec step torch runs
the same conv's forward and backward, so its OpenMP workers are spinning when tilec starts.
--path openmp sends every parallel job (above the serial threshold) to torch's OpenMP team, pool
none (as TILEC_OWN_THREADS=1 does), default leaves the runtime's thresholds alone. Prints the
median and fastest step and the own pool's jobs per step.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from tilec.codegen.llvm import runtime
from tilec.ops import torch_ops as T


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--path", choices=["default", "openmp", "pool"], default="default")
    args = parser.parse_args()
    x, w = torch.randn(8, 256, 14, 14, requires_grad=True), torch.randn(256, 256, 3, 3, requires_grad=True)
    xt, wt = torch.randn(8, 256, 14, 14, requires_grad=True), torch.randn(256, 256, 3, 3, requires_grad=True)

    def tilec_step() -> None:
        T.conv2d(x, w, None, 1, 1).sum().backward()

    def torch_step() -> None:
        F.conv2d(xt, wt, None, 1, 1).sum().backward()

    for _ in range(3):
        tilec_step()
        torch_step()
    if args.path != "default":
        runtime.set_thresholds(openmp_above=0 if args.path == "openmp" else 1 << 60)
    jobs, times = runtime.pool_jobs(), []
    for _ in range(args.steps):
        torch_step()
        t0 = time.perf_counter()
        tilec_step()
        times.append(time.perf_counter() - t0)
    times.sort()
    print(f"path {args.path}: median {times[len(times) // 2] * 1e3:.2f} ms, fastest {times[0] * 1e3:.2f} ms, "
          f"pool jobs per step {(runtime.pool_jobs() - jobs) / len(times):.1f}, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
