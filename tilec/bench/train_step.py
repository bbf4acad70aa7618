"""`tilec bench train_step`: one SGD step of a small model, tilec's modules vs torch's (eager).

The models are the training examples' (examples/train_cnn.py, examples/train_transformer.py):
both copies start from the same weights and see the same batch, so they stay in lockstep; the
check compares their losses. A step is forward, backward and the optimiser's update.

Each model runs at two sizes: "small" is exactly the example (a step is a dozen tiny ops, so
per-op overhead dominates) and "large" the same architecture at a realistic width: the CNN on
32x32 images with 64 channels, the transformer block with d_model 256, sequence 128, 8 heads.

With dtype "bfloat16" (or "float16") both sides run forward and loss under
``torch.autocast("cpu", dtype=...)`` (mixed precision: float32 weights, 16-bit products), and the
check allows bfloat16's tolerance.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilec.bench.ops import BenchError, Prepared

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODELS = ("cnn", "transformer")
LOW_PRECISION = ("bfloat16", "float16")
DTYPES = ("float32",) + LOW_PRECISION
SIZES = ("small", "large")
#: keyword arguments of the examples' model and batch builders at each size (small: their defaults)
LARGE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {"cnn": ({"channels": (64, 64), "image": 32}, {"image": 32}),
         "transformer": ({"dim": 256, "seq": 128, "heads": 8}, {"length": 128})}


@dataclass(frozen=True)
class TrainOp:
    label: str
    name: str = "train_step"
    baseline: str = "the same model with torch.nn modules, eager, one SGD step"
    baseline_short: str = "torch eager"
    causal: bool = False
    backward: bool = False
    fast_algorithms: bool = False  # (as tilec.bench.ops.Op's; a training step has no roofline)


@dataclass(frozen=True)
class TrainStepCase:
    model: str  # one of MODELS
    shape: dict[str, int] = field(default_factory=dict)  # {"batch": N}, then the size's dimensions
    size: str = "small"  # one of SIZES
    dtype: str = "float32"
    target: str = "llvm"
    flops: float = 0.0  # not counted
    bytes: float = 0.0  # nor these: no roofline

    @property
    def op(self) -> TrainOp:
        return TrainOp(label=f"train_step-{self.model}" + ("" if self.size == "small" else f"-{self.size}"))

    def prepare(self) -> Prepared:
        import torch
        import torch.nn.functional as F

        if not (EXAMPLES / "training.py").is_file():
            raise BenchError(f"train_step uses the training examples in {EXAMPLES}, which this installation lacks")
        if str(EXAMPLES) not in sys.path:
            sys.path.insert(0, str(EXAMPLES))
        torch.manual_seed(0)
        batch = self.shape.get("batch", 32 if self.model == "cnn" else 16)
        model_args, batch_args = LARGE[self.model] if self.size == "large" else ({}, {})
        if self.model == "cnn":
            import train_cnn as example

            make: Callable[..., Any] = example.make_model
            x, y = next(example.batches(1, batch, **batch_args))
            loss_fn: Callable[[Any, Any], Any] = F.cross_entropy
        else:
            import train_transformer as example  # type: ignore[no-redef]

            make = example.Block
            x, y = next(example.batches(1, batch, **batch_args))
            loss_fn = example.loss_fn
        reference, ours = make("torch", **model_args), make("tilec", **model_args)
        ours.load_state_dict(reference.state_dict())

        autocast = self.dtype in LOW_PRECISION

        def stepper(model: Any) -> Callable[[], float]:
            optimiser = torch.optim.SGD(model.parameters(), lr=0.01)

            def step() -> float:
                optimiser.zero_grad()
                with torch.autocast("cpu", dtype=getattr(torch, self.dtype), enabled=autocast):
                    loss = loss_fn(model(x), y)
                loss.backward()
                optimiser.step()
                return float(loss.detach())

            return step

        return Prepared(stepper(ours), stepper(reference), self.check)

    def check(self, got: Any, expected: Any) -> None:
        tolerance = 2e-2 if self.dtype in LOW_PRECISION else 1e-3  # the products' rounding differs with their order
        if abs(got - expected) > tolerance * max(1.0, abs(expected)):
            raise BenchError(f"train_step-{self.model}: tilec's loss {got} differs from torch's {expected}")


def cases(models: tuple[str, ...] = MODELS, batch: int | None = None,
          sizes: tuple[str, ...] | None = None, dtype: str = "float32") -> list[TrainStepCase]:
    """Both sizes of every model; with a `batch` (the CLI's --quick gives 4), the small ones only
    unless `sizes` says otherwise; `dtype` bfloat16 or float16 trains under autocast."""
    if dtype not in DTYPES:
        raise BenchError(f"train_step runs in {', '.join(DTYPES)} (the 16-bit types under torch.autocast), not {dtype}")
    chosen = sizes if sizes is not None else (("small",) if batch else SIZES)
    out = []
    for size in chosen:
        for m in models:
            shape: dict[str, int] = {"batch": batch} if batch else {}
            if size == "large" and not batch:
                shape = {"batch": 32 if m == "cnn" else 16}
            if size == "large":
                model_args = LARGE[m][0]
                shape.update({k: v for k, v in model_args.items() if isinstance(v, int)})
                if m == "cnn":
                    shape["channels"] = model_args["channels"][1]
            out.append(TrainStepCase(m, shape, size, dtype))
    return out


def interleaved(case: TrainStepCase, steps: int) -> dict[str, float]:
    """Alternate tilec's and torch's steps (after 10 checked warm-up pairs) and report the median and
    the fastest step of each side in ms, and the median page faults a step of each (minor faults:
    fresh memory's first touches, tilec.runtime.heap): on a shared, loaded machine the fastest steps
    are the figures that compare (they ran in the quiet slots), where the harness's medians swing."""
    import resource
    import statistics
    import time

    prepared = case.prepare()
    for _ in range(10):
        prepared.check(prepared.tilec(), prepared.baseline())
    times: dict[str, list[float]] = {"tilec": [], "torch": []}
    faults: dict[str, list[float]] = {"tilec": [], "torch": []}
    for _ in range(steps):
        for side, step in (("tilec", prepared.tilec), ("torch", prepared.baseline)):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            step()
            times[side].append((time.perf_counter() - start) * 1e3)
            faults[side].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    out = {f"{side} {stat}": f(ts) for side, ts in times.items()
           for stat, f in (("median", statistics.median), ("min", min))}
    out.update({f"{side} faults": statistics.median(fs) for side, fs in faults.items()})
    out["ratio of mins"] = out["torch min"] / out["tilec min"]
    out["ratio of medians"] = out["torch median"] / out["tilec median"]
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="interleaved training steps, tilec vs torch eager")
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="the 16-bit types train under torch.autocast")
    args = parser.parse_args(argv)
    case = next(c for c in cases((args.model,), dtype=args.dtype) if c.size == args.size)
    result = interleaved(case, args.steps)
    print(f"{case.op.label}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items()))


if __name__ == "__main__":
    main()
