"""`torch.compile(model, backend="tilec")`: PyTorch models on tilec kernels.

    import torch, tilec.torch_backend
    compiled = torch.compile(model, backend="tilec")

TorchDynamo captures the model; AOTAutograd splits each captured graph into a forward and a
backward ATen graph (torch's core-ATen decompositions expand the ops tilec has no rule for);
tilec lowers each graph's ATen nodes to Tile programs, fusing chains of elementwise ops,
reductions and the matrix products they feed or follow into one kernel each
(tilec.torch_backend.partition), and compiles them with the host's tuned records and the disk
cache. Ops tilec does not lower run as ATen calls in the same compiled function; nothing fails
for want of a rule. The optimizer step stays in torch.

`coverage()` says how much of the work ran in tilec kernels since `reset_coverage()`;
`TILEC_LOG=backend` prints each graph's counts and torch's share when it compiles.

Requires: torch (the backend needs nothing else). Registered under the name "tilec" when this
module is imported (the package's `torch_dynamo_backends` entry point imports it on first use).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.compiler import COVERAGE, Compiled, Coverage
from tilec.torch_backend.lowering import lowered_ops


#: decompositions that are right for inference only: torch's decomposition of the CPU flash attention
#: returns the attention weights where the op returns its logsumexp, which the op's backward reads
_INFERENCE_ONLY = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


def _decompositions(training: bool = False) -> dict[Any, Any]:
    """torch's core-ATen decompositions of the ops tilec has no rule for (the others stay whole:
    their rules write better programs than the expansions); for a graph that will be
    differentiated (`training`), without those whose outputs the op's backward cannot take."""
    from torch._decomp import core_aten_decompositions

    mine = lowered_ops()
    table = {}
    for op, fn in core_aten_decompositions().items():
        packet = getattr(op, "overloadpacket", None)
        if op in mine or packet in mine or (training and op in _INFERENCE_ONLY):
            continue
        table[op] = fn
    return table


def compile_graph(gm: fx.GraphModule, example_inputs: list[Any]) -> Compiled:
    """AOTAutograd's forward or backward compiler: the ATen graph on tilec kernels."""
    del example_inputs  # (the nodes' recorded values carry the shapes)
    return Compiled(gm)


def tilec_backend(gm: fx.GraphModule, example_inputs: list[Any], **options: Any) -> Any:
    """The torch.compile backend (`backend="tilec"`)."""
    import torch
    from torch._dynamo.backends.common import aot_autograd

    if options:
        raise TypeError(f"the tilec backend takes no options, got {sorted(options)}")
    training = torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                               for x in example_inputs)
    backend = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph,
                           inference_compiler=compile_graph, decompositions=_decompositions(training))
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


def register() -> None:
    """Make `backend="tilec"` known to torch.compile (idempotent)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    # an entry point torch found stands for us until torch.compile loads it (and registers it)
    if "tilec" not in _COMPILER_FNS and _BACKENDS.get("tilec") is None:
        register_backend(tilec_backend, name="tilec")


register()

__all__ = ["tilec_backend", "compile_graph", "coverage", "reset_coverage", "register", "Coverage"]
del torch
