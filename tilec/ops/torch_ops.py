"""PyTorch ops backed by Tile kernels, registered under the `tilec` namespace.

Every op here is a `torch.library.custom_op` whose forward builds the Tile source for its static
parameters (tilec/ops/sources.py, cached per parameter tuple), compiles it once (`tilec.compile`,
cached per source; the kernel is looked up once per (shapes, dtypes)) and runs it on the tensors'
memory by address, its outputs allocated as torch tensors. Its backward is `tilec::tile_grad`, a
custom op running the kernel derived (tilec.autodiff, renaming copies removed) from the same
source for all the inputs that need a gradient at once (cached per (source, wrt)). Every op has
a fake (meta) implementation so `torch.compile` can trace it. CUDA tensors run on target "cuda"
on the tensors themselves (device pointers, torch's current stream; tilec.runtime.torch_cuda).

The Python wrappers (`conv2d`, `linear`, ...; what tilec.nn calls) run the same checks, kernels
and gradients through `_TileOp`, an autograd.Function, when called eagerly on plain tensors: the
dispatcher's two hops per op cost more than a small kernel. Under torch.compile, and for fake or
subclassed tensors, they call the registered ops.

    tilec::conv2d(x, weight, bias, stride, padding, dilation, groups)   NCHW, OIHW
    tilec::linear(x, weight, bias, activation)                          "none" | "relu" | "gelu"
    tilec::attention(q, k, v, causal, scale)                            [B, H, S, D]
    tilec::relu(x), tilec::gelu(x)                                      gelu: exact (erf) form
    tilec::softmax(x, dim)
    tilec::layer_norm(x, normalized_shape, weight, bias, eps)

Errors: wrong dtypes (float32 and float64 are supported, one per op), ranks, shapes, devices (CPU or
one CUDA device per op, not a mix) and parameters raise
`OpError`, a `tilec.TilecError` (and `ValueError`) that names the argument at fault. Non-
contiguous inputs are copied to contiguous ones first, so they give the same result.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import tilec
from tilec.ops import sources
from tilec.autodiff import derive
from tilec.errors import TilecError
from tilec.frontend import parse
from tilec.runtime.function import pointer_runner

__all__ = ["OpError", "conv2d", "linear", "attention", "relu", "gelu", "softmax", "layer_norm"]


class OpError(TilecError, ValueError):
    """A tilec op was called with arguments it does not support (dtype, rank, shape, device, ...)."""


# ------------------------------------------------------------------ compiled-function caches

_FORWARD: dict[tuple[str, str], tilec.Function] = {}
_BACKWARD: dict[tuple[str, tuple[str, ...], str], tilec.Function] = {}


def _target(t: torch.Tensor) -> str:
    """The tilec target for tensors on t's device: "cuda" for a CUDA device, else the CPU's "llvm"."""
    return "cuda" if t.is_cuda else "llvm"


def _forward_fn(source: str, target: str = "llvm") -> tilec.Function:
    fn = _FORWARD.get((source, target))
    if fn is None:
        fn = _FORWARD[source, target] = tilec.compile(source, target=target)
    return fn


def _grad_fn(source: str, wrt: tuple[str, ...], target: str = "llvm") -> tilec.Function:
    key = (source, wrt, target)
    fn = _BACKWARD.get(key)
    if fn is None:
        # the derived program without its renaming copies (each would be one more pass over memory)
        program = derive(parse(source), list(wrt))
        fn = _BACKWARD[key] = tilec.compile(str(program), target=target)
    return fn


@dataclass(frozen=True)
class _Plan:
    """A compiled kernel for one input signature (its runner on buffer addresses: inputs, then
    outputs) and what its outputs look like as torch tensors."""

    run: Callable[[Sequence[int]], None]
    outputs: tuple[tuple[tuple[int, ...], torch.dtype], ...]


_PLANS: dict[tuple[Any, ...], _Plan] = {}


def _plan(fn: tilec.Function, tensors: Sequence[torch.Tensor]) -> _Plan:
    key = (id(fn), *[(t.shape, t.dtype) for t in tensors])
    plan = _PLANS.get(key)
    if plan is None:
        kernel = fn.kernel_for(tuple(tuple(t.shape) for t in tensors),
                               tuple(str(t.dtype).removeprefix("torch.") for t in tensors))
        outs = kernel.params[len(tensors):len(tensors) + len(fn.outputs)]
        plan = _PLANS[key] = _Plan(pointer_runner(kernel, len(tensors) + len(outs)),
                                   tuple((b.shape, getattr(torch, b.dtype)) for b in outs))
    return plan


def _call(fn: tilec.Function, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Run `fn` on CPU tensors of the dtypes it takes: outputs are allocated as torch tensors and
    every buffer goes to the kernel by address (no numpy round trip); the compiled kernel is looked
    up once per (function, shapes, dtypes). Non-contiguous inputs are copied to contiguous ones."""
    plan = _plan(fn, tensors)
    inputs = [t.contiguous() for t in tensors]
    outputs = [torch.empty(shape, dtype=dtype) for shape, dtype in plan.outputs]
    plan.run([t.data_ptr() for t in inputs] + [o.data_ptr() for o in outputs])
    return outputs


