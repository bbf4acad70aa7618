"""When may a loop's iterations run at the same time? (the check behind `Parallel`)

A loop is safe to parallelise when no two iterations touch one element that one of
them writes. We prove it per store, conservatively:

* every store (to a buffer not allocated inside the loop) must be *injective* in the
  loop variable: one of its index dimensions is affine, ``c*p + sum(c_v * v) + rest``
  where `rest` is invariant in the loop and the inner loop variables `v` cannot make
  up for a step of `p` (``sum |c_v| * (extent_v - 1) < |c|``). A pair of dimensions
  ``X / n + a`` and ``X % n + b`` (what `Fuse` produces) counts as the dimension `X`;
* every load of a buffer the loop writes must read exactly an element that the same
  iteration writes (read-modify-write updates such as ``O[t] = O[t] + v``).

A store whose indices do not mention `p` at all is a reduction over `p` (the `k` loop
of a matmul updating its accumulator) and is refused with that reason. A loop holding WMMA
statements is refused too: their 16x16 windows are not analysed here.
"""

from __future__ import annotations

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.printer import format_expr
from tilec.ir.rewrite import extent_bound, mentions
from tilec.ir.visitor import walk

Affine = dict[object, int]  # atom (a variable name or an opaque expression) -> coefficient; 1 -> constant


def check_parallel(loop: L.For) -> None:
    """Raise ScheduleError unless the iterations of `loop` write disjoint elements."""
    p = loop.var
    nodes = list(walk(loop.body))
    wmma = [n for n in nodes if isinstance(n, L.WMMA_STMTS)]
    if wmma:
        raise ScheduleError(f"cannot parallelise loop {p}: it holds a warp-collective {type(wmma[0]).__name__} "
                            f"statement, whose 16x16 windows this check does not analyse; only a tensor-core "
                            f"template places (and binds) WMMA statements")
    inner = {f.var: f for f in nodes if isinstance(f, L.For)}
    local = {a.buffer.name for a in nodes if isinstance(a, L.Allocate)}
    stores = [s for s in nodes if isinstance(s, L.Store) and s.buffer not in local]
    for s in stores:
        where = f"{s.buffer}[{', '.join(format_expr(i) for i in s.indices)}]"
        if not mentions(s.indices, {p}):
            raise ScheduleError(f"cannot parallelise loop {p}: it is a reduction loop, every iteration updates {where} "
                                f"(the element does not depend on {p}); parallelise an outer loop instead")
        if not _injective(s.indices, p, inner):
            raise ScheduleError(f"cannot parallelise loop {p}: different iterations may write the same element "
                                f"{where}; parallelise a loop that indexes the output directly")
    written: dict[str, set[tuple[L.Expr, ...]]] = {}
    for s in stores:
        written.setdefault(s.buffer, set()).add(s.indices)
    for ld in nodes:
        if isinstance(ld, L.Load) and ld.buffer in written and ld.indices not in written[ld.buffer]:
            where = f"{ld.buffer}[{', '.join(format_expr(i) for i in ld.indices)}]"
            raise ScheduleError(f"cannot parallelise loop {p}: it reads {where}, which other iterations may write")


def _injective(indices: tuple[L.Expr, ...], p: str, inner: dict[str, L.For]) -> bool:
    varying = {p, *inner}
    dims = _merge_div_mod([_merge_within(affine(i)) for i in indices], varying)
    for form in dims:
        if form is None or form.get(p, 0) == 0:
            continue
        slack = 0
        ok = True
        for atom, c in form.items():
            if atom == p or atom == 1 or c == 0:
                continue
            if isinstance(atom, str) and atom in inner:
                bound = extent_bound(inner[atom])
                if bound is None:
                    ok = False
                    break
                slack += abs(c) * max(bound - 1, 0)
            elif mentions(atom, varying):
                ok = False
                break
        if ok and slack < abs(form[p]):
            return True
    return False


def affine(e: L.Expr) -> Affine | None:
    """`e` as an affine form over variables and opaque sub-expressions (div, mod, ...)."""
    if isinstance(e, L.Const):
        return {1: int(e.value)}
    if isinstance(e, L.Var):
        return {e.name: 1}
    if isinstance(e, L.Bin) and e.op in ("add", "sub"):
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if isinstance(e, L.Bin) and e.op == "mul":
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        if set(a) == {1}:
            a, b = b, a
        if set(b) != {1}:
            return {e: 1}
        return {k: v * b[1] for k, v in a.items()}
    return {e: 1}


def _merge_within(form: Affine | None) -> Affine | None:
    """``c*n*(X / n) + c*(X % n)`` is ``c*X`` (what splitting a fused loop produces)."""
    if form is None:
        return None
    for atom, c in list(form.items()):
        if not (isinstance(atom, L.Bin) and atom.op == "div" and isinstance(atom.b, L.Const) and atom.b.value > 0):
            continue
        n = int(atom.b.value)
        rem = L.Bin("mod", atom.a, atom.b)
        x = affine(atom.a)
        if c % n or form.get(rem, 0) != c // n or x is None:
            continue
        out = {k: v for k, v in form.items() if k not in (atom, rem)}
        for k, v in x.items():
            out[k] = out.get(k, 0) + v * (c // n)
        return _merge_within(out)
    return form


def _merge_div_mod(dims: list[Affine | None], varying: set[str]) -> list[Affine | None]:
    """Replace a pair of dimensions ``X / n + a``, ``X % n + b`` (a, b invariant) by ``X``."""
    changed = True
    while changed:
        changed = False
        for i, di in enumerate(dims):
            x = _single_atom(di, "div", varying)
            if x is None:
                continue
            for j, dj in enumerate(dims):
                y = _single_atom(dj, "mod", varying)
                if y is not None and (y.a, y.b) == (x.a, x.b) and isinstance(x.b, L.Const) and x.b.value > 0:
                    merged = affine(x.a)
                    dims = [d for k, d in enumerate(dims) if k not in (i, j)] + [merged]
                    changed = True
                    break
            if changed:
                break
    return dims


def _single_atom(form: Affine | None, op: str, varying: set[str]) -> L.Bin | None:
    """The `op` atom of `form` when it is the form's only varying part, with coefficient 1."""
    if form is None:
        return None
    found = None
    for atom, c in form.items():
        if atom == 1 or c == 0:
            continue
        if isinstance(atom, L.Bin) and atom.op == op and c == 1 and found is None:
            found = atom
        elif mentions(atom if not isinstance(atom, str) else L.Var(atom), varying):
            return None
    return found


__all__ = ["check_parallel", "affine"]
