"""`tilec bench train_step`: one SGD step of a small model, tilec's modules vs torch's (eager).

The models are the training examples' (examples/train_cnn.py, examples/train_transformer.py):
both copies start from the same weights and see the same batch, so they stay in lockstep; the
check compares their losses. A step is forward, backward and the optimiser's update.
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


@dataclass(frozen=True)
class TrainOp:
    label: str
    name: str = "train_step"
    baseline: str = "the same model with torch.nn modules, eager, one SGD step"
    baseline_short: str = "torch eager"
    causal: bool = False
    backward: bool = False


@dataclass(frozen=True)
class TrainStepCase:
    model: str  # one of MODELS
    shape: dict[str, int] = field(default_factory=dict)  # {"batch": N}
    dtype: str = "float32"
    target: str = "llvm"
    flops: float = 0.0  # not counted

    @property
    def op(self) -> TrainOp:
        return TrainOp(label=f"train_step-{self.model}")

    def prepare(self) -> Prepared:
        import torch
        import torch.nn.functional as F

        if not (EXAMPLES / "training.py").is_file():
            raise BenchError(f"train_step uses the training examples in {EXAMPLES}, which this installation lacks")
        if str(EXAMPLES) not in sys.path:
            sys.path.insert(0, str(EXAMPLES))
        torch.manual_seed(0)
        batch = self.shape.get("batch", 32 if self.model == "cnn" else 16)
        if self.model == "cnn":
            import train_cnn as example

            make: Callable[[str], Any] = example.make_model
            x, y = next(example.batches(1, batch))
            loss_fn: Callable[[Any, Any], Any] = F.cross_entropy
        else:
            import train_transformer as example  # type: ignore[no-redef]

            make = example.Block
            x, y = next(example.batches(1, batch))
            loss_fn = example.loss_fn
        reference, ours = make("torch"), make("tilec")
        ours.load_state_dict(reference.state_dict())

        def stepper(model: Any) -> Callable[[], float]:
            optimiser = torch.optim.SGD(model.parameters(), lr=0.01)

            def step() -> float:
                optimiser.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimiser.step()
                return float(loss.detach())

            return step

        return Prepared(stepper(ours), stepper(reference), self.check)

    def check(self, got: Any, expected: Any) -> None:
        if abs(got - expected) > 1e-3 * max(1.0, abs(expected)):
            raise BenchError(f"train_step-{self.model}: tilec's loss {got} differs from torch's {expected}")


def cases(models: tuple[str, ...] = MODELS, batch: int | None = None) -> list[TrainStepCase]:
    shape = {"batch": batch} if batch else {}
    return [TrainStepCase(m, dict(shape)) for m in models]
