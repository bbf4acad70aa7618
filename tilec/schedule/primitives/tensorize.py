"""`Tensorize`: mark a register block as a CPU micro-kernel (intrinsic "outer_product").

Requires: starting at the named loop, a perfect nest of two loops ``ii: jj:`` (or three,
``k: ii: jj:``) of constant extents whose body is the single update
``acc[.., ii, jj] = acc[.., ii, jj] + a * b`` where `a` does not depend on `jj`, `b` does
not depend on `ii` (either operand order), `jj` is the last index of acc with coefficient
1 and in no other index, and `k` (if present) indexes no cell of acc.

Guarantees: the same loops, with `ii` unrolled (normalised to start at 0) and `jj`
vectorized: the backend emits one broadcast of `a` and a vector FMA per row, an outer
product on ``extent(ii)`` vector accumulators.
"""

from __future__ import annotations

from dataclasses import replace

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.legality import affine
from tilec.schedule.primitives.loops import describe, find_loop, replace_loop
from tilec.schedule.primitives.records import UNROLL_LIMIT, Tensorize
from tilec.ir.rewrite import constant_extent, mentions, substitute

INTRINSICS = ("outer_product",)


def tensorize(p: Tensorize, nest: L.Stmt, func: L.PrimFunc) -> L.Stmt:
    what = describe(p)
    if p.intrinsic not in INTRINSICS:
        raise ScheduleError(f"{what}: unknown intrinsic {p.intrinsic!r}; intrinsics are {', '.join(INTRINSICS)}")
    loop, _ = find_loop(nest, p.loop, p)
    band = [loop]
    while isinstance(band[-1].body, L.For):
        band.append(band[-1].body)
    if len(band) not in (2, 3) or not isinstance(band[-1].body, L.Store):
        raise ScheduleError(f"{what}: an outer-product block is a perfect nest of 2 loops (ii, jj) or 3 (k, ii, jj) "
                            f"around one store; from loop {p.loop} there are {len(band)} perfectly nested loop(s) "
                            f"around a {type(band[-1].body).__name__}")
    for f in band:
        if constant_extent(f) is None:
            raise ScheduleError(f"{what}: the extent of loop {f.var} is not a compile-time constant; split it first")
        if f.kind != "serial":
            raise ScheduleError(f"{what}: loop {f.var} is already {f.kind}")
    ii, jj = band[-2], band[-1]
    n_ii = constant_extent(ii) or 0
    if n_ii > UNROLL_LIMIT:
        raise ScheduleError(f"{what}: loop {ii.var} has {n_ii} iterations, more than the unroll limit {UNROLL_LIMIT}")
    store = jj.body
    assert isinstance(store, L.Store)
    _check_update(store, ii.var, jj.var, band[0].var if len(band) == 3 else None, what)
    body = substitute(jj.body, {ii.var: L.add(ii.begin, L.Var(ii.var))})
    new_jj = replace(jj, body=body, kind="vectorized")
    new_ii = replace(ii, begin=L.const(0), end=L.const(n_ii), body=new_jj, kind="unrolled")
    return replace_loop(nest, ii, new_ii)


def _check_update(store: L.Store, ii: str, jj: str, k: str | None, what: str) -> None:
    v = store.value
    acc = L.Load(store.buffer, store.indices, v.dtype)
    shape = f"{store.buffer}[.., {ii}, {jj}] += a({ii}) * b({jj})"
    if not (isinstance(v, L.Bin) and v.op == "add" and acc in (v.a, v.b)):
        raise ScheduleError(f"{what}: the body is not an accumulation {shape}")
    prod = v.b if v.a == acc else v.a
    if not (isinstance(prod, L.Bin) and prod.op == "mul"):
        raise ScheduleError(f"{what}: the update of {store.buffer} does not add a product; need {shape}")
    x, y = prod.a, prod.b
    if mentions(x, {jj}) or mentions(y, {ii}):
        x, y = y, x
    if mentions(x, {jj}) or mentions(y, {ii}) or mentions((x, y), {store.buffer}):
        raise ScheduleError(f"{what}: the product is not an outer product: one factor must not depend on {jj} "
                            f"and the other not on {ii}; need {shape}")
    last = affine(store.indices[-1]) if store.indices else None
    if last is None or last.get(jj) != 1 or mentions(store.indices[:-1], {jj}):
        raise ScheduleError(f"{what}: {jj} must be the last index of {store.buffer} with coefficient 1 (contiguous "
                            f"vectors) and appear in no other index")
    if not mentions(store.indices, {ii}):
        raise ScheduleError(f"{what}: {store.buffer} is not indexed by {ii}; need {shape}")
    if k is not None and mentions(store.indices, {k}):
        raise ScheduleError(f"{what}: loop {k} indexes {store.buffer}; the outer loop of a block must be a reduction")


__all__ = ["tensorize", "INTRINSICS"]