def _run(source: str, *tensors: torch.Tensor) -> torch.Tensor:
    if tensors[0].is_cuda:  # the checks put every tensor of the op on this one device
        return _forward_fn(source, "cuda")(*(t.detach() for t in tensors))
    return _call(_forward_fn(source), tensors)[0]


# ------------------------------------------------------------------ checks


def _check_tensor(op: str, name: str, t: Any, rank: int | None = None, min_rank: int | None = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise OpError(f"tilec.{op}: '{name}' must be a torch.Tensor, got {type(t).__name__}")
    if t.device.type not in ("cpu", "cuda"):
        raise OpError(f"tilec.{op}: '{name}' is on {t.device}; tilec ops take CPU or CUDA tensors")
    if t.dtype not in (torch.float32, torch.float64):
        raise OpError(f"tilec.{op}: '{name}' has dtype {t.dtype}; torch.float32 and torch.float64 are supported")
    if rank is not None and t.dim() != rank:
        raise OpError(f"tilec.{op}: '{name}' must have rank {rank}, got shape {tuple(t.shape)}")
    if min_rank is not None and t.dim() < min_rank:
        raise OpError(f"tilec.{op}: '{name}' must have rank at least {min_rank}, got shape {tuple(t.shape)}")


def _same_dtype(op: str, **tensors: torch.Tensor | None) -> None:
    """All tensors of one op share a dtype (the fake kernels give the output that dtype) and a device."""
    devices = {name: t.device for name, t in tensors.items() if t is not None}
    if len(set(devices.values())) > 1:
        listing = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise OpError(f"tilec.{op}: the tensors must be on one device, got {listing}; move them with .to(device)")
    given = {name: t.dtype for name, t in tensors.items() if t is not None}
    if len(set(given.values())) > 1:
        listing = ", ".join(f"{name} {dtype}" for name, dtype in given.items())
        raise OpError(f"tilec.{op}: the tensors must share one dtype, got {listing}")


def _pair(op: str, name: str, value: Sequence[int], least: int) -> tuple[int, int]:
    values = tuple(int(v) for v in value)
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or any(v < least for v in values):
        raise OpError(f"tilec.{op}: '{name}' must be one or two integers >= {least}, got {list(value)}")
    return values[0], values[1]


def _as_list(value: int | Sequence[int]) -> list[int]:
    return [int(value)] * 2 if isinstance(value, int) else [int(v) for v in value]


# ------------------------------------------------------------------ the generic backward op


@torch.library.custom_op("tilec::tile_grad", mutates_args=())
def tile_grad(source: str, wrt: list[int], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Gradients of the Tile program `source` w.r.t. its inputs number `wrt`; `inputs` are the
    forward inputs followed by one gradient per forward output (shaped like the outputs)."""
    names = _forward_fn(source).inputs
    fn = _grad_fn(source, tuple(names[i] for i in wrt), _target(inputs[0]))
    if inputs[0].is_cuda:  # torch CUDA tensors in and out (a mix of devices is a tilec BindError)
        out = fn(*(t.detach() for t in inputs))
        return [out] if len(wrt) == 1 else list(out)
    return _call(fn, inputs)


@tile_grad.register_fake
def _(source: str, wrt: list[int], inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [inputs[i].new_empty(inputs[i].shape) for i in wrt]


def _grads(source: str, forward_inputs: Sequence[torch.Tensor], needs: Sequence[bool],
           output_grads: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """One gradient per forward input (None where not needed), through tilec::tile_grad."""
    wrt = [i for i, need in enumerate(needs) if need]
    result: list[torch.Tensor | None] = [None] * len(forward_inputs)
    if wrt:
        grads = torch.ops.tilec.tile_grad(source, wrt, [*forward_inputs, *output_grads])
        for i, g in zip(wrt, grads):
            result[i] = g
    return result


# ------------------------------------------------------------------ the eager fast path


def _eager(*tensors: torch.Tensor | None) -> bool:
    """Whether a call may skip the torch.library dispatcher: not while torch.compile traces, and only
    for plain CPU tensors (fake, meta and other subclasses take the registered op and its fake kernel;
    CUDA tensors take the registered op, which runs them on target cuda)."""
    if torch.compiler.is_compiling():
        return False
    return all(t is None or (type(t) in _PLAIN and not t.is_cuda) for t in tensors)


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _Node:
    """One eager op for one input signature (its key proves the op's checks passed): the forward
    kernel's runner, the output's shape and dtype, and one gradient runner per set of inputs that
    need a gradient, made on first use. `views` gives the shape each tensor takes inside the
    program (None: as is); contiguous tensors go to the kernels by address, so no view is made."""

    __slots__ = ("source", "n", "dtype", "in_shapes", "out_shape", "kernel_out", "run", "shapes", "_grads")

    def __init__(self, source: str, views: tuple[Any, ...], out_shape: Sequence[int],
                 tensors: Sequence[torch.Tensor]) -> None:
        fn = _forward_fn(source)
        inputs = [t if v is None else t.reshape(v) for t, v in zip(tensors, views)]
        plan = _plan(fn, inputs)
        (kernel_out, self.dtype), = plan.outputs
        self.out_shape = tuple(out_shape)
        if math.prod(kernel_out) != math.prod(self.out_shape):
            raise OpError(f"tilec: the kernel's output {kernel_out} does not fit the op's {self.out_shape}")
        self.source, self.n, self.kernel_out = source, len(tensors), kernel_out
        self.in_shapes = tuple(tuple(t.shape) for t in inputs)
        self.shapes = tuple(tuple(t.shape) for t in tensors)
        self.run = plan.run
        self._grads: dict[tuple[int, ...], tuple[Callable[[Sequence[int]], None], list[tuple[int, ...]]]] = {}

    def grad(self, wrt: tuple[int, ...]) -> tuple[Callable[[Sequence[int]], None], list[tuple[int, ...]]]:
        """The derived gradient kernel's runner for inputs `wrt`, and the gradients' (tensor) shapes."""
        found = self._grads.get(wrt)
        if found is None:
            names = _forward_fn(self.source).inputs
            fn = _grad_fn(self.source, tuple(names[i] for i in wrt))
            dtype = str(self.dtype).removeprefix("torch.")
            kernel = fn.kernel_for((*self.in_shapes, self.kernel_out), (dtype,) * (self.n + 1))
            found = self._grads[wrt] = (pointer_runner(kernel, self.n + 1 + len(wrt)), [self.shapes[i] for i in wrt])
        return found


def _signature(t: torch.Tensor | None) -> Any:
    """What an op's checks look at in one tensor argument (part of the eager cache key)."""
    return None if t is None else (t.shape, t.dtype, t.device)


_NODES: dict[tuple[Any, ...], _Node] = {}


class _TileOp(torch.autograd.Function):
    """One Tile program (one output) as an autograd node, called without the dispatcher.

    The eager path of the ops below: the same kernels and the same derived gradients as the
    registered ops (whose checks the wrappers run first, once per `_Node`), minus the two
    dispatcher hops per op (forward, and tilec::tile_grad in backward), which cost more than a
    small kernel. Gradients come back in the tensors' own shapes, all of those needed from one call
    of the derived gradient kernel."""

    @staticmethod
    def forward(ctx: Any, node: _Node, *tensors: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        inputs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
        out = torch.empty(node.out_shape, dtype=node.dtype)
        node.run([*[t.data_ptr() for t in inputs], out.data_ptr()])
        ctx.node = node
        ctx.save_for_backward(*inputs)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        node = ctx.node
        wrt = tuple(i for i, need in enumerate(ctx.needs_input_grad[1:]) if need)
        result: list[Any] = [None] * node.n
        if wrt:
            run, shapes = node.grad(wrt)
            if grad.dtype != node.dtype or not grad.is_contiguous():
                grad = grad.to(node.dtype).contiguous()
            grads = [torch.empty(shape, dtype=node.dtype) for shape in shapes]
            run([*[t.data_ptr() for t in ctx.saved_tensors], grad.data_ptr(), *[g.data_ptr() for g in grads]])
            for i, g in zip(wrt, grads):
                result[i] = g
        return (None, *result)


# ------------------------------------------------------------------ conv2d


def _conv2d_check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int], groups: int
                  ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, ...]]:
    _check_tensor("conv2d", "x", x, rank=4)
    _check_tensor("conv2d", "weight", weight, rank=4)
    _same_dtype("conv2d", x=x, weight=weight, bias=bias)
    if not isinstance(groups, int) or groups < 1:
        raise OpError(f"tilec.conv2d: 'groups' must be an integer >= 1, got {groups!r}")
    s = _pair("conv2d", "stride", stride, 1)
    p = _pair("conv2d", "padding", padding, 0)
    d = _pair("conv2d", "dilation", dilation, 1)
    n, c, h, w = x.shape
    co, ci, kh, kw = weight.shape
    if ci * groups != c:
        per = f" per group ({groups} groups need {c} / {groups})" if groups > 1 else ""
        raise OpError(f"tilec.conv2d: 'weight' has {ci} input channels{per} (shape {tuple(weight.shape)}) but "
                      f"'x' has {c} (shape {tuple(x.shape)})")
    if co % groups:
        raise OpError(f"tilec.conv2d: 'weight' has {co} output channels (shape {tuple(weight.shape)}), "
                      f"not a multiple of groups={groups}")
    if bias is not None:
        _check_tensor("conv2d", "bias", bias, rank=1)
        if bias.shape[0] != co:
            raise OpError(f"tilec.conv2d: 'bias' has shape {tuple(bias.shape)}, expected ({co},)")
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (w + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    if oh < 1 or ow < 1 or n == 0 or c == 0 or co == 0:
        raise OpError(f"tilec.conv2d: a {kh}x{kw} kernel (dilation {d}) does not fit 'x' of shape "
                      f"{tuple(x.shape)} with padding {p}")
    return s, p, d, (n, co, oh, ow)


def _conv2d_views(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  groups: int) -> tuple[Any, ...]:
    """The shapes x, weight (and bias) take inside the grouped program (tilec/ops/sources.py): free views
    of the contiguous tensors with the group axis split out; None for each when groups == 1."""
    n = 2 if bias is None else 3
    if groups == 1:
        return (None,) * n
    co = weight.shape[0]
    views = ((x.shape[0], groups, x.shape[1] // groups, *x.shape[2:]),
             (groups, co // groups, *weight.shape[1:]), (groups, co // groups))
    return views[:n]


def _viewed(tensors: Sequence[torch.Tensor], views: Sequence[Any]) -> list[torch.Tensor]:
    return [t if v is None else t.reshape(v) for t, v in zip(tensors, views)]


@torch.library.custom_op("tilec::conv2d", mutates_args=())
def _conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
            padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    s, p, d, shape = _conv2d_check(x, weight, bias, stride, padding, dilation, groups)
    source = sources.conv2d_source(s, p, d, bias is not None, groups)
    tensors = [x, weight] + ([bias] if bias is not None else [])
    return _run(source, *_viewed(tensors, _conv2d_views(x, weight, bias, groups))).reshape(shape)


@_conv2d.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
      padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    *_, shape = _conv2d_check(x, weight, bias, stride, padding, dilation, groups)
    return x.new_empty(shape)


def _conv2d_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.params = (_pair("conv2d", "stride", stride, 1), _pair("conv2d", "padding", padding, 0),
                  _pair("conv2d", "dilation", dilation, 1))
    ctx.groups = groups
    ctx.out_shape = output.shape


def _conv2d_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    s, p, d = ctx.params
    source = sources.conv2d_source(s, p, d, bias is not None, ctx.groups)
    tensors = [x, weight] + ([bias] if bias is not None else [])
    views = _conv2d_views(x, weight, bias, ctx.groups)
    needs = list(ctx.needs_input_grad[:len(tensors)])
    if ctx.groups > 1:
        n, co, oh, ow = ctx.out_shape
        grad = grad.reshape(n, ctx.groups, co // ctx.groups, oh, ow)
    grads = _grads(source, _viewed(tensors, views), needs, [grad])
    grads = [g if g is None else g.reshape(t.shape) for g, t in zip(grads, tensors)]
    if bias is None:
        grads.append(None)
    return (*grads, None, None, None, None)


_conv2d.register_autograd(_conv2d_backward, setup_context=_conv2d_setup)


def conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:
    """Like torch.nn.functional.conv2d (NCHW, OIHW, integer padding only; any groups, depthwise too)."""
    if isinstance(padding, str):
        raise OpError(f"tilec.conv2d: padding={padding!r} is not supported; give the padding as integers")
    stride, padding, dilation = _as_list(stride), _as_list(padding), _as_list(dilation)
    if _eager(x, weight, bias):
        tensors = (x, weight) if bias is None else (x, weight, bias)
        key = ("conv2d", *stride, *padding, *dilation, groups, _signature(x), _signature(weight), _signature(bias))
        node = _NODES.get(key)
        if node is None:
            s, p, d, shape = _conv2d_check(x, weight, bias, stride, padding, dilation, int(groups))
            source = sources.conv2d_source(s, p, d, bias is not None, int(groups))
            node = _NODES[key] = _Node(source, _conv2d_views(x, weight, bias, int(groups)), shape, tensors)
        return _TileOp.apply(node, *tensors)
    return torch.ops.tilec.conv2d(x, weight, bias, stride, padding, dilation, int(groups))


# ------------------------------------------------------------------ linear


def _linear_check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: str) -> None:
    _check_tensor("linear", "x", x, min_rank=1)
    _check_tensor("linear", "weight", weight, rank=2)
    _same_dtype("linear", x=x, weight=weight, bias=bias)
    if activation not in sources.ACTIVATIONS:
        raise OpError(f"tilec.linear: activation={activation!r}; expected one of {', '.join(sources.ACTIVATIONS)}")
    if x.shape[-1] != weight.shape[1]:
        raise OpError(f"tilec.linear: 'x' has {x.shape[-1]} features (shape {tuple(x.shape)}) but 'weight' "
                      f"expects {weight.shape[1]} (shape {tuple(weight.shape)})")
    if bias is not None:
        _check_tensor("linear", "bias", bias, rank=1)
        if bias.shape[0] != weight.shape[0]:
            raise OpError(f"tilec.linear: 'bias' has shape {tuple(bias.shape)}, expected ({weight.shape[0]},)")
    if x.numel() == 0 or weight.numel() == 0:
        raise OpError(f"tilec.linear: empty tensors are not supported (x {tuple(x.shape)}, weight "
                      f"{tuple(weight.shape)})")


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])


@torch.library.custom_op("tilec::linear", mutates_args=())
def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
            activation: str = "none") -> torch.Tensor:
    _linear_check(x, weight, bias, activation)
    source = sources.linear_source(bias is not None, activation)
    out = _run(source, _flat(x), weight, *([bias] if bias is not None else []))
    return out.reshape(*x.shape[:-1], weight.shape[0])


@_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
      activation: str = "none") -> torch.Tensor:
    _linear_check(x, weight, bias, activation)
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _linear_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, weight, bias, activation = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.activation = activation


def _linear_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    source = sources.linear_source(bias is not None, ctx.activation)
    tensors = [_flat(x), weight] + ([bias] if bias is not None else [])
    needs = list(ctx.needs_input_grad[:len(tensors)])
    grads = _grads(source, tensors, needs, [grad.reshape(-1, weight.shape[0])])
    if grads[0] is not None:
        grads[0] = grads[0].reshape(x.shape)
    if bias is None:
        grads.append(None)
    return (*grads, None)


_linear.register_autograd(_linear_backward, setup_context=_linear_setup)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str | None = None) -> torch.Tensor:
    """x[..., in] @ weight[out, in].T + bias, then `activation` (None, "relu" or "gelu") fused."""
    act = activation or "none"
    if _eager(x, weight, bias):
        tensors = (x, weight) if bias is None else (x, weight, bias)
        key = ("linear", act, _signature(x), _signature(weight), _signature(bias))
        node = _NODES.get(key)
        if node is None:
            _linear_check(x, weight, bias, act)
            source = sources.linear_source(bias is not None, act)
            views = ((-1, x.shape[-1]),) + (None,) * (len(tensors) - 1)
            node = _NODES[key] = _Node(source, views, (*x.shape[:-1], weight.shape[0]), tensors)
        return _TileOp.apply(node, *tensors)
    return torch.ops.tilec.linear(x, weight, bias, act)


