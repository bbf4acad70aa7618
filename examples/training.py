"""Shared training loop of the examples: the same model twice, torch's modules and tilec's.

Both copies start from the same weights (tilec.nn modules keep torch.nn's parameter names, so
`load_state_dict` moves them across), see the same batches and take the same SGD steps; the
script prints both loss curves and how far apart they end. With `--bf16` on the command line
(`precision()`), both run forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``:
float32 weights, bfloat16 products, as mixed-precision training on CPUs runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator

import torch

Batch = tuple[torch.Tensor, torch.Tensor]


def train(name: str, make_model: Callable[[str], torch.nn.Module], batches: Callable[[int], Iterator[Batch]],
          loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None, steps: int = 300, lr: float = 0.05,
          report_every: int = 25,
          model_loss: Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
          autocast: torch.dtype | None = None) -> dict[str, list[float]]:
    """Trains both copies; the loss is `loss_fn(output, target)`, or `model_loss(model, output,
    target)` where the loss is one of the model's own modules; `autocast` (torch.bfloat16) runs
    forward and loss under torch.autocast in that dtype."""
    torch.manual_seed(0)
    reference = make_model("torch")
    ours = make_model("tilec")
    ours.load_state_dict(reference.state_dict())
    curves: dict[str, list[float]] = {}
    for label, model in (("torch", reference), ("tilec", ours)):
        optimiser = torch.optim.SGD(model.parameters(), lr=lr)
        losses = []
        start = time.perf_counter()
        for x, y in batches(steps):
            optimiser.zero_grad()
            with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
                out = model(x)
                loss = model_loss(model, out, y) if model_loss is not None else loss_fn(out, y)  # type: ignore[misc]
            loss.backward()
            optimiser.step()
            losses.append(float(loss.detach()))
        curves[label] = losses
        mode = "" if autocast is None else f" under autocast({str(autocast).removeprefix('torch.')})"
        print(f"{name} with {label} ops{mode}: {steps} steps in {time.perf_counter() - start:.1f} s")
    print(f"\n{'step':>6}{'torch loss':>14}{'tilec loss':>14}")
    for step in range(0, steps, report_every):
        print(f"{step:>6}{curves['torch'][step]:>14.4f}{curves['tilec'][step]:>14.4f}")
    final_t, final_o = _tail_mean(curves["torch"]), _tail_mean(curves["tilec"])
    gap = abs(final_o - final_t) / max(abs(final_t), 1e-12)
    print(f"{'end':>6}{final_t:>14.4f}{final_o:>14.4f}   (mean of the last 10 steps; relative gap {gap:.2%})")
    return curves


def precision(argv: list[str] | None = None) -> torch.dtype | None:
    """torch.bfloat16 when the command line says --bf16 (mixed precision), else None (float32)."""
    return torch.bfloat16 if "--bf16" in (sys.argv[1:] if argv is None else argv) else None


def _tail_mean(xs: list[float], n: int = 10) -> float:
    tail = xs[-n:]
    return sum(tail) / len(tail)
