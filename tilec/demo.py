"""The main job (`bash scripts/main.sh`): compile Tile kernels on the host CPU, check them against
numpy, report compile time and call overhead, tune a GEMM (`tilec tune`, 24 trials into a
temporary records file) and benchmark it, then benchmark conv2d and attention side by side with
numpy / PyTorch (`tilec bench`), train a small CNN twice, with torch's modules and with tilec's
(`examples/train_cnn.py`), and finally train a ResNet-18 compiled with `torch.compile(model,
backend="tilec")` next to an eager copy (`examples/compile_cnn.py`), printing both loss curves each
time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from collections.abc import Callable

import numpy as np

from tilec.entry import compile_source
from tilec.version import __version__
from tilec.bench.overhead import measure, report
from tilec.target import host_cpu

CHECKS: dict[str, tuple[str, list[tuple[int, ...]], Callable[..., np.ndarray]]] = {
    "gemm 256^3": ("C[i, j: M, N] = +(A[i, k] * B[k, j])", [(256, 256), (256, 256)], lambda a, b: a @ b),
    "softmax": ("function (X[N, K]) -> (O) { M[i, 0: N, 1] = >(X[i, j]); E = exp(X - M); "
                "S[i, 0: N, 1] = +(E[i, j]); O = E / S; }", [(512, 512)],
                lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)),
    "gemm+bias+relu": ("function (A[M, K], B[K, N], Bias[N]) -> (O) { C[i, j: M, N] = +(A[i, k] * B[k, j]); "
                       "O = relu(C + Bias); }", [(300, 200), (200, 100), (100,)],
                       lambda a, b, bias: np.maximum(a @ b + bias, 0)),
}
BENCH_CASES = [
    ["gemm", "--shape", "M=1024,N=1024,K=1024"],
    ["gemm_bias_relu"],
    ["conv2d", "--shape", "N=8,C=64,H=56,W=56,CO=64,KH=3,KW=3,stride=1,pad=1"],
    ["attention"],
    ["attention", "--causal"],
]


def main() -> None:
    cpu = host_cpu()
    print(f"tilec {__version__} on {cpu.name}, {cpu.cores} cores, {cpu.vector_bits}-bit vectors, "
          f"L1d {cpu.l1d_bytes // 1024} KiB, L2 {cpu.l2_bytes // 1024} KiB\n")
    rng = np.random.default_rng(0)
    for name, (src, shapes, reference) in CHECKS.items():
        args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        err = float(np.abs(compile_source(src)(*args) - reference(*args)).max())
        print(f"check {name:<16} max |tilec - numpy| = {err:.2e}")
    print()
    print(report(measure()))
    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "records.sqlite")
        print("\nTuning a 1024^3 GEMM (tilec tune, 24 trials):", flush=True)
        subprocess.run([sys.executable, "-m", "tilec.cli", "tune", "gemm", "--shape", "M=1024,N=1024,K=1024",
                        "--trials", "24", "--records", records], check=False)
        print("\nSide by side with numpy / PyTorch (tilec bench; ratio > 1: tilec is faster):", flush=True)
        for case in BENCH_CASES:
            subprocess.run([sys.executable, "-m", "tilec.cli", "bench", *case, "--repeats", "5", "--records", records],
                           check=False, env=dict(os.environ))
    examples = Path(__file__).resolve().parent.parent / "examples"
    if (examples / "train_cnn.py").is_file():
        print("\nTraining a small CNN with torch's modules and with tilec's (examples/train_cnn.py):", flush=True)
        subprocess.run([sys.executable, str(examples / "train_cnn.py")], check=False)
    if (examples / "compile_cnn.py").is_file():
        print('\nTraining a ResNet-18 compiled with torch.compile(model, backend="tilec") and eagerly '
              "(examples/compile_cnn.py):", flush=True)
        subprocess.run([sys.executable, str(examples / "compile_cnn.py"), "--steps", "25"], check=False)


if __name__ == "__main__":
    main()
