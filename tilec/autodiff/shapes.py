"""The symbolic shape of every tensor of a program being differentiated, and fresh names for it.

The backward statements need every tensor's dims as size expressions: a gradient has its
tensor's shape, and undoing a broadcast compares shapes. `Shapes(program).infer()` reads them
from the declarations, the contractions' sizes and accesses, and elementwise broadcasting.

Requires: a checked tensor-IR program. Guarantees: after `infer()`, `shape(name)` gives every
input and statement output a tuple of size expressions; inputs declared without dims get fresh
size symbols (``A_D0``, ...; their rank read from a contraction access), unified with the sizes
they must agree with; `fresh` names never collide with the program's names or with each other.
A shape that cannot be told (an undeclared rank, output sizes no operand gives, two distinct size
symbols that must agree) is a TilecError saying what to write instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from tilec.errors import TilecError
from tilec.ir.tensor import (Contraction, EBinary, ECompare, EConst, EExpr, ESize, Elementwise, ESelect, ETensor, EUnary,
                             IBin, IConst, IExpr, INeg, Intrinsic, ISize, IVar, Program, TensorParam, iexpr_names,
                             statement_reads)

Shape = tuple[IExpr, ...]
ONE = IConst(1)


def used_names(program: Program) -> set[str]:
    """Every tensor, index variable and size symbol `program` names (what fresh names must avoid)."""
    used = set(program.input_names) | set(program.outputs)
    exprs: list[IExpr] = [d for p in program.params for d in (p.dims or ())]
    for st in program.statements:
        used.add(st.output)
        used.update(statement_reads(st))
        if isinstance(st, Intrinsic):
            exprs += list(st.params)
        if not isinstance(st, Contraction):
            continue
        exprs += list(st.indices) + list(st.sizes or ()) + [i for a in st.operands for i in a.indices]
        exprs += [e for c in st.constraints for e in (c.poly, c.bound)]
    for e in exprs:
        idx, sizes = iexpr_names(e)
        used |= idx | sizes
    return used


class Shapes:
    """The shapes of one program's tensors (and of the gradients added to it), with the size
    symbols unified so far."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.used = used_names(program)
        self.subst: dict[str, IExpr] = {}  # fresh size symbol -> what it was unified with
        self.fresh_sizes: set[str] = set()
        self.shapes: dict[str, Shape] = {}

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name

    def resolve(self, e: IExpr) -> IExpr:
        if isinstance(e, ISize) and e.name in self.subst:
            return self.resolve(self.subst[e.name])
        if isinstance(e, IBin):
            return IBin(e.op, self.resolve(e.a), self.resolve(e.b))
        if isinstance(e, INeg):
            return INeg(self.resolve(e.a))
        return e

    def shape(self, name: str) -> Shape:
        return tuple(self.resolve(d) for d in self.shapes[name])

    def unify(self, dims: Iterable[IExpr], what: str) -> IExpr:
        """One dimension of several tensors that must agree (or be 1, when `what` is broadcasting)."""
        found: list[IExpr] = []
        for d in dims:
            d = self.resolve(d)
            if d != ONE and d not in found:
                found.append(d)
        if not found:
            return ONE
        fixed = [d for d in found if not (isinstance(d, ISize) and d.name in self.fresh_sizes)]
        if len(fixed) > 1:
            names = " and ".join(str(f.name) if isinstance(f, ISize) else repr(f) for f in fixed)
            raise TilecError(f"grad: cannot tell the shape of {what}: its sizes {names} may differ; "
                             f"use one size symbol for dimensions that must agree")
        rep = fixed[0] if fixed else found[0]
        for d in found:
            if d != rep and isinstance(d, ISize):
                self.subst[d.name] = rep
        return rep

    def broadcast(self, shapes: list[Shape], what: str) -> Shape:
        rank = max((len(s) for s in shapes), default=0)
        dims = []
        for k in range(rank):
            column = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
            dims.append(self.unify(column, what))
        return tuple(dims)

    def eshape(self, e: EExpr, what: str) -> Shape:
        if isinstance(e, ETensor):
            return self.shape(e.name)
        if isinstance(e, (EConst, ESize)):
            return ()
        if isinstance(e, EUnary):
            return self.eshape(e.a, what)
        if isinstance(e, (EBinary, ECompare)):
            return self.broadcast([self.eshape(e.a, what), self.eshape(e.b, what)], what)
        if isinstance(e, ESelect):
            return self.broadcast([self.eshape(x, what) for x in (e.cond, e.a, e.b)], what)
        return self.broadcast([self.eshape(a, what) for a in e.args], what)

    def infer(self) -> tuple[TensorParam, ...]:
        """Give every tensor its shape; return the program's inputs declared with their dims."""
        params = []
        for p in self.program.params:
            dims = p.dims
            if dims is None:
                rank = next((len(a.indices) for st in self.program.statements if isinstance(st, Contraction)
                             for a in st.operands if a.tensor == p.name), None)
                if rank is None:
                    raise TilecError(f"grad: cannot tell the rank of input '{p.name}'; declare its dims, "
                                     f"e.g. function ({p.name}[N, M]) -> (...) {{ ... }}")
                dims = tuple(ISize(self.fresh(f"{p.name}_D{k}")) for k in range(rank))
                self.fresh_sizes |= {d.name for d in dims if isinstance(d, ISize)}
            self.shapes[p.name] = dims
            params.append(p.name)
        for st in self.program.statements:
            if st.output in self.shapes:
                raise TilecError(f"grad: tensor '{st.output}' is assigned more than once")
            if isinstance(st, Elementwise):
                self.shapes[st.output] = self.eshape(st.expr, f"'{st.output}'")
            elif isinstance(st, Intrinsic):
                self.shapes[st.output] = self.intrinsic_shape(st)
            elif st.sizes is not None:
                self.shapes[st.output] = st.sizes
            else:
                self.shapes[st.output] = tuple(self.contraction_dim(st, i) for i in st.indices)
        return tuple(self.param(name, self.shape(name)) for name in params)

    def intrinsic_shape(self, st: Intrinsic) -> Shape:
        """The result shape of a structural intrinsic (tilec.ir.intrinsics) from its arguments'."""
        args = [self.shape(t) for t in st.tensors]
        if st.func == "index":
            return args[0]
        if st.func == "shape":
            return (IConst(len(args[0])),)
        if st.func == "reshape":
            return st.params
        if st.func == "gather":
            return args[1] + args[0][1:]
        return args[2][:1] + args[0][len(args[1]):]  # scatter

    def param(self, name: str, shape: Shape) -> TensorParam:
        """An input declaration: dims that are expressions become fresh size symbols (bound by the argument)."""
        dims = tuple(d if isinstance(d, (ISize, IConst)) else ISize(self.fresh(f"{name}_D{k}"))
                     for k, d in enumerate(shape))
        return TensorParam(name, dims)

    def contraction_dim(self, st: Contraction, index: IExpr) -> IExpr:
        dims = [self.shapes[a.tensor][k] for a in st.operands for k, i in enumerate(a.indices)
                if isinstance(index, IVar) and i == index]
        if not dims:
            raise TilecError(f"grad: cannot tell the output sizes of `{st}`; give them explicitly "
                             f"({st.output}[indices: sizes])")
        return self.unify(dims, f"'{st.output}'")
