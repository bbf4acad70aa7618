"""The compiled Tile functions the ops run, cached, and how torch tensors are handed to them.

A forward function is compiled once per (source, target) and a gradient function once per
(source, wrt, target), from the program tilec.autodiff derives (renaming copies removed); a CPU
kernel is looked up once per (function, shapes, dtypes) and called on the tensors' memory by
address. Requires: CPU tensors of the dtypes the function takes for `call` (any layout: non-
contiguous ones are copied), tensors on one device for `run_forward`. Guarantees: outputs are new torch
tensors (large ones on memory reused from earlier results: `empty`); a CUDA tensor runs on target
"cuda" on the tensors themselves (tilec.runtime.torch_cuda).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tilec.autodiff import derive
from tilec.config import options
from tilec.frontend import parse
from tilec.entry import compile_source
from tilec.runtime import heap, memory
from tilec.runtime.function import Function, pointer_runner

_FORWARD: dict[tuple[str, str], Function] = {}
_BACKWARD: dict[tuple[str, tuple[str, ...], str], Function] = {}


def target_of(t: torch.Tensor) -> str:
    """The tilec target for tensors on t's device: "cuda" for a CUDA device, else the CPU's "llvm"."""
    return "cuda" if t.is_cuda else "llvm"


def forward_fn(source: str, target: str = "llvm") -> Function:
    fn = _FORWARD.get((source, target))
    if fn is None:
        fn = _FORWARD[source, target] = compile_source(source, target)
    return fn


def grad_fn(source: str, wrt: tuple[str, ...], target: str = "llvm") -> Function:
    key = (source, wrt, target)
    fn = _BACKWARD.get(key)
    if fn is None:
        # the derived program without its renaming copies (each would be one more pass over memory)
        program = derive(parse(source), list(wrt))
        fn = _BACKWARD[key] = compile_source(str(program), target)
    return fn


@dataclass(frozen=True)
class Plan:
    """A compiled kernel for one input signature (its runner on buffer addresses: inputs, then
    outputs) and what its outputs look like as torch tensors."""

    run: Callable[[Sequence[int]], None]
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]


_PLANS: dict[tuple[Any, ...], Plan] = {}


def plan_for(fn: Function, tensors: Sequence[torch.Tensor]) -> Plan:
    key = (id(fn), options.records_key(), *[(t.shape, t.dtype) for t in tensors])  # the records choose kernels
    plan = _PLANS.get(key)
    if plan is None:
        kernel = fn.kernel_for(tuple(tuple(t.shape) for t in tensors),
                               tuple(str(t.dtype).removeprefix("torch.") for t in tensors))
        outs = kernel.params[len(tensors):len(tensors) + len(fn.outputs)]
        plan = _PLANS[key] = Plan(pointer_runner(kernel, len(tensors) + len(outs)),
                                  tuple((b.shape, getattr(torch, b.dtype)) for b in outs))
    return plan


def empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """A new CPU tensor for a kernel to write: torch's, where malloc reuses freed blocks of its size
    (tilec.runtime.heap, which sets glibc so below 32 MiB), else, from 1 MiB
    (memory.MIN_POOLED_BYTES), on memory from the pool tilec's numpy results use
    (tilec.runtime.memory.outputs), which goes back there when no tensor uses it any more: fresh
    memory costs a page fault per 4 KiB page at the first write. Measured on Zen 5 (a VM): 2.5 us
    a fault, 5 ms to fill 8 MiB of fresh pages; in a bfloat16 CNN training step (`tilec bench
    train_step`'s cnn-large) with glibc's default thresholds a quarter of tilec's backward ops'
    results faulted, 2,500 pages a step. With the heap keeping its blocks, torch's allocator serves
    tilec's results too, one allocator for both sides (that step ran alike either way: 1.01-1.07x
    torch's from torch's allocator, 1.04x from the pool)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < max(memory.MIN_POOLED_BYTES, heap.keep_freed_memory()):  # (sets glibc at the first result)
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.from_numpy(memory.outputs.empty((nbytes,), "uint8")).view(dtype).view(tuple(shape))


def call(fn: Function, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run `fn` on CPU tensors of the dtypes it takes: outputs are allocated as torch tensors and
    every buffer goes to the kernel by address (no numpy round trip); the compiled kernel is looked
    up once per (function, shapes, dtypes). Non-contiguous inputs are copied to contiguous ones."""
    plan = plan_for(fn, tensors)
    inputs = [t.contiguous() for t in tensors]
    outputs = [empty(shape, dtype) for shape, dtype in plan.outputs]
    plan.run([t.data_ptr() for t in inputs] + [o.data_ptr() for o in outputs])
    return outputs


def run_forward(source: str, *tensors: torch.Tensor) -> torch.Tensor:
    """The (first) output of `source`'s forward kernel on `tensors`, on their device."""
    if tensors[0].is_cuda:  # the checks put every tensor of the op on this one device
        return forward_fn(source, "cuda")(*(t.detach() for t in tensors))
    return call(forward_fn(source), tensors)[0]
