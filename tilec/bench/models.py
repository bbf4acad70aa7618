"""The models that `torch.compile(model, backend="tilec")` is benchmarked and tested on, in one place.

"mlp" (torch.nn.Sequential 256 -> 512 -> 512 -> 10, batch 64, cross-entropy), "gpt2" (transformers'
GPT2LMHeadModel, 2 layers of width 256, tokens 8 x 64, the language-model loss), "bert"
(BertForSequenceClassification, 2 layers of width 256, tokens 8 x 64, 4 classes) and "resnet18"
(ResNetForImageClassification with ResNet-18's basic blocks, 8 images 3 x 32 x 32, 10 classes), all
randomly initialised from their configs. `tilec bench model`, `tests/test_backend_models.py` and the
examples `compile_gpt2.py` and `compile_cnn.py` use them.

Requires: torch; transformers for gpt2, bert and resnet18 (a test-only dependency: without it,
`build` raises a ModelError that names the package). Guarantees: `build(name)` gives the same
weights every time (seeded), the model in train mode with its config's dropout, and step k's batch
is the same on every call (a seed per step), so an eager copy and a compiled copy (`copy_of`) see
identical weights and batches; `train` seeds torch's global RNG before its first step and (by
default) has the tilec backend draw dropout's masks through torch, so the two runs' masks are the
same; the benchmark's `stepper` keeps the backend's default, masks drawn in its kernels.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tilec.errors import TilecError

MODELS = ("mlp", "gpt2", "bert", "resnet18")
#: the torch.compile backend the benchmarks and tests compile with (issue 17's); "aot_eager" stands in
#: for it where tilec.torch_backend is not there
BACKEND = "tilec"
Batch = dict[str, Any]  # the keyword arguments of one step: tensors


class ModelError(TilecError):
    """A benchmark model cannot be built: an unknown name, or a missing package (transformers)."""


@dataclass(frozen=True)
class Workload:
    """One model and its data: `batch(k)` is step k's batch (keyword arguments: tensors), `loss(model,
    batch)` its scalar loss, `model` called as given (the eager module or its compiled wrapper)."""

    name: str
    model: Any  # torch.nn.Module
    batch: Callable[[int], Batch]
    loss: Callable[[Any, Batch], Any]
    lr: float = 0.01  # SGD's learning rate at which the loss falls visibly in 25 steps


def _generator(seed: int) -> Any:
    import torch

    return torch.Generator().manual_seed(seed)


def _counting(batch: int, length: int, period: int, step: int) -> Any:
    """Rows that count modulo `period` from a random start: a language with something to learn."""
    import torch

    start = torch.randint(0, period, (batch, 1), generator=_generator(1000 + step))
    return (start + torch.arange(length)) % period


def _templates(classes: int, *shape: int) -> Any:
    """One fixed random pattern per class: the data adds the label's pattern to noise."""
    import torch

    return torch.randn(classes, *shape, generator=_generator(7))


def _output_loss(model: Any, batch: Batch) -> Any:
    """The loss that a transformers model computes itself when given `labels`."""
    return model(**batch).loss


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise ModelError("the gpt2, bert and resnet18 models need the package 'transformers' (a test-only "
                         "dependency: pip install transformers, or pip install -e '.[test]')") from None
    return transformers


def mlp() -> Workload:
    import torch
    import torch.nn.functional as F

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    templates = _templates(10, 256)

    def batch(step: int) -> Batch:
        gen = _generator(1000 + step)
        labels = torch.randint(0, 10, (64,), generator=gen)
        return {"x": torch.randn(64, 256, generator=gen) + 0.5 * templates[labels], "y": labels}

    def loss(model: Any, batch: Batch) -> Any:
        return F.cross_entropy(model(batch["x"]), batch["y"])

    return Workload("mlp", model, batch, loss, lr=0.1)


def gpt2() -> Workload:
    t = _transformers()
    model = t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000, n_positions=128,
                                           bos_token_id=0, eos_token_id=0))  # GPT-2's 50256 is past this vocabulary

    def batch(step: int) -> Batch:
        ids = _counting(8, 64, 50, step)
        return {"input_ids": ids, "labels": ids}

    return Workload("gpt2", model, batch, _output_loss, lr=0.05)


def bert() -> Workload:
    import torch

    t = _transformers()
    model = t.BertForSequenceClassification(t.BertConfig(
        num_hidden_layers=2, hidden_size=256, num_attention_heads=4, intermediate_size=1024, vocab_size=1000,
        num_labels=4))

    def batch(step: int) -> Batch:  # class c's sentences use the words 250c ... 250c + 249
        gen = _generator(1000 + step)
        labels = torch.randint(0, 4, (8,), generator=gen)
        return {"input_ids": 250 * labels[:, None] + torch.randint(0, 250, (8, 64), generator=gen),
                "labels": labels}

    return Workload("bert", model, batch, _output_loss, lr=0.05)


def resnet18(images: int = 8, lr: float = 0.01) -> Workload:
    """`images` 32x32 images a batch. With the default 8, the last stage's batch norms see 8 values
    a channel (1x1 maps), and float32 rounding steers the training: eager torch with one thread
    instead of two ends 6-13% apart from itself after 25 steps. At 32 images and lr 0.003 it ends
    0.4-1.1% apart (weight seeds 0, 1, 2), so a comparison of loss curves can mean something there."""
    import torch

    t = _transformers()
    model = t.ResNetForImageClassification(t.ResNetConfig(
        depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512], layer_type="basic", num_labels=10))
    templates = _templates(10, 3, 32, 32)

    def batch(step: int) -> Batch:
        gen = _generator(1000 + step)
        labels = torch.randint(0, 10, (images,), generator=gen)
        return {"pixel_values": torch.randn(images, 3, 32, 32, generator=gen) + templates[labels], "labels": labels}

    return Workload("resnet18", model, batch, _output_loss, lr=lr)


BUILDERS: dict[str, Callable[..., Workload]] = {"mlp": mlp, "gpt2": gpt2, "bert": bert, "resnet18": resnet18}


def build(name: str, seed: int = 0, **options: Any) -> Workload:
    """The model `name` (one of MODELS), its weights drawn after torch.manual_seed(seed), in train mode;
    `options` go to its builder (resnet18's `images` and `lr`)."""
    import torch

    if name not in BUILDERS:
        raise ModelError(f"unknown model {name!r}: expected one of {', '.join(MODELS)}")
    torch.manual_seed(seed)
    work = BUILDERS[name](**options)
    work.model.train()
    return work


def from_file(path: str) -> Workload:
    """The model a Python file defines for `tilec tune model FILE.py` (tilec.torch_backend.tuning.
    model_from_file): every step runs it on the file's example inputs, learning rate 1e-3."""
    from tilec.torch_backend.tuning import model_from_file

    model, loss_of = model_from_file(path)
    return Workload(path, model, batch=lambda k: {}, loss=lambda compiled, batch: loss_of(compiled), lr=1e-3)


def in_dtype(work: Workload, dtype: Any) -> Workload:
    """The workload with its model's floating-point parameters and buffers and its batches' floating-
    point tensors in `dtype` (torch.float64: a run whose rounding is too small to steer training)."""
    inner = work.batch

    def batch(step: int) -> Batch:
        return {name: v.to(dtype) if v.is_floating_point() else v for name, v in inner(step).items()}

    return replace(work, model=work.model.to(dtype), batch=batch)


def copy_of(work: Workload) -> Workload:
    """The same workload with a deep copy of the model: identical weights, trained independently."""
    return replace(work, model=copy.deepcopy(work.model))


def compiled(model: Any, backend: str | None) -> Any:
    """`torch.compile(model, backend=backend)`, or the model itself for backend None (eager). The tilec
    backend registers itself when tilec.torch_backend is imported, so that import comes first."""
    import torch

    if backend is None:
        return model
    if backend == "tilec":
        import_tilec_backend()
    return torch.compile(model, backend=backend)


def import_tilec_backend() -> Any:
    """tilec.torch_backend, imported (which registers the backend), or a ModelError saying it is missing."""
    try:
        import tilec.torch_backend as backend  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        if not (err.name or "").startswith("tilec.torch_backend"):
            raise
        raise ModelError("backend 'tilec' needs tilec.torch_backend, which this installation lacks") from None
    return backend


def stepper(work: Workload, backend: str | None, lr: float | None = None) -> Callable[[int], float]:
    """A function that runs training step k (forward, backward, SGD update; a fresh optimiser) of
    `work.model`, compiled with `backend` (None: eager), and returns the step's loss. `lr` defaults to
    the workload's."""
    import torch

    model = compiled(work.model, backend)
    optimiser = torch.optim.SGD(work.model.parameters(), lr=work.lr if lr is None else lr)

    def step(k: int) -> float:
        optimiser.zero_grad()
        loss = work.loss(model, work.batch(k))
        loss.backward()
        optimiser.step()
        return float(loss.detach())

    return step


def train(work: Workload, steps: int, lr: float | None = None, backend: str | None = BACKEND, seed: int = 0,
          masks: str | None = "torch") -> list[float]:
    """Train `work.model` in place for `steps` SGD steps and return the losses. torch's global RNG is
    seeded with `seed` first, and under the backend "tilec" dropout's masks come from `masks`
    (tilec.torch_backend.set_dropout_masks; "torch", the default here, draws them as eager does, so
    two runs from identical weights drop the same elements; None: the backend's own default, masks
    drawn in its kernels)."""
    import torch

    tilec_backend = import_tilec_backend() if backend == "tilec" else None
    previous = tilec_backend.set_dropout_masks(masks) if tilec_backend else None
    try:
        step = stepper(work, backend, lr)
        torch.manual_seed(seed)
        return [step(k) for k in range(steps)]
    finally:
        if tilec_backend:
            tilec_backend.set_dropout_masks(previous)


def reset_coverage() -> None:
    """Start tilec.torch_backend's coverage counts afresh."""
    import_tilec_backend().reset_coverage()


def coverage() -> dict[str, Any]:
    """tilec.torch_backend.coverage(): {"lowered": ATen calls run by tilec kernels, "fallback": {op: calls
    run by torch}, "kernels": tilec kernels launched}, since the last reset_coverage()."""
    return dict(import_tilec_backend().coverage())


def coverage_fraction(report: dict[str, Any]) -> float:
    """lowered / (lowered + fallback calls) of a tilec.torch_backend.coverage() report (1.0 when nothing ran)."""
    lowered = int(report["lowered"])
    total = lowered + sum(int(n) for n in report["fallback"].values())
    return lowered / total if total else 1.0


def relative_difference(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def tail_mean(losses: list[float], n: int = 10) -> float:
    tail = losses[-n:]
    return sum(tail) / len(tail)