# ------------------------------------------------------------------ attention


def _attention_check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor("attention", name, t, rank=4)
    _same_dtype("attention", q=q, k=k, v=v)
    b, h, s, d = q.shape
    if tuple(k.shape[:2]) != (b, h) or k.shape[3] != d:
        raise OpError(f"tilec.attention: 'k' has shape {tuple(k.shape)}, expected ({b}, {h}, T, {d}) to match "
                      f"'q' of shape {tuple(q.shape)}")
    if tuple(v.shape[:3]) != tuple(k.shape[:3]):
        raise OpError(f"tilec.attention: 'v' has shape {tuple(v.shape)}, expected ({b}, {h}, {k.shape[2]}, DV) "
                      f"to match 'k' of shape {tuple(k.shape)}")
    if min(q.numel(), k.numel(), v.numel()) == 0:
        raise OpError("tilec.attention: empty tensors are not supported")


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


@torch.library.custom_op("tilec::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
               scale: float | None = None) -> torch.Tensor:
    _attention_check(q, k, v)
    return _run(sources.attention_source(bool(causal), _scale(q, scale)), q, k, v)


@_attention.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
      scale: float | None = None) -> torch.Tensor:
    _attention_check(q, k, v)
    return q.new_empty((*q.shape[:3], v.shape[3]))


