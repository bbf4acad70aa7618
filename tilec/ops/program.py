"""`tilec::program`: any Tile program with one output as a differentiable torch op.

The building block of tilec.nn.functional. A function there normalises torch's arguments (views,
layouts, defaults), builds a Tile source with the static ones as literals (cache the builder, so
one parameter tuple gives one string and one compiled Function), and calls

    run_program(source, [tensors...], out_shape)

which runs the program's kernel on the tensors' memory and records it for autograd; the backward
is the gradient program tilec.autodiff derives from the same source (tilec::tile_grad), so the
program's form decides the gradient's conventions (write ``O = X <= 0 ? 0 : X`` for a ReLU whose
gradient passes NaN through, as torch's does).

Paths, as for the named ops (tilec.ops.eager): plain CPU tensors outside torch.compile and outside
any dispatch mode take the eager path (one autograd.Function node, no dispatcher hop; under
`torch.profiler` the call is a `tilec::kernel` range); everything else (fake and meta tensors
while torch.compile traces, dispatch modes such as FlopCounterMode, CUDA tensors) calls the
registered op, whose fake kernel gives ``out_shape`` and whose FLOPs FlopCounterMode counts
(tilec.ops.flops).

Requires: tensors on one device; `out_shape` is the program's output shape for these inputs
(checked: an OpError otherwise); `dtype` the output dtype (default: the first tensor's).
Guarantees: a new contiguous output; non-contiguous inputs are copied first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tilec.ops import flops, torch_ops
from tilec.ops.arguments import OpError
from tilec.ops.eager import NODES, Node, eager, run_eager
from tilec.ops.kernels import call, forward_fn, run_forward
from tilec.ops.tile_grad import input_grads


@torch.library.custom_op("tilec::program", mutates_args=())
def _program(source: str, inputs: list[torch.Tensor], out_shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    out = run_forward(source, *inputs)
    if tuple(out.shape) != tuple(out_shape) or out.dtype != dtype:
        raise OpError(f"tilec: the program's output is {out.dtype}{list(out.shape)}, its caller expects "
                      f"{dtype}{list(out_shape)}:\n{source}")
    return out


@_program.register_fake
def _(source: str, inputs: list[torch.Tensor], out_shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    return inputs[0].new_empty(out_shape, dtype=dtype)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    source, tensors, _, _ = inputs
    ctx.source = source
    ctx.save_for_backward(*tensors)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    needs = list(ctx.needs_input_grad[1])  # one flag per tensor of the list argument
    grads = input_grads(ctx.source, list(ctx.saved_tensors), needs, [grad.contiguous()])
    return None, grads, None, None


_program.register_autograd(_backward, setup_context=_setup)
flops.register()  # FlopCounterMode counts the programs' contractions and the tuned ops (tilec.ops.flops)
assert torch_ops.__all__  # (imported so that the tuned ops exist when their formulas are registered)


def run_program(source: str, tensors: Sequence[torch.Tensor], out_shape: Sequence[int],
                dtype: torch.dtype | None = None, grad_from_output: bool = False) -> torch.Tensor:
    """The output of the Tile program `source` (one output) on `tensors`, in input order, as a
    differentiable torch tensor of shape `out_shape` (see the module docstring). With
    `grad_from_output` (a caller's promise: the derived gradient program computes the same reading
    the output where it reads the one input, as relu's does), the eager path saves the output for
    the gradient rather than the input (tilec.ops.eager.Node)."""
    dtype = tensors[0].dtype if dtype is None else dtype
    shape = out_shape if type(out_shape) is tuple else tuple(int(s) for s in out_shape)
    if eager(*tensors):
        return run_eager(eager_node(source, tensors, shape, dtype, grad_from_output), *tensors)
    return torch.ops.tilec.program(source, list(tensors), list(shape), dtype)


def eager_node(source: str, tensors: Sequence[torch.Tensor], shape: tuple[int, ...], dtype: torch.dtype,
               grad_from_output: bool = False) -> Node:
    """The eager path's node of `source` for CPU tensors of these shapes and dtypes (made once; an
    OpError where the program's output is not `dtype`[`shape`]). A caller that memoises its plans
    per shape may keep the node and call `run_eager(node, *tensors)` itself where `eager(*tensors)`."""
    key = (source, grad_from_output, *[(t.shape, t.dtype) for t in tensors])
    node = NODES.get(key)
    if node is None:
        node = Node(source, (None,) * len(tensors), shape, tensors, grad_from_output)
        if node.kernel_out != shape or node.dtype != dtype:
            raise OpError(f"tilec: the program's output is {node.dtype}{list(node.kernel_out)}, its caller "
                          f"expects {dtype}{list(shape)}:\n{source}")
        NODES[key] = node
    return node


def run_program_no_grad(source: str, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Every output of the Tile program `source` on CPU `tensors`, outside autograd (statistics,
    running averages, masks)."""
    return call(forward_fn(source), [t.detach() for t in tensors])


__all__ = ["run_program", "run_program_no_grad", "eager_node"]
