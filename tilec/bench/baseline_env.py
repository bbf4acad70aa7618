"""Does the bench's quiet-baseline setting change the baseline itself? (figures for BENCHMARKS.md)

`tilec bench` runs with `tilec.bench.harness.QUIET_BASELINE_ENV` (OpenBLAS's idle threads sleep instead of
spinning for ~0.1 s after each call). This times numpy's 1024^3 matmul alone, each time in a
fresh interpreter, with and without that setting, alternating rounds so that the machine's
drift hits both alike. Run: `python -m tilec.bench.baseline_env`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

from tilec.bench.harness import QUIET_BASELINE_ENV

CHILD = r"""
import numpy as np
from tilec.runtime.timing import do_bench
a = np.random.rand(1024, 1024).astype(np.float32)
print(do_bench(lambda: a @ a, warmup=50, rep=300, quantiles=None, return_mode="median"))
"""


def run(extra: dict[str, str]) -> float:
    env = {k: v for k, v in os.environ.items() if k not in QUIET_BASELINE_ENV}
    env.update(extra)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(rounds: int = 3) -> None:
    plain, quiet = [], []
    for _ in range(rounds):
        plain.append(run({}))
        quiet.append(run(dict(QUIET_BASELINE_ENV)))
    setting = " ".join(f"{k}={v}" for k, v in QUIET_BASELINE_ENV.items())
    print(f"numpy 1024^3 matmul alone, median of {rounds} rounds x do_bench's median (300 ms of calls): "
          f"default {statistics.median(plain):.2f} ms, with {setting} {statistics.median(quiet):.2f} ms")


if __name__ == "__main__":
    main()