def _attention_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    q, k, v, causal, scale = inputs
    ctx.save_for_backward(q, k, v)
    ctx.source = sources.attention_source(bool(causal), _scale(q, scale))


def _attention_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    q, k, v = ctx.saved_tensors
    grads = _grads(ctx.source, [q, k, v], list(ctx.needs_input_grad[:3]), [grad])
    return (*grads, None, None)


_attention.register_autograd(_attention_backward, setup_context=_attention_setup)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """softmax(scale * q k^T [causal]) v on [B, H, S, D]; scale defaults to 1/sqrt(D) like torch's sdpa."""
    if _eager(q, k, v):
        key = ("attention", causal, scale, _signature(q), _signature(k), _signature(v))
        node = _NODES.get(key)
        if node is None:
            _attention_check(q, k, v)
            source = sources.attention_source(bool(causal), _scale(q, scale))
            node = _NODES[key] = _Node(source, (None,) * 3, (*q.shape[:3], v.shape[3]), (q, k, v))
        return _TileOp.apply(node, q, k, v)
    return torch.ops.tilec.attention(q, k, v, causal, scale)


# ------------------------------------------------------------------ relu, gelu


def _unary(name: str) -> Any:
    @torch.library.custom_op(f"tilec::{name}", mutates_args=())
    def op(x: torch.Tensor) -> torch.Tensor:
        _check_tensor(name, "x", x)
        if x.numel() == 0:
            return torch.empty_like(x, memory_format=torch.contiguous_format)
        return _run(sources.unary_source(name), x.reshape(-1)).reshape(x.shape)

    @op.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        _check_tensor(name, "x", x)
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        (x,) = ctx.saved_tensors
        if x.numel() == 0:
            return (torch.zeros_like(x),)
        (g,) = _grads(sources.unary_source(name), [x.reshape(-1)], [True], [grad.reshape(-1)])
        assert g is not None
        return (g.reshape(x.shape),)

    op.register_autograd(backward, setup_context=setup)
    return op


