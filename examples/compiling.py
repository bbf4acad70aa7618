"""Shared part of the torch.compile examples: train a model twice, compiled and eagerly, side by side.

Both copies start from the same weights (tilec.bench.models builds the model, seeded, and `copy_of`
copies it), see the same batches and draw dropout masks from the same RNG stream; `models.train`
runs SGD steps through `torch.compile(model, backend=backend)` for the compiled copy and through
the model itself for the eager one. The script prints both loss curves, how far apart they start
and end, and, for the backend "tilec", which share of the graphs' ATen calls tilec's kernels ran.
"""

from __future__ import annotations

import argparse
import time

from tilec.bench import models


def compare(name: str, steps: int, backend: str = "tilec") -> dict[str, list[float]]:
    eager = models.build(name)
    compiled = models.copy_of(eager)
    if backend == "tilec":
        models.reset_coverage()
    start = time.perf_counter()
    compiled_losses = models.train(compiled, steps, backend=backend)
    seconds = time.perf_counter() - start
    coverage = models.coverage() if backend == "tilec" else None
    start = time.perf_counter()
    eager_losses = models.train(eager, steps, backend=None)
    print(f"{name}: {steps} steps compiled with backend {backend!r} in {seconds:.1f} s (compilation included), "
          f"eagerly in {time.perf_counter() - start:.1f} s\n")
    print(f"{'step':>6}{'eager loss':>14}{backend + ' loss':>16}")
    for step, (a, b) in enumerate(zip(eager_losses, compiled_losses)):
        print(f"{step:>6}{a:>14.4f}{b:>16.4f}")
    first = models.relative_difference(compiled_losses[0], eager_losses[0])
    last = models.relative_difference(models.tail_mean(compiled_losses), models.tail_mean(eager_losses))
    print(f"\nfirst loss: relative difference {first:.2e}; mean of the last 10 losses: relative difference {last:.2%}")
    if coverage is not None:
        fallback = ", ".join(f"{op} {n}" for op, n in sorted(coverage["fallback"].items(), key=lambda x: -x[1]))
        print(f"coverage: {models.coverage_fraction(coverage):.1%} of the ATen calls ran as tilec kernels "
              f"({coverage['lowered']} calls, {coverage['kernels']} kernels); torch ran: {fallback or 'nothing'}")
    return {"eager": eager_losses, backend: compiled_losses}


def main(name: str, steps: int = 30) -> None:
    parser = argparse.ArgumentParser(description=f"train {name} compiled and eagerly, side by side")
    parser.add_argument("--steps", type=int, default=steps, help=f"SGD steps (default {steps})")
    parser.add_argument("--backend", default="tilec", help="torch.compile backend (default tilec)")
    args = parser.parse_args()
    compare(name, args.steps, args.backend)
