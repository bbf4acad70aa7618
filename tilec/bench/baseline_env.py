"""Do the bench's quiet-baseline settings change the baselines themselves? (figures for BENCHMARKS.md)

Times numpy's 1024^3 matmul and torch's conv2d (3x3 64->64 56x56 batch 8) and SDPA (B4 H8 S512
D64) alone, each in a fresh interpreter, with and without `tilec.cli.QUIET_BASELINE_ENV`.
Run: `python -m tilec.bench.baseline_env`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tilec.cli import QUIET_BASELINE_ENV

CHILD = r"""
import json, time, numpy as np, torch
def median_ms(f, n=15):
    f(); f(); ts = []
    for _ in range(n):
        s = time.perf_counter(); f(); ts.append(time.perf_counter() - s)
    return float(np.median(ts)) * 1e3
a = np.random.rand(1024, 1024).astype(np.float32)
x, w = torch.randn(8, 64, 56, 56), torch.randn(64, 64, 3, 3)
q = k = v = torch.randn(4, 8, 512, 64)
print(json.dumps({
    "numpy matmul 1024^3": median_ms(lambda: a @ a),
    "torch conv2d 3x3 64->64 56x56 b8": median_ms(lambda: torch.nn.functional.conv2d(x, w, padding=1)),
    "torch sdpa B4 H8 S512 D64": median_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)),
}))
"""


def run(extra: dict[str, str]) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k not in QUIET_BASELINE_ENV}
    env.update(extra)
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    plain, quiet = run({}), run(dict(QUIET_BASELINE_ENV))
    print(f"{'baseline alone':36s}{'default ms':>12s}{'quiet ms':>10s}")
    for name in plain:
        print(f"{name:36s}{plain[name]:12.2f}{quiet[name]:10.2f}")


if __name__ == "__main__":
    main()
