"""`torch.compile(model, backend="tilec")`: PyTorch models on tilec kernels.

    import torch, tilec.torch_backend
    compiled = torch.compile(model, backend="tilec")

TorchDynamo captures the model; AOTAutograd splits each captured graph into a forward and a
backward ATen graph (torch.s decompositions expand the ops tilec has no rule for);
tilec lowers each graph's ATen nodes to Tile programs, fusing chains of elementwise ops,
reductions and the matrix products they feed or follow into one kernel each
(tilec.torch_backend.partition), and compiles them with the host's tuned records and the disk
cache. Ops tilec does not lower run as ATen calls in the same compiled function; nothing fails
for want of a rule. The optimizer step stays in torch.

`coverage()` says how much of the work ran in tilec kernels since `reset_coverage()`;
`TILEC_LOG=backend` prints each graph's counts and torch's share when it compiles.
`set_dropout_masks("torch")` (or TILEC_DROPOUT_MASKS=torch) has torch draw dropout's masks, as
eager does, instead of the kernels (the default: tilec.torch_backend.lowering.dropout).

Requires: torch (the backend needs nothing else). Registered under the name "tilec" when this
module is imported (the package's `torch_dynamo_backends` entry point imports it on first use).
"""

from __future__ import annotations

from dataclasses import replace

from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.compiler import COVERAGE, Compiled, GraphStats
from tilec.torch_backend.tasks import PROGRAMS
from tilec.torch_backend.lowering import lowered_ops
from tilec.torch_backend.lowering.dropout import dropout_masks, set_dropout_masks


def _decompositions() -> dict[Any, Any]:
    """torch's decompositions of the ops tilec has no rule for (the others stay whole: their rules
    write better programs than the expansions). The table is the one torch's own training
    compiler uses: the core-ATen table also decomposes forward ops whose backward then runs in
    torch's kernel and disagrees with the decomposition (`_scaled_dot_product_flash_attention_for_cpu`'s
    logsumexp), which gives wrong gradients."""
    from torch._inductor.decomposition import select_decomp_table

    mine = lowered_ops()
    table = {}
    for op, fn in select_decomp_table().items():
        packet = getattr(op, "overloadpacket", None)
        if op in mine or packet in mine:
            continue
        table[op] = fn
    return table


def compile_graph(gm: fx.GraphModule, example_inputs: list[Any]) -> Compiled:
    """AOTAutograd's forward or backward compiler: the ATen graph on tilec kernels."""
    del example_inputs  # (the nodes' recorded values carry the shapes)
    return Compiled(gm)


def tilec_backend(gm: fx.GraphModule, example_inputs: list[Any], **options: Any) -> Any:
    """The torch.compile backend (`backend="tilec"`)."""
    from torch._dynamo.backends.common import aot_autograd

    if options:
        raise TypeError(f"the tilec backend takes no options, got {sorted(options)}")
    dropout_masks()  # a TILEC_DROPOUT_MASKS it does not know stops the compilation here, by name
    backend = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph,
                           inference_compiler=compile_graph, decompositions=_decompositions())
    return backend(gm, example_inputs)


def coverage() -> dict[str, Any]:
    """Counts since the last `reset_coverage()` over every call of a tilec-compiled graph:
    "lowered" (ATen op calls tilec kernels executed), "fallback" (ATen op name -> calls torch ran),
    "kernels" (tilec kernels launched)."""
    return {"lowered": COVERAGE.lowered, "fallback": dict(COVERAGE.fallback), "kernels": COVERAGE.kernels}


def reset_coverage() -> None:
    COVERAGE.lowered = 0
    COVERAGE.fallback.clear()
    COVERAGE.kernels = 0


def tuning_tasks() -> list[Any]:
    """The tuner's tasks (tilec.autotune.task.Task) of every program the backend ran in this
    process (its fused kernels and its convolutions' programs): run a training step first, tune
    these (`tilec tune model`), and later compilations of the same programs use the best records
    (tilec.records), as every tilec kernel does."""
    return [task for task, _ in tuning_workload()]


def tuning_workload() -> list[tuple[Any, int]]:
    """The tuner's tasks of every program the backend ran (`tasks.PROGRAMS`), each statement cut
    out of its program (tilec.autotune.task.tasks_for with `alone`: a candidate runs one
    statement, not a whole fused kernel), with the number of places in the compiled graphs that
    run it (the weight tilec.autotune.scheduler gives it): a statement that several kernels hold
    is one task."""
    from tilec.autotune.task import tasks_for

    weights: dict[str, tuple[Any, int]] = {}
    for k, ((source, inputs), sites) in enumerate(PROGRAMS.items()):
        shapes = {name: shape for name, shape, _ in inputs}
        dtypes = {name: dtype for name, _, dtype in inputs}
        for j, task in enumerate(tasks_for(source, shapes, dtypes, alone=True)):
            if task.key in weights:  # the same statement in another kernel: one task, run at both places
                first, count = weights[task.key]
                weights[task.key] = (first, count + sites)
                continue
            dims = ",".join("x".join(map(str, shape)) for _, shape in task.shapes) if len(task.shapes) <= 3 \
                else f"{len(task.shapes)} inputs"
            weights[task.key] = (replace(task, label=f"kernel {k}.{j} {task.template} {dims}"), sites)
    return list(weights.values())


def register() -> None:
    """Make `backend="tilec"` known to torch.compile (idempotent)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    # an entry point torch found stands for us until torch.compile loads it (and registers it)
    if "tilec" not in _COMPILER_FNS and _BACKENDS.get("tilec") is None:
        register_backend(tilec_backend, name="tilec")


register()

__all__ = ["tilec_backend", "compile_graph", "coverage", "reset_coverage", "tuning_tasks", "tuning_workload", "register",
           "GraphStats", "set_dropout_masks", "dropout_masks"]
del torch