_relu = _unary("relu")
_gelu = _unary("gelu")


def _unary_eager(name: str, x: torch.Tensor) -> torch.Tensor | None:
    if not _eager(x):
        return None
    key = (name, _signature(x))
    node = _NODES.get(key)
    if node is None:
        _check_tensor(name, "x", x)
        if x.numel() == 0:
            return None
        node = _NODES[key] = _Node(sources.unary_source(name), ((-1,),), x.shape, (x,))
    return _TileOp.apply(node, x)


def relu(x: torch.Tensor) -> torch.Tensor:
    out = _unary_eager("relu", x)
    return torch.ops.tilec.relu(x) if out is None else out


def gelu(x: torch.Tensor) -> torch.Tensor:
    """The exact GELU, x * Phi(x) through erf (torch's approximate="none")."""
    out = _unary_eager("gelu", x)
    return torch.ops.tilec.gelu(x) if out is None else out


# ------------------------------------------------------------------ softmax


def _softmax_check(x: torch.Tensor, dim: int) -> int:
    _check_tensor("softmax", "x", x, min_rank=1)
    if not -x.dim() <= dim < x.dim():
        raise OpError(f"tilec.softmax: dim={dim} is out of range for 'x' of rank {x.dim()}")
    if x.numel() == 0:
        raise OpError("tilec.softmax: empty tensors are not supported")
    return dim % x.dim()


