"""The eager fast path: an op called on plain CPU tensors skips the torch.library dispatcher.

The dispatcher's two hops per op (forward, and tilec::tile_grad in backward) cost more than a
small kernel, so the wrappers run a `Node` (one op's kernels for one input signature, cached in
NODES by a key that proves the op's checks passed) through `run_eager`, one `_TileOp` (an
autograd.Function) node.

Requires: the op's checks have passed for the tensors' signature before a Node is made; `eager`
says when the path applies. Guarantees: the same kernels and the same derived gradients as the
registered ops, gradients back in the tensors' own shapes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from tilec.config import options
from tilec.ops.arguments import OpError
from tilec.ops.kernels import empty, forward_fn, grad_fn, plan_for
from tilec.runtime.function import pointer_runner


def eager(*tensors: torch.Tensor | None) -> bool:
    """Whether a call may skip the torch.library dispatcher: not while torch.compile traces, and only
    for plain CPU tensors (fake, meta and other subclasses take the registered op and its fake kernel;
    CUDA tensors take the registered op, which runs them on target cuda)."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
        return False  # tracing, or a dispatch mode (FlopCounterMode, ...) that must see the op
    for t in tensors:  # (a loop: a generator costs ~1 us per call here)
        if t is not None and (type(t) not in _PLAIN or t.is_cuda):
            return False
    return True


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class Node:
    """One eager op for one input signature (its key proves the op's checks passed): the forward
    kernel's runner, the output's shape and dtype, and one gradient runner per set of inputs that
    need a gradient, made on first use. `views` gives the shape each tensor takes inside the
    program (None: as is); contiguous tensors go to the kernels by address, so no view is made."""

    __slots__ = ("source", "n", "dtype", "in_shapes", "in_dtypes", "out_shape", "kernel_out", "run", "shapes", "_grads",
                 "grad_from_output")

    def __init__(self, source: str, views: tuple[Any, ...], out_shape: Sequence[int],
                 tensors: Sequence[torch.Tensor], grad_from_output: bool = False) -> None:
        fn = forward_fn(source)
        inputs = [t if v is None else t.reshape(v) for t, v in zip(tensors, views)]
        plan = plan_for(fn, inputs)
        (kernel_out, self.dtype), = plan.outputs
        self.out_shape = tuple(out_shape)
        if math.prod(kernel_out) != math.prod(self.out_shape):
            raise OpError(f"tilec: the kernel's output {kernel_out} does not fit the op's {self.out_shape}")
        self.source, self.n, self.kernel_out = source, len(tensors), kernel_out
        self.in_shapes = tuple(tuple(t.shape) for t in inputs)
        self.in_dtypes = tuple(str(t.dtype).removeprefix("torch.") for t in inputs)  # int indices stay ints
        self.shapes = tuple(tuple(t.shape) for t in tensors)
        self.run = plan.run
        # The gradient program reads the output where the input stood (relu's: X > 0 iff relu(X) > 0),
        # so autograd saves the output, which the next layer keeps for its own gradient anyway, and the
        # input goes free after the forward pass, as with torch's relu: the bfloat16 cnn-large step of
        # `tilec bench train_step` kept 10.26 MiB of activations, now 5.26 (torch's 5.26).
        self.grad_from_output = grad_from_output
        if grad_from_output and not (len(tensors) == 1 and self.in_shapes[0] == kernel_out
                                     and self.in_dtypes[0] == str(self.dtype).removeprefix("torch.")):
            raise OpError("tilec: a gradient read from the output needs one input of the output's shape and dtype")
        self._grads: dict[tuple[int, ...], tuple[Callable[[Sequence[int]], None], list[GradBuffer]]] = {}

    def call(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """The forward kernel on contiguous `inputs`: a new output tensor."""
        out = empty(self.out_shape, self.dtype)
        self.run([*[t.data_ptr() for t in inputs], out.data_ptr()])
        return out

    def grad(self, wrt: tuple[int, ...]) -> tuple[Callable[[Sequence[int]], None], list["GradBuffer"]]:
        """The derived gradient kernel's runner for inputs `wrt`, and the buffer each gradient is
        written to: the tensor's shape in the dtype the kernel writes (a program that computes in
        another type than its inputs', through as_float, derives gradients of that type)."""
        found = self._grads.get(wrt)
        if found is None:
            names = forward_fn(self.source).inputs
            fn = grad_fn(self.source, tuple(names[i] for i in wrt))
            dtype = str(self.dtype).removeprefix("torch.")
            kernel = fn.kernel_for((*self.in_shapes, self.kernel_out), (*self.in_dtypes, dtype))
            written = kernel.params[self.n + 1:self.n + 1 + len(wrt)]
            buffers = []
            for i, param in zip(wrt, written):
                if math.prod(param.shape) != math.prod(self.shapes[i]):
                    raise OpError(f"tilec: the gradient program writes {param.name} of shape {param.shape} for an "
                                  f"input of shape {self.shapes[i]}:\n{self.source}")
                buffers.append(GradBuffer(self.shapes[i], getattr(torch, param.dtype),
                                          getattr(torch, self.in_dtypes[i])))
            found = self._grads[wrt] = (pointer_runner(kernel, self.n + 1 + len(wrt)), buffers)
        return found


class GradBuffer(NamedTuple):
    """Where the gradient kernel writes one input's gradient (`written` dtype), and the dtype the
    gradient takes (`dtype`, its input's)."""

    shape: tuple[int, ...]
    written: torch.dtype
    dtype: torch.dtype


def signature(t: torch.Tensor | None) -> Any:
    """What an op's checks look at in one tensor argument (part of the eager cache key)."""
    return None if t is None else (t.shape, t.dtype, t.device)


class _Nodes:
    """The Nodes made so far, by the op's key and the tuning records in force when they were made
    (tilec.config.Options.records_key): a Node keeps the runners of kernels those records chose."""

    __slots__ = ("_nodes",)

    def __init__(self) -> None:
        self._nodes: dict[tuple[Any, ...], Node] = {}

    def get(self, key: tuple[Any, ...]) -> Node | None:
        return self._nodes.get((options.records_key(), key))

    def __setitem__(self, key: tuple[Any, ...], node: Node) -> None:
        self._nodes[options.records_key(), key] = node


NODES = _Nodes()


class _TileOp(torch.autograd.Function):
    """One Tile program (one output) as an autograd node, called without the dispatcher.

    The eager path of the ops (tilec.ops.conv2d, linear, ...): the same kernels and the same
    derived gradients as the registered ops (whose checks the wrappers run first, once per
    `Node`), minus the two dispatcher hops per op (forward, and tilec::tile_grad in backward),
    which cost more than a small kernel. Gradients come back in the tensors' own shapes, all of those needed from one call
    of the derived gradient kernel."""

    @staticmethod
    def forward(ctx: Any, node: Node, *tensors: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        inputs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        ctx.node = node
        out = node.call(inputs)
        ctx.save_for_backward(*((out,) if node.grad_from_output else inputs))
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        node = ctx.node
        wrt = tuple(i for i, need in enumerate(ctx.needs_input_grad[1:]) if need)
        result: list[Any] = [None] * node.n
        if wrt:
            run, buffers = node.grad(wrt)
            if grad.dtype != node.dtype or not grad.is_contiguous():
                grad = grad.to(node.dtype).contiguous()
            grads = [empty(b.shape, b.written) for b in buffers]
            run([*[t.data_ptr() for t in ctx.saved_tensors], grad.data_ptr(), *[g.data_ptr() for g in grads]])
            for i, g, b in zip(wrt, grads, buffers):
                result[i] = g if b.written == b.dtype else g.to(b.dtype)
        return (None, *result)


def run_eager(node: Node, *tensors: torch.Tensor) -> torch.Tensor:
    """`node`'s kernel on `tensors`, recorded for autograd as one `_TileOp` node (its grad_fn is
    a `_TileOpBackward`) where a gradient may be asked for; otherwise (no tensor requires grad, or
    grad mode is off) the kernel alone, without the autograd.Function's cost. Under torch.profiler
    the call is a `tilec::kernel` range."""
    if torch.autograd.profiler._is_profiler_enabled:  # one range per kernel in torch.profiler's trace
        with torch.profiler.record_function("tilec::kernel"):
            return _run(node, tensors)
    return _run(node, tensors)


def _run(node: Node, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    if torch.is_grad_enabled():
        for t in tensors:
            if t.requires_grad:
                return _TileOp.apply(node, *tensors)
    return node.call([t if t.is_contiguous() else t.contiguous() for t in tensors])
