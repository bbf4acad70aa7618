"""Reverse-mode automatic differentiation: a Tile program in, its gradient program out.

`derive(program, wrt)` needs a checked tensor-IR program; it returns a program whose inputs
are the forward inputs followed by one output gradient ``D<Output>`` per forward output and
whose outputs are ``D<Name>`` for each name in `wrt`. The derived program recomputes the
forward statements first, then runs the backward statements (PlaidML's rules):

- ``O[o] = +(A[a] * B[b])`` gives ``DA[a: dims(A)] = +(DO[o] * B[b])`` with the constraints
  carried over (the operand's index polynomials become the left-hand side);
- ``>`` / ``<`` give ``DI[i: dims(I)] = +(I[i] == O[o] ? DO[o])``: tied maxima all receive the
  gradient, as in PlaidML;
- elementwise statements follow the chain rule; broadcasting is undone by a contraction that
  sums over the broadcast dimensions, ``DX[x: XD] = +(G[x + XD*k])`` (``k`` runs over the
  broadcast dimension only when ``XD`` is 1), and several uses of a tensor are added up;
- ``*`` aggregation and max/min over a combination of several tensors are refused
  ("not differentiable: ..."); ``==`` combinations and comparisons have zero gradient.

Every tensor needs a symbolic shape: inputs declared without dims get fresh size symbols
(``A_D0``, ...; their rank is read from a contraction access), and a contraction whose output
sizes cannot be read from its operands must state them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
import math

from tilec.errors import TilecError
from tilec.frontend import parse
from tilec.ir.copies import eliminate_copies
from tilec.ir.tensor import (Access, Constraint, Contraction, EBinary, ECall, ECompare, EConst, EExpr, Elementwise,
                             ESelect, ETensor, EUnary, IBin, IConst, IExpr, INeg, ISize, IVar, Program, Statement,
                             TensorParam, eexpr_tensors, iexpr_names)
from tilec.runtime.function import Function
from tilec.target import Target

Shape = tuple[IExpr, ...]
_ONE = IConst(1)


def derive(program: Program, wrt: Sequence[str], keep_copies: bool = False) -> Program:
    """The gradient program of `program` with respect to the inputs named in `wrt`, without the
    renaming copies the derivation leaves (`DX = DX_4`: each would be one more pass over memory)
    unless `keep_copies`."""
    derived = _Deriver(program).run(list(wrt))
    return derived if keep_copies else eliminate_copies(derived)


def _names(program: Program) -> set[str]:
    used = set(program.input_names) | set(program.outputs)
    exprs: list[IExpr] = [d for p in program.params for d in (p.dims or ())]
    for st in program.statements:
        used.add(st.output)
        if isinstance(st, Elementwise):
            used.update(eexpr_tensors(st.expr))
            continue
        used.update(a.tensor for a in st.operands)
        exprs += list(st.indices) + list(st.sizes or ()) + [i for a in st.operands for i in a.indices]
        exprs += [e for c in st.constraints for e in (c.poly, c.bound)]
        if st.default is not None:
            used.add(st.default)
    for e in exprs:
        idx, sizes = iexpr_names(e)
        used |= idx | sizes
    return used


def _add(terms: list[EExpr]) -> EExpr:
    total = terms[0]
    for t in terms[1:]:
        total = EBinary("+", total, t)
    return total


class _Deriver:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.used = _names(program)
        self.subst: dict[str, IExpr] = {}  # fresh size symbol -> what it was unified with
        self.fresh_sizes: set[str] = set()
        self.shapes: dict[str, Shape] = {}
        self.backward: list[Statement] = []
        self.contribs: dict[str, list[str]] = {}
        self.ones: dict[str, str] = {}
        self.needs: set[str] = set()

    # ------------------------------------------------------------ names and shapes

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
            if d != _ONE and d not in found:
                found.append(d)
        if not found:
            return _ONE
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
        if isinstance(e, EConst):
            return ()
        if isinstance(e, EUnary):
            return self.eshape(e.a, what)
        if isinstance(e, (EBinary, ECompare)):
            return self.broadcast([self.eshape(e.a, what), self.eshape(e.b, what)], what)
        if isinstance(e, ESelect):
            return self.broadcast([self.eshape(x, what) for x in (e.cond, e.a, e.b)], what)
        return self.broadcast([self.eshape(a, what) for a in e.args], what)

    def infer_shapes(self) -> tuple[TensorParam, ...]:
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
            elif st.sizes is not None:
                self.shapes[st.output] = st.sizes
            else:
                self.shapes[st.output] = tuple(self.contraction_dim(st, i) for i in st.indices)
        return tuple(self.param(name, self.shape(name)) for name in params)

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

    # ------------------------------------------------------------ the pass

    def run(self, wrt: list[str]) -> Program:
        for w in wrt:
            if w not in self.program.input_names:
                raise TilecError(f"grad: '{w}' is not an input of the program; its inputs are "
                                 f"{', '.join(self.program.input_names) or '(none)'}")
        params = self.infer_shapes()
        self.needs = set(wrt)
        for st in self.program.statements:
            if any(t in self.needs for t in self.reads(st)):
                self.needs.add(st.output)
        grad_params = []
        for out in self.program.outputs:
            given = self.fresh(f"D{out}")
            grad_params.append(self.param(given, self.shape(out)))
            self.contribs.setdefault(out, []).append(given)
        results = [self.fresh(f"D{w}") for w in wrt]
        for st in reversed(self.program.statements):
            g = self.total(st.output) if st.output in self.needs else None
            if g is None:
                continue
            if isinstance(st, Contraction):
                self.contraction(st, g)
            else:
                self.elementwise(st, g)
        for w, name in zip(wrt, results):
            terms: list[EExpr] = [ETensor(c) for c in self.contribs.get(w, [])]
            self.backward.append(Elementwise(name, _add(terms) if terms else EBinary("*", EConst(0), ETensor(w))))
        statements = _live(self.program.statements + tuple(self.backward), results)
        return Program(params + tuple(grad_params), tuple(results), statements)

    @staticmethod
    def reads(st: Statement) -> list[str]:
        if isinstance(st, Elementwise):
            return eexpr_tensors(st.expr)
        return [a.tensor for a in st.operands] + ([st.default] if st.default else [])

    def total(self, name: str) -> str | None:
        """The name of the whole gradient of `name` (its contributions added up), or None if it is zero."""
        terms = self.contribs.get(name, [])
        if len(terms) <= 1:
            return terms[0] if terms else None
        total = self.fresh(f"D{name}")
        self.backward.append(Elementwise(total, _add([ETensor(t) for t in terms])))
        return total

    def contribute(self, name: str, value: str, shape: Shape) -> None:
        """Record `value` (of `shape`, which broadcasts to `name`'s shape) as part of the gradient of `name`."""
        target = self.shape(name)
        if tuple(self.resolve(d) for d in shape) != target:
            value = self.unbroadcast(value, shape, target, name)
        self.contribs.setdefault(name, []).append(value)

    def unbroadcast(self, src: str, src_shape: Shape, dst: Shape, name: str) -> str:
        lead = len(src_shape) - len(dst)
        src_idx: list[IExpr] = [IVar(f"j{k}") for k in range(lead)]
        out_idx: list[IExpr] = []
        for k, d in enumerate(dst):
            x = IVar(f"x{k}")
            out_idx.append(x)
            if d == self.resolve(src_shape[lead + k]):
                src_idx.append(x)
            elif d == _ONE:
                src_idx.append(IVar(f"k{k}"))
            else:  # d is 1 or equals the source's size; k > 0 only fits in the first case
                src_idx.append(IBin("+", x, IBin("*", d, IVar(f"k{k}"))))
        out = self.fresh(f"D{name}_sum")
        self.backward.append(Contraction(out, tuple(out_idx), dst, "+", "single", (Access(src, tuple(src_idx)),)))
        return out

    def emit(self, statement: Statement, operand: str, shape: Shape) -> None:
        self.backward.append(statement)
        self.contribute(operand, statement.output, shape)

    def one(self, name: str) -> str:
        """A tensor of ones shaped like `name` (an access to it only keeps the tuple's bounds)."""
        if name not in self.ones:
            self.ones[name] = self.fresh(f"ONES_{name}")
            expr = EBinary("+", EBinary("*", ETensor(name), EConst(0)), EConst(1))
            self.backward.append(Elementwise(self.ones[name], expr))
        return self.ones[name]

    # ------------------------------------------------------------ contractions

    def contraction(self, st: Contraction, g: str) -> None:
        if st.agg == "*":
            raise TilecError(f"not differentiable: product aggregation in `{st}`; take the log and sum, "
                             f"or write the product with elementwise statements")
        grad_out = Access(g, st.indices)
        ops = st.operands
        if st.default is not None and st.default in self.needs:
            self.default(st, g)
        if st.combo == "eq":
            return  # 0 or 1: piecewise constant
        if st.agg in "><":
            if st.combo != "single":
                raise TilecError(f"not differentiable: max/min over a '{st.combo}' combination in `{st}`; "
                                 f"compute the combination in its own statement first")
            self.rule(st, 0, (ops[0], Access(st.output, st.indices), grad_out), "cond")
            return
        if st.combo == "single":
            self.rule(st, 0, (grad_out,), "single")
        elif st.combo == "mul":
            self.rule(st, 0, (grad_out, ops[1]), "mul")
            self.rule(st, 1, (grad_out, ops[0]), "mul")
        elif st.combo == "add":
            for k in (0, 1):
                other = ops[1 - k]
                self.rule(st, k, (grad_out, Access(self.one(other.tensor), other.indices)), "mul")
        else:  # cond: A == B ? C
            self.rule(st, 2, (ops[0], ops[1], grad_out), "cond")

    def rule(self, st: Contraction, k: int, operands: tuple[Access, ...], combo: str) -> None:
        """``D<operand k>[its indices: its dims] = +(operands)`` with the statement's constraints."""
        access = st.operands[k]
        if access.tensor not in self.needs:
            return
        shape = self.shape(access.tensor)
        out = self.fresh(f"D{access.tensor}_{len(self.backward)}")
        new = Contraction(out, access.indices, shape, "+", combo, operands, st.constraints, None, st.no_defract)
        grad = operands[combo_grad_position(combo)].tensor
        gathered = gather_form(new, grad)
        if gathered is new:  # still a scatter (a stride-2 conv's input gradient): try the phases
            split = polyphase_form(new, grad, self.fresh(f"{out}_phases"))
            if split is not None:
                self.backward.append(split[0])
                gathered = split[1]
        self.emit(gathered, access.tensor, shape)

    def default(self, st: Contraction, g: str) -> None:
        """The default tensor's gradient: the cells it initialises (and, under max/min, wins)."""
        assert st.default is not None
        expr: EExpr
        if st.agg == "+":
            expr = ETensor(g)
        elif st.agg == "=":
            mask = self.fresh(f"WRITTEN_{st.output}")
            ones = tuple(Access(self.one(a.tensor), a.indices) for a in st.operands)
            if st.combo == "cond":
                ones, combo = st.operands[:2] + ones[2:], "cond"
            elif len(ones) == 2:
                combo = "mul"
            else:
                combo = "single"
            self.backward.append(Contraction(mask, st.indices, self.shape(st.output), "=", combo, ones,
                                             st.constraints, None, st.no_defract))
            expr = ESelect(ECompare(">", ETensor(mask), EConst(0)), EConst(0), ETensor(g))
        else:
            expr = ESelect(ECompare("==", ETensor(st.default), ETensor(st.output)), ETensor(g), EConst(0))
        out = self.fresh(f"D{st.default}_{len(self.backward)}")
        self.emit(Elementwise(out, expr), st.default, self.shape(st.output))

    # ------------------------------------------------------------ elementwise statements

    def elementwise(self, st: Elementwise, g: str) -> None:
        found: dict[str, list[EExpr]] = {}
        self.back(st.expr, ETensor(g), found)
        for name, terms in found.items():
            out = self.fresh(f"D{name}_{len(self.backward)}")
            self.emit(Elementwise(out, _add(terms)), name, self.shape(st.output))

    def live(self, e: EExpr) -> bool:
        return any(t in self.needs for t in eexpr_tensors(e))

    def back(self, e: EExpr, g: EExpr, found: dict[str, list[EExpr]]) -> None:
        """Add to `found` the adjoint of every needed tensor in `e`, given the adjoint `g` of `e`."""
        if not self.live(e):
            return
        if isinstance(e, ETensor):
            found.setdefault(e.name, []).append(g)
        elif isinstance(e, EUnary):
            self.back(e.a, EUnary("-", g), found)
        elif isinstance(e, EBinary):
            a, b = e.a, e.b
            if e.op in "+-":
                self.back(a, g, found)
                self.back(b, g if e.op == "+" else EUnary("-", g), found)
            elif e.op == "*":
                self.back(a, EBinary("*", g, b), found)
                self.back(b, EBinary("*", g, a), found)
            else:
                self.back(a, EBinary("/", g, b), found)
                self.back(b, EUnary("-", EBinary("/", EBinary("*", g, a), EBinary("*", b, b))), found)
        elif isinstance(e, ESelect):
            self.back(e.a, ESelect(e.cond, g, EConst(0)), found)
            self.back(e.b, ESelect(e.cond, EConst(0), g), found)
        elif isinstance(e, ECall):
            for arg, adj in zip(e.args, _call_adjoints(e, g)):
                if adj is not None:
                    self.back(arg, adj, found)
        # ECompare and constants: zero gradient


def combo_grad_position(combo: str) -> int:
    """Where `rule` puts the output gradient among a derived contraction's operands."""
    return 2 if combo == "cond" else 0


def _live(statements: tuple[Statement, ...], results: list[str]) -> tuple[Statement, ...]:
    """`statements` without those whose output nothing needed reads (forward values a linear
    backward does not use, such as the conv's own output when only its inputs' gradients are asked)."""
    needed = set(results)
    keep: list[Statement] = []
    for st in reversed(statements):
        if st.output in needed:
            keep.append(st)
            needed |= set(_Deriver.reads(st))
    return tuple(reversed(keep))


# ------------------------------------------------------------ gather form

Linear = dict[tuple[str, tuple[str, ...]], Fraction]  # (index variable or "", size symbols) -> coefficient


def _linear(e: IExpr) -> Linear | None:
    """`e` as a sum of monomials (at most one index variable times size symbols), or None if it is
    not such a sum (a division by something other than a constant)."""
    if isinstance(e, IConst):
        return {("", ()): Fraction(e.value)} if e.value else {}
    if isinstance(e, ISize):
        return {("", (e.name,)): Fraction(1)}
    if isinstance(e, IVar):
        return {(e.name, ()): Fraction(1)}
    if isinstance(e, INeg):
        a = _linear(e.a)
        return None if a is None else {k: -c for k, c in a.items()}
    a, b = _linear(e.a), _linear(e.b)
    if a is None or b is None:
        return None
    if e.op in "+-":
        out = dict(a)
        for k, c in b.items():
            out[k] = out.get(k, Fraction(0)) + (c if e.op == "+" else -c)
        return {k: c for k, c in out.items() if c}
    if e.op == "/":
        if set(b) - {("", ())} or not b:
            return None
        d = b[("", ())]
        return {k: c / d for k, c in a.items()}
    # "*": at most one index variable per monomial
    out = {}
    for (va, sa), ca in a.items():
        for (vb, sb), cb in b.items():
            if va and vb:
                return None
            key = (va or vb, tuple(sorted(sa + sb)))
            out[key] = out.get(key, Fraction(0)) + ca * cb
    return {k: c for k, c in out.items() if c}


def _iexpr(form: Linear) -> IExpr:
    """The index polynomial of `form`: integer terms, divided once by the common denominator."""
    denom = math.lcm(*(c.denominator for c in form.values())) if form else 1
    total: IExpr | None = None
    for (var, sizes), coeff in form.items():
        n = int(coeff * denom)
        factors: list[IExpr] = [ISize(s) for s in sizes]
        factors += [IVar(var)] if var else []
        term: IExpr | None = None
        for f in factors:
            term = f if term is None else IBin("*", term, f)
        if term is None:
            term = IConst(abs(n))
        elif abs(n) != 1:
            term = IBin("*", IConst(abs(n)), term)
        if total is None:
            total = term if n > 0 else INeg(term)
        else:
            total = IBin("+" if n > 0 else "-", total, term)
    total = total if total is not None else IConst(0)
    return total if denom == 1 else IBin("/", total, IConst(denom))


def _substitute(e: IExpr, subst: dict[str, Linear]) -> IExpr:
    form = _linear(e)
    assert form is not None
    out: Linear = {}
    for (var, sizes), coeff in form.items():
        if var in subst:
            assert not sizes
            for k, c in subst[var].items():
                out[k] = out.get(k, Fraction(0)) + coeff * c
        else:
            out[(var, sizes)] = out.get((var, sizes), Fraction(0)) + coeff
    return _iexpr({k: c for k, c in out.items() if c})


def gather_form(st: Contraction, grad: str | None = None, fractional: bool = False) -> Contraction:
    """`st` with a direct left-hand side, when that is an exact rewrite (else `st` unchanged).

    Each left-hand index must be ``c*v + rest`` where the index variable `v` appears in no other
    left-hand index and `c` is a constant. Substituting ``v = (v' - rest) / c`` everywhere makes the
    index the lone variable ``v'`` (named `v` again, since the old `v` is gone). Tuples map one to one
    (an old tuple's `v` is an integer exactly where the new fractional index is), and every bound of
    the old tuple is kept by the accesses and constraints it moved to, so out-of-range tuples are
    still skipped. When `grad` (the output gradient) is given, `v` must be one of its index variables
    (they span the large ranges: the conv's spatial ones rather than its kernel offsets, whose
    gather would visit every output position per cell), unit coefficients first; a coefficient
    that is a size symbol (a symbolic stride) keeps the scatter form.

    Only unit coefficients are rewritten unless `fractional`: with ``c = 2`` (a stride-2 conv's
    input gradient) the gather has the fractional index ``(x - i + 1) / 2``, which is exact and
    matches the GEMM template, but the template then multiplies every tuple and discards 3 of 4
    (measured 28 ms against the scatter's 7 ms for 8x64x56x56, 3x3; a 1x1 stride-2 conv's 28 ms against
    polyphase_form's 14 ms), so such indices are left to polyphase_form. The result is the "transposed conv" the GEMM
    templates handle, instead of a scatter into the output.
    """
    maybe = [_linear(e) for e in st.indices]
    forms = [f for f in maybe if f is not None]
    if len(forms) != len(maybe) or st.agg != "+":
        return st
    lone = [next(iter(f))[0] for f in forms if len(f) == 1 and next(iter(f.items()))[1] == 1
            and not next(iter(f))[1]]
    if len(lone) == len(forms) and "" not in lone and len(set(lone)) == len(lone):
        return st  # already direct
    grad_vars = {v for a in st.operands if a.tensor == grad for i in a.indices for v in iexpr_names(i)[0]}
    subst: dict[str, Linear] = {}
    pinned: list[Constraint] = []  # a constant index k becomes a fresh variable u with u == k
    used = set(st.index_vars)
    for k, form in enumerate(forms):
        if not any(v for v, _ in form):
            u = next(f"u{n}" for n in range(len(used) + 1) if f"u{n}" not in used)
            used.add(u)
            subst[u] = {(u, ()): Fraction(1)}
            pinned.append(Constraint(_iexpr({(u, ()): Fraction(1), **{key: -c for key, c in form.items()}}), _ONE))
            continue
        others = {v for j, f in enumerate(forms) if j != k for (v, _) in f}
        best: tuple[int, str, Fraction] | None = None
        for (v, sizes), c in form.items():
            # a constant coefficient: v in one monomial only, not times a size symbol
            if not v or sizes or v in others or sum(key[0] == v for key in form) != 1:
                continue
            if grad is not None and v not in grad_vars and len(form) > 1:
                continue  # e.g. a kernel offset: its gather would loop over every output position
            if abs(c) != 1 and not fractional:
                continue  # a fractional gather wastes c - 1 of every c tuples: polyphase_form instead
            rank = 0 if abs(c) == 1 else 1
            if best is None or rank < best[0]:
                best = (rank, v, c)
        if best is None:
            return st
        _, v, c = best
        rest = {key: coeff for key, coeff in form.items() if key != (v, ())}
        subst[v] = {(v, ()): 1 / c, **{key: -coeff / c for key, coeff in rest.items()}}
    indices = tuple(IVar(v) for v in subst)
    operands = tuple(Access(a.tensor, tuple(_substitute(i, subst) for i in a.indices)) for a in st.operands)
    constraints = tuple(Constraint(_substitute(c.poly, subst), c.bound) for c in st.constraints) + tuple(pinned)
    return Contraction(st.output, indices, st.sizes, st.agg, st.combo, operands, constraints, st.default,
                       st.no_defract)


def polyphase_form(st: Contraction, grad: str, phases: str) -> tuple[Contraction, Contraction] | None:
    """`st` as a gather into a phase tensor `phases` and a scatter of it, when `st`'s left-hand side
    has strided indices ``c*x + i + k`` (None otherwise).

    Such an index (a stride-c conv's input gradient: ``DI[n, 2*x + i - 1, ...]``) keeps `st` a
    scatter, and its fractional gather would multiply c - 1 of every c tuples by nothing (see
    gather_form). Splitting the tap ``i = c*t + z`` by its phase z in [0, c) and writing
    ``x = u - t`` makes the index ``c*u + z + k``: for each phase, a plain gather over t in which
    no tuple is wasted. So

        phases[z, ..., u', ...] = +(operands with x -> u' + m - t, i -> c*t + z)   (direct: a batched GEMM)
        D[..., c*u' + z + k + c*m, ...] = +(phases[z, ..., u', ...])             (one pass over D)

    where m (the least u any tuple has) keeps u' >= 0. Requires: agg "+", every left-hand index a
    lone variable or such a strided form, c and k integer constants, x one of `grad`'s index
    variables and i not, each in this one left-hand index. The tuples map one to one, so the sum is
    exactly `st`'s (in another order)."""
    if st.agg != "+" or st.default is not None or st.sizes is None:
        return None
    forms = [_linear(e) for e in st.indices]
    if any(f is None for f in forms):
        return None
    grad_vars = {v for a in st.operands if a.tensor == grad for i in a.indices for v in iexpr_names(i)[0]}
    used = set(st.index_vars)

    def fresh(base: str) -> str:
        name = next(f"{base}{n}" for n in range(len(used) + 1) if f"{base}{n}" not in used)
        used.add(name)
        return name

    subst: dict[str, Linear] = {}
    phase_vars: list[str] = []
    phase_sizes: list[IExpr] = []
    dims: list[IExpr] = []  # the phase tensor's other indices
    sizes: list[IExpr] = []
    lhs: list[IExpr] = []
    counts: dict[str, int] = {}
    for f in forms:
        assert f is not None
        for v, _ in f:
            counts[v] = counts.get(v, 0) + 1
    for e, f, size in zip(st.indices, forms, st.sizes):
        assert f is not None
        if len(f) == 1 and next(iter(f.items()))[1] == 1 and next(iter(f))[0] and not next(iter(f))[1]:
            dims.append(e)
            sizes.append(size)
            lhs.append(e)
            continue
        terms = {v: c for (v, sz), c in f.items() if v and not sz}
        const = f.get(("", ()), Fraction(0))
        if len(terms) == 1 and len(f) == 1 + (("", ()) in f) and const.denominator == 1:  # c*x + k, no tap
            (x, c_x), = terms.items()
            if c_x.denominator != 1 or c_x < 2 or x not in grad_vars or counts[x] != 1:
                return None
            c, k, u = int(c_x), int(const), fresh("u")
            m = -(k // c)  # the least x whose index c*x + k is >= 0
            subst[x] = {(u, ()): Fraction(1), ("", ()): Fraction(m)} if m else {(u, ()): Fraction(1)}
            shift = k + c * m
            dims.append(IVar(u))
            sizes.append(_strided_extent(size, shift, c))
            lhs.append(_iexpr({(u, ()): Fraction(c), **({("", ()): Fraction(shift)} if shift else {})}))
            continue
        if len(terms) != 2 or len(f) != 2 + (("", ()) in f) or const.denominator != 1:
            return None
        strided = [v for v, c in terms.items() if c.denominator == 1 and c >= 2 and v in grad_vars]
        taps = [v for v, c in terms.items() if c == 1 and v not in grad_vars]
        if len(strided) != 1 or len(taps) != 1 or counts[strided[0]] != 1 or counts[taps[0]] != 1:
            return None
        x, i, c, k = strided[0], taps[0], int(terms[strided[0]]), int(const)
        t, z, u = fresh("t"), fresh("z"), fresh("u")
        m = -((c - 1 + k) // c)  # ceil((1 - c - k) / c): the least u of any in-range tuple
        subst[i] = {(t, ()): Fraction(c), (z, ()): Fraction(1)}
        subst[x] = {(u, ()): Fraction(1), (t, ()): Fraction(-1), ("", ()): Fraction(m)} if m else \
            {(u, ()): Fraction(1), (t, ()): Fraction(-1)}
        shift = k + c * m  # index = c*u' + z + shift
        phase_vars.append(z)
        phase_sizes.append(IConst(c))
        dims.append(IVar(u))
        sizes.append(_strided_extent(size, shift, c))
        lhs.append(_iexpr({(u, ()): Fraction(c), (z, ()): Fraction(1), **({("", ()): Fraction(shift)} if shift else {})}))
    if not subst:
        return None
    operands = tuple(Access(a.tensor, tuple(_substitute(e, subst) for e in a.indices)) for a in st.operands)
    constraints = tuple(Constraint(_substitute(c.poly, subst), c.bound) for c in st.constraints)
    phase_indices = tuple(IVar(z) for z in phase_vars) + tuple(dims)
    gather = Contraction(phases, phase_indices, tuple(phase_sizes) + tuple(sizes), "+", st.combo, operands,
                         constraints, None, st.no_defract)
    scatter = Contraction(st.output, tuple(lhs), st.sizes, "+", "single", (Access(phases, phase_indices),), (),
                          None, st.no_defract)
    return gather, scatter


def _strided_extent(size: IExpr, shift: int, c: int) -> IExpr:
    """How many u >= 0 have c*u + shift < size: (size - 1 - shift) / c + 1."""
    top = IBin("-", size, IConst(1 + shift)) if 1 + shift > 0 else \
        IBin("+", size, IConst(-(1 + shift))) if 1 + shift < 0 else size
    return IBin("+", IBin("/", top, IConst(c)), _ONE)


def _call_adjoints(e: ECall, g: EExpr) -> list[EExpr | None]:
    """The adjoint of each argument of a builtin call, given the adjoint `g` of the call."""
    a = e.args[0]

    def mul(*xs: EExpr) -> EExpr:
        out = g
        for x in xs:
            out = EBinary("*", out, x)
        return out

    def sub(x: EExpr, y: EExpr) -> EExpr:
        return EBinary("-", x, y)

    zero, one = EConst(0), EConst(1)
    f = e.func
    if f == "exp":
        return [mul(e)]
    if f == "log":
        return [EBinary("/", g, a)]
    if f == "sqrt":
        return [EBinary("/", mul(EConst(0.5)), e)]
    if f == "tanh":
        return [mul(sub(one, EBinary("*", e, e)))]
    if f == "sigmoid":
        return [mul(e, sub(one, e))]
    if f == "sin":
        return [mul(ECall("cos", (a,)))]
    if f == "cos":
        return [EUnary("-", mul(ECall("sin", (a,))))]
    if f == "erf":
        return [mul(EConst(1.1283791670955126), ECall("exp", (EUnary("-", EBinary("*", a, a)),)))]
    if f in ("floor", "ceil"):
        return [None]
    if f == "abs":
        return [ESelect(ECompare(">", a, zero), g, ESelect(ECompare("<", a, zero), EUnary("-", g), zero))]
    if f == "relu":
        return [ESelect(ECompare(">", a, zero), g, zero)]
    b = e.args[1]
    if f == "pow":
        da = mul(b, ECall("pow", (a, sub(b, one))))
        db = ESelect(ECompare(">", a, zero), mul(e, ECall("log", (a,))), zero)
        return [da, db]
    if f in ("max", "min"):  # ties go to the first argument
        first = ECompare(">=" if f == "max" else "<=", a, b)
        return [ESelect(first, g, zero), ESelect(first, zero, g)]
    raise TilecError(f"not differentiable: builtin '{f}' has no derivative rule")


def grad(source: str, wrt: "str | Sequence[str]", target: "str | Target" = "llvm", **sizes: int) -> Function:
    """Compile the gradient of Tile `source` with respect to the inputs in `wrt`.

    The returned Function takes the forward inputs followed by one gradient per forward output
    (``D<Output>``, shaped like that output) and returns ``D<Name>`` for each name in `wrt`, in
    order; its `source` is the derived Tile program.
    """
    names = [wrt] if isinstance(wrt, str) else list(wrt)
    program = parse(source, sizes)
    return Function(str(derive(program, names)), target, **sizes)