@torch.library.custom_op("tilec::softmax", mutates_args=())
def _softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    d = _softmax_check(x, dim)
    moved = x.movedim(d, -1)
    out = _run(sources.softmax_source(), _flat(moved)).reshape(moved.shape)
    return out.movedim(-1, d).contiguous()


@_softmax.register_fake
def _(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    _softmax_check(x, dim)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, dim = inputs
    ctx.save_for_backward(x)
    ctx.dim = dim % x.dim()


def _softmax_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    (x,) = ctx.saved_tensors
    moved = x.movedim(ctx.dim, -1)
    (g,) = _grads(sources.softmax_source(), [_flat(moved)], [True], [_flat(grad.movedim(ctx.dim, -1))])
    assert g is not None
    return g.reshape(moved.shape).movedim(-1, ctx.dim).contiguous(), None


_softmax.register_autograd(_softmax_backward, setup_context=_softmax_setup)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    if _eager(x):
        key = ("softmax", dim, _signature(x))
        node = _NODES.get(key)
        if node is None and _softmax_check(x, dim) == x.dim() - 1:
            node = _NODES[key] = _Node(sources.softmax_source(), ((-1, x.shape[-1]),), x.shape, (x,))
        if node is not None:
            return _TileOp.apply(node, x)
    return torch.ops.tilec.softmax(x, dim)


# ------------------------------------------------------------------ layer_norm


def _layer_norm_check(x: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None,
                      bias: torch.Tensor | None) -> int:
    shape = tuple(int(s) for s in normalized_shape)
    _check_tensor("layer_norm", "x", x, min_rank=max(len(shape), 1))
    if not shape or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise OpError(f"tilec.layer_norm: normalized_shape={list(shape)} must be the last axes of 'x' "
                      f"(shape {tuple(x.shape)})")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _check_tensor("layer_norm", name, t)
            if tuple(t.shape) != shape:
                raise OpError(f"tilec.layer_norm: '{name}' has shape {tuple(t.shape)}, expected {shape}")
    _same_dtype("layer_norm", x=x, weight=weight, bias=bias)
    if x.numel() == 0:
        raise OpError("tilec.layer_norm: empty tensors are not supported")
    return math.prod(shape)


def _layer_norm_inputs(x: torch.Tensor, k: int, weight: torch.Tensor | None,
                       bias: torch.Tensor | None) -> list[torch.Tensor]:
    return [x.reshape(-1, k)] + [t.reshape(k) for t in (weight, bias) if t is not None]


@torch.library.custom_op("tilec::layer_norm", mutates_args=())
def _layer_norm(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    k = _layer_norm_check(x, normalized_shape, weight, bias)
    source = sources.layer_norm_source(k, float(eps), weight is not None, bias is not None)
    return _run(source, *_layer_norm_inputs(x, k, weight, bias)).reshape(x.shape)


@_layer_norm.register_fake
def _(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None = None,
      bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    _layer_norm_check(x, normalized_shape, weight, bias)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _layer_norm_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    x, normalized_shape, weight, bias, eps = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.k = math.prod(int(s) for s in normalized_shape)
    ctx.eps = float(eps)


def _layer_norm_backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, bias = ctx.saved_tensors
    k = ctx.k
    source = sources.layer_norm_source(k, ctx.eps, weight is not None, bias is not None)
    tensors = _layer_norm_inputs(x, k, weight, bias)
    present = [t for t in (weight, bias) if t is not None]
    flags = [ctx.needs_input_grad[0]] + [ctx.needs_input_grad[i] for i, t in ((2, weight), (3, bias))
                                         if t is not None]
    grads = _grads(source, tensors, flags, [grad.reshape(-1, k)])
    out: list[Any] = [grads[0].reshape(x.shape) if grads[0] is not None else None, None]
    rest = iter(zip(present, grads[1:]))
    for t in (weight, bias):
        if t is None:
            out.append(None)
        else:
            original, g = next(rest)
            out.append(g.reshape(original.shape) if g is not None else None)
    return (*out, None)


_layer_norm.register_autograd(_layer_norm_backward, setup_context=_layer_norm_setup)


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    if _eager(x, weight, bias):
        tensors = [t for t in (x, weight, bias) if t is not None]
        given = normalized_shape if isinstance(normalized_shape, int) else tuple(normalized_shape)
        key = ("layer_norm", given, eps, _signature(x), _signature(weight), _signature(bias))
        node = _NODES.get(key)
        if node is None:
            shape = [int(given)] if isinstance(given, int) else [int(s) for s in given]
            k = _layer_norm_check(x, shape, weight, bias)
            source = sources.layer_norm_source(k, float(eps), weight is not None, bias is not None)
            node = _NODES[key] = _Node(source, ((-1, k),) + ((k,),) * (len(tensors) - 1), x.shape, tensors)
        return _TileOp.apply(node, *tensors)
    shape = [int(normalized_shape)] if isinstance(normalized_shape, int) else [int(s) for s in normalized_shape]
    return torch.ops.tilec.layer_norm(x, shape, weight, bias, float(eps))
