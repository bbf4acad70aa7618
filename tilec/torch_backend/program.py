"""One fused kernel's Tile program, written statement by statement from ATen nodes.

The lowering rules (tilec.torch_backend.lowering) append statements to a `ProgramWriter`; each
statement defines one tensor (a `Value`: its Tile name, shape and torch dtype). A node's tensor
arguments are the values of earlier members of the same kernel, or become the program's inputs
(declared with their concrete shapes: the backend compiles one program per shape signature).
Every size is a literal, so names never clash and no size symbol needs binding.

Requires: nodes carrying `meta["val"]` (AOTAutograd's fake tensors) with concrete shapes.
Guarantees: `source(outputs)` is a Tile `function` whose inputs are `inputs` (in order) and whose
outputs are the given values; a rule that cannot express a node raises `Unsupported` before the
writer is changed in a way that matters (the partitioner tries every node alone first).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx as fx

#: torch dtypes the Tile language has
TILE_DTYPES = frozenset({torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.float16,
                         torch.bfloat16, torch.float32, torch.float64})


class Unsupported(Exception):
    """A node tilec does not lower (the reason is logged with TILEC_LOG=backend); it runs in torch."""


@dataclass(frozen=True)
class Value:
    """A tensor of the program: its torch shape and dtype, and the Tile tensor `name` it reads.

    Views cost nothing until a statement needs the tensor itself. `base` is the Tile tensor's
    shape where it differs from `shape`; then either `index` is None and `base` broadcasts to
    `shape` (an expand: numpy's rule, right-aligned), or `index` gives, for each axis of the Tile
    tensor, the index it is read at as a template over the logical axes `{0}`, `{1}`, ... (a
    permute: `{1}`, `{0}`; a split reshape [B*T, C] -> [B, T, C]: `64*{0} + {1}`, `{2}`; a
    slice: `2*{1} + 3`). Contractions read every view through `ProgramWriter.access`;
    elementwise statements read broadcasts directly and materialise other views."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    base: tuple[int, ...] | None = None
    index: tuple[str, ...] | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def dense(self) -> bool:
        return self.base is None and self.index is None

    @property
    def stored(self) -> tuple[int, ...]:
        """The shape of the Tile tensor `name`."""
        return self.base if self.base is not None else self.shape

    @property
    def tile_shape(self) -> tuple[int, ...]:
        """The shape of the tensor an elementwise statement reading this value sees."""
        return self.base if self.base is not None and self.index is None else self.shape

    def templates(self) -> tuple[str, ...]:
        """The index of each axis of the Tile tensor as a template over the logical axes."""
        if self.index is not None:
            return self.index
        if self.base is None:
            return tuple(f"{{{a}}}" for a in range(self.rank))
        lead = self.rank - len(self.base)
        return tuple(f"{{{lead + b}}}" if size == self.shape[lead + b] else "0" for b, size in enumerate(self.base))


def _wrapped(expr: str) -> str:
    """`expr` safe to substitute into a product: parenthesised unless a name, placeholder or integer."""
    return expr if re.fullmatch(r"[A-Za-z_]\w*|\{\d+\}|-?\d+", expr) else f"({expr})"


def meta(node: fx.Node) -> Any:
    """The fake value (tensor, tuple of them, or number) AOTAutograd recorded for `node`."""
    if "val" not in node.meta:
        raise Unsupported(f"{node.format_node()} has no recorded value")
    return node.meta["val"]


def concrete(shape: Sequence[Any]) -> tuple[int, ...]:
    """`shape` as ints (Unsupported where a size is symbolic: the backend specialises first)."""
    out = []
    for s in shape:
        if not isinstance(s, int):
            raise Unsupported(f"symbolic size {s}")
        out.append(s)
    return tuple(out)


def literal(x: Any) -> str:
    """A Python number as a Tile literal (infinities as out-of-range literals, which round to inf)."""
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            raise Unsupported("a NaN constant")
        if math.isinf(x):
            return "(1e308 * 1e308)" if x > 0 else "(-1e308 * 1e308)"  # (folds to an infinity)
        text = repr(x)
        return text if ("." in text or "e" in text) else text + ".0"
    raise Unsupported(f"constant {x!r} of type {type(x).__name__}")


@dataclass
class ProgramWriter:
    """The statements of one kernel under construction and the tensors it reads from outside."""

    inputs: list[tuple[Value, fx.Node]] = field(default_factory=list)
    #: torch callables run just before the kernel whose results are extra inputs (dropout masks)
    generated: list[tuple[Value, Callable[[], torch.Tensor]]] = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    values: dict[fx.Node, Any] = field(default_factory=dict)
    #: inputs declared in their memory order: name -> the permutation the caller applies first
    layouts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    _count: int = 0
    _outside: dict[fx.Node, Value] = field(default_factory=dict)
    _constraints: list[str] = field(default_factory=list)

    def fresh(self) -> str:
        self._count += 1
        return f"T{self._count}"

    # ------------------------------------------------------------------ reading arguments

    def tensor(self, arg: Any) -> Value:
        """The value of a tensor argument (a node of this kernel, or a new input)."""
        if not isinstance(arg, fx.Node):
            raise Unsupported(f"expected a tensor argument, got {arg!r}")
        if arg in self.values:
            v = self.values[arg]
            if not isinstance(v, Value):
                raise Unsupported(f"{arg.name} is not a single tensor")
            return v
        if arg not in self._outside:
            declared, order = self._declare(arg)
            self.inputs.append((declared, arg))
            self._outside[arg] = declared
            if order is not None:  # read through a lazy permute of the memory's own order
                self.layouts[declared.name] = order
                self._outside[arg] = self.view(declared, concrete(meta(arg).shape),
                                               [f"{{{axis}}}" for axis in order])
        return self._outside[arg]

    def _declare(self, node: fx.Node) -> tuple[Value, tuple[int, ...] | None]:
        """The input's declaration: a permuted dense tensor (a transposed weight AOTAutograd saved
        for the backward) is declared in its memory order, `order` (its axes by decreasing
        stride), so that the kernel reads its memory without a copy; others as they are."""
        val = meta(node)
        if not isinstance(val, torch.Tensor):
            raise Unsupported(f"{node.name} is not a tensor")
        check_tensor(val, node.name)
        shape = concrete(val.shape)
        order = memory_order(val)
        if order is None:
            return Value(self.fresh(), shape, val.dtype), None
        return Value(self.fresh(), tuple(shape[a] for a in order), val.dtype), order

    def elementwise(self, v: Value) -> str:
        """The name an elementwise statement reads `v` by (broadcasts as they are)."""
        return self.materialise(v).name if v.index is not None else v.name

    def access(self, v: Value, index: Sequence[str]) -> str:
        """`v`[index...] as a contraction reads it (through its lazy view). A logical axis the
        view does not read alone, at an axis of its size, gets a constraint keeping its index in
        range (a split axis `32*h + d` would otherwise let `d` run over 0..127; an expanded axis
        would leave its variable unbounded): the next `contract` adds them."""
        if v.dense:
            return f"{v.name}[{', '.join(index)}]"
        templates = v.templates()
        alone = {t for t, size in zip(templates, v.stored)
                 if re.fullmatch(r"\{\d+\}", t) and size == v.shape[int(t[1:-1])]}
        for d, i in enumerate(index):
            if f"{{{d}}}" not in alone:
                bound = f"{i} < {v.shape[d]}"
                if bound not in self._constraints:
                    self._constraints.append(bound)
        args = [_wrapped(i) for i in index]
        return f"{v.name}[{', '.join(t.format(*args) for t in templates)}]"

    def view(self, x: Value, shape: tuple[int, ...], mapping: Sequence[str]) -> Value:
        """A lazy view of x of `shape`: logical axis a of x is read at mapping[a], a template over
        the view's axes ({0}, {1}, ...)."""
        args = [_wrapped(m) for m in mapping]
        index = tuple(t.format(*args) for t in x.templates())
        if x.stored == shape and index == tuple(f"{{{a}}}" for a in range(len(shape))):
            return Value(x.name, shape, x.dtype)
        return Value(x.name, shape, x.dtype, x.stored, index)

    def materialise(self, v: Value) -> Value:
        """`v` as a Tile tensor of its own shape (itself when it is one)."""
        return v if v.dense else self.copy(v)

    def generate(self, shape: tuple[int, ...], dtype: torch.dtype, make: Callable[[], torch.Tensor]) -> Value:
        """An extra input that torch makes right before the kernel runs (random masks)."""
        v = Value(self.fresh(), shape, dtype)
        self.generated.append((v, make))
        return v

    # ------------------------------------------------------------------ writing statements

    def let(self, expr: str, shape: tuple[int, ...], dtype: torch.dtype, *operands: Value) -> Value:
        """`Name = expr;`, an elementwise statement over `operands` (numpy broadcasting: the Tile
        tensor has their broadcast shape, which broadcasts to `shape`)."""
        actual = tuple(np.broadcast_shapes(*[v.tile_shape for v in operands])) if operands else ()
        v = Value(self.fresh(), shape, dtype, None if actual == shape else actual)
        self.statements.append(f"{v.name} = {expr};")
        return v

    def contract(self, out_index: Sequence[str], shape: tuple[int, ...], rhs: str, dtype: torch.dtype,
                 tail: str = "") -> Value:
        """`Name[out_index: shape] = rhs tail;` (a contraction; `tail`: constraints or a default),
        with the constraints the accesses in `rhs` asked for."""
        if self._constraints:
            tail = "".join(f", {c}" for c in self._constraints) + tail
            self._constraints.clear()
        v = Value(self.fresh(), shape, dtype)
        sizes = ", ".join(str(s) for s in shape)
        index = ", ".join(out_index)
        head = f"{v.name}[{index}: {sizes}]" if shape else f"{v.name}[]"
        self.statements.append(f"{head} = {rhs}{tail};")
        return v

    def cast(self, v: Value, dtype: torch.dtype) -> Value:
        """`v` converted to `dtype` (itself when it has that dtype)."""
        if v.dtype == dtype:
            return v
        return self.let(convert(self.elementwise(v), dtype), v.shape, dtype, v)

    def copy(self, v: Value) -> Value:
        """A new tensor equal to `v`, read through its view (a program output must be computed by
        the program)."""
        idx = index_vars(v.rank)
        return self.contract(idx, v.shape, f"=({self.access(v, idx)})", v.dtype)

    def source(self, outputs: Sequence[Value]) -> str:
        decls = [f"{v.name}[{', '.join(str(s) for s in v.shape)}]" for v, _ in [*self.inputs, *self.generated]]
        body = "".join(f"    {s}\n" for s in chained(live(self.statements, [v.name for v in outputs])))
        return f"function ({', '.join(decls)}) -> ({', '.join(v.name for v in outputs)}) {{\n{body}}}"


_NAME = re.compile(r"\bT\d+\b")


def live(statements: list[str], outputs: Sequence[str]) -> list[str]:
    """The statements the outputs need, in their order: a rule may write more than its graph node's
    users read (attention's logsumexp, which only a backward reads), and a statement no output needs
    would still be computed, and would keep the templates from matching the statements it reads."""
    position, deps = _dependencies(statements)
    needed, todo = set(), [position[n] for n in outputs if n in position]
    while todo:
        k = todo.pop()
        if k not in needed:
            needed.add(k)
            todo.extend(deps[k])
    return [s for k, s in enumerate(statements) if k in needed]


def _dependencies(statements: list[str]) -> tuple[dict[str, int], list[set[int]]]:
    """Each statement's position by the name it defines, and the positions of those each one reads."""
    defined = [_NAME.match(s).group(0) for s in statements]  # type: ignore[union-attr]
    position = {name: k for k, name in enumerate(defined)}
    return position, [{position[n] for n in _NAME.findall(s.split("=", 1)[1]) if n in position} for s in statements]


def chained(statements: list[str]) -> list[str]:
    """The statements in an order where each one's consumers follow it as closely as their other
    inputs allow (a statement that reads the one just written comes next), so that the compiler's
    templates see a GEMM with its epilogue and a row-wise chain as consecutive statements."""
    _, deps = _dependencies(statements)
    users: list[list[int]] = [[] for _ in statements]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    waiting = [len(ds) for ds in deps]
    ready = sorted(k for k in range(len(statements)) if waiting[k] == 0)
    order: list[int] = []
    while ready:
        last = order[-1] if order else None
        follow = [k for k in ready if last is not None and last in deps[k]]
        k = min(follow) if follow else ready[0]
        ready.remove(k)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                bisect.insort(ready, u)
    return [statements[k] for k in order]


def memory_order(t: torch.Tensor) -> tuple[int, ...] | None:
    """The axes of a dense but permuted tensor by decreasing stride (t.permute(order) is
    contiguous), or None for a contiguous tensor or one that is not a permutation of dense memory."""
    if t.is_contiguous() or t.dim() < 2:
        return None
    strides = t.stride()
    order = tuple(sorted(range(t.dim()), key=lambda a: (-strides[a], a)))
    permuted = t.permute(order)
    return order if permuted.is_contiguous() else None


def index_vars(rank: int) -> list[str]:
    return [f"i{d}" for d in range(rank)]


def convert(expr: str, dtype: torch.dtype) -> str:
    """A Tile expression converting `expr` to `dtype`."""
    if dtype == torch.bool:
        return f"as_bool({expr})"
    if dtype == torch.bfloat16:
        return f"as_bfloat16({expr})"
    if dtype.is_floating_point:
        return f"as_float({expr}, {torch.finfo(dtype).bits})"
    bits = torch.iinfo(dtype).bits
    return f"as_uint({expr}, {bits})" if dtype == torch.uint8 else f"as_int({expr}, {bits})"


def check_tensor(val: torch.Tensor, what: str) -> None:
    """Unsupported unless tilec can hold `val`: a dense CPU tensor of a Tile dtype, concrete shape."""
    if val.dtype not in TILE_DTYPES:
        raise Unsupported(f"{what} has dtype {val.dtype}")
    if val.device.type != "cpu":
        raise Unsupported(f"{what} is on {val.device}")
    if val.layout != torch.strided:
        raise Unsupported(f"{what} has layout {val.layout}")
    concrete(val.shape)
