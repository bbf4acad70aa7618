"""Apply a schedule to the loop IR: ``apply_schedule(func, schedule) -> PrimFunc``.

Requires: a PrimFunc from :func:`tilec.ir.lower.lower` (or an earlier schedule).
Guarantees: a PrimFunc that computes exactly what the input computes (up to the
order of floating-point reductions), or a ScheduleError saying which primitive is
illegal and why. Pure: the input is never modified; unchanged subtrees are shared.

Loops are named as :mod:`tilec.schedule.primitives.records` describes (variable name plus the
index of the top-level nest). Each primitive is one function below.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Collection, Iterable

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.legality import check_parallel
from tilec.schedule.primitives.loops import check_fresh, describe, find_loop, replace_loop
from tilec.schedule.primitives.cache import cache_read, cache_write
from tilec.schedule.primitives.compute_at import compute_at
from tilec.schedule.primitives.inline import compute_inline
from tilec.schedule.primitives.partition import partition
from tilec.schedule.primitives.bind import bind
from tilec.schedule.primitives.records import (UNROLL_LIMIT, Bind, CacheRead, CacheWrite, ComputeAt, ComputeInline, Fuse, Parallel, Partition,
                                       Primitive, Reorder, Schedule, Split, Tensorize, Unroll, Vectorize,
                                       is_gpu_only)
from tilec.schedule.primitives.shared import cache_read_shared
from tilec.schedule.primitives.tensorize import tensorize
from tilec.ir.rewrite import constant_extent, extent, floordiv, loops_in, mentions, minimum, substitute
from tilec.target import GpuInfo


def apply_schedule(func: L.PrimFunc, schedule: "Schedule | Iterable[Primitive] | None",
                   outputs: "Collection[str] | None" = None, gpu: GpuInfo | None = None) -> L.PrimFunc:
    """`outputs` names the program's output tensors; `ComputeInline` refuses to run without it
    (a PrimFunc alone cannot tell an output from a temporary). `gpu`: the target's GPU, where the
    GPU primitives (`Bind`, shared `CacheRead`) are allowed."""
    for p in (schedule or ()):
        func = apply_primitive(func, p, outputs, gpu)
    return func


def apply_primitive(func: L.PrimFunc, p: Primitive, outputs: "Collection[str] | None" = None,
                    gpu: GpuInfo | None = None) -> L.PrimFunc:
    if gpu is None and is_gpu_only(p):
        raise ScheduleError(f"{describe(p)}: a GPU-only primitive; compile for target 'cuda' or 'cuda-sim' "
                            f"to use it (this target is a CPU)")
    rule = _RULES.get(type(p))
    whole = _FUNC_RULES.get(type(p))
    if isinstance(p, CacheRead) and p.scope == "shared" and gpu is not None:
        whole = _in_nest(lambda p, nest, func: cache_read_shared(p, nest, func, gpu.shared_bytes))
    if rule is None and whole is None:
        raise ScheduleError(f"not a schedule primitive: {p!r}")
    nests = _nests(func.body)
    if not isinstance(p.nest, int) or not 0 <= p.nest < len(nests):
        raise ScheduleError(f"{describe(p)}: no loop nest {p.nest}; the program has {len(nests)} "
                            f"(numbered 0 to {len(nests) - 1})")
    if whole is not None:
        stmts = whole(p, nests, func, outputs)
        if all(a is b for a, b in zip(stmts, nests)):
            return func
    else:
        new_nest = rule(p, nests[p.nest])  # type: ignore[misc]
        if new_nest is nests[p.nest]:
            return func
        stmts = nests[:p.nest] + (new_nest,) + nests[p.nest + 1:]
    return replace(func, body=stmts[0] if len(stmts) == 1 else L.Seq(stmts))


def _nests(body: L.Stmt) -> tuple[L.Stmt, ...]:
    return body.stmts if isinstance(body, L.Seq) else (body,)


# ------------------------------------------------------------------ primitives


def _not_bound(p: Primitive, loop: L.For) -> None:
    if loop.kind in L.GPU_AXES:
        raise ScheduleError(f"{describe(p)}: loop {loop.var} is bound to {loop.kind}; split, fuse and reorder "
                            f"loops before binding them")


def split(p: Split, nest: L.Stmt) -> L.Stmt:
    loop, _ = find_loop(nest, p.loop, p)
    _not_bound(p, loop)
    if not isinstance(p.factor, int) or p.factor < 1:
        raise ScheduleError(f"{describe(p)}: the factor must be a positive integer")
    outer_name, inner_name = p.outputs
    check_fresh(nest, (outer_name, inner_name), p)
    f = p.factor
    n = extent(loop)
    outer, inner = L.Var(outer_name), L.Var(inner_name)
    n_outer = floordiv(L.add(n, L.const(f - 1)), f)
    known = constant_extent(loop)
    if known is not None and known % f == 0:
        inner_end: L.Expr = L.const(f)
    else:  # the last outer iteration runs the remainder; clamped with min, not a branch
        inner_end = minimum(L.const(f), L.sub(n, L.mul(outer, L.const(f))))
    value = L.add(loop.begin, L.add(L.mul(outer, L.const(f)), inner))
    body = substitute(loop.body, {loop.var: value})
    inner_kind = loop.kind if loop.kind in ("vectorized", "unrolled") and isinstance(inner_end, L.Const) else "serial"
    outer_kind = "parallel" if loop.kind == "parallel" else "serial"
    new = L.For(outer_name, L.const(0), n_outer, L.For(inner_name, L.const(0), inner_end, body, inner_kind), outer_kind)
    return replace_loop(nest, loop, new)


def reorder(p: Reorder, nest: L.Stmt) -> L.Stmt:
    names = tuple(p.loops)
    if len(set(names)) != len(names):
        raise ScheduleError(f"{describe(p)}: a loop is named twice")
    if len(names) < 2:
        return nest
    located = {n: find_loop(nest, n, p) for n in names}
    chain = sorted(names, key=lambda n: len(located[n][1]))
    for a, b in zip(chain, chain[1:]):
        if located[a][0] not in located[b][1]:
            raise ScheduleError(f"{describe(p)}: loops {a} and {b} are not nested one inside the other")
    for n in names:
        _not_bound(p, located[n][0])
    band_top = located[chain[0]][0]
    band: list[L.For] = [band_top]
    while band[-1].var != chain[-1]:
        body = band[-1].body
        if not isinstance(body, L.For):
            raise ScheduleError(f"{describe(p)}: reorder needs perfectly nested loops, but the body of loop "
                                f"{band[-1].var} is more than one loop (allocations, other statements or branches)")
        band.append(body)
    order = iter(names)
    new_band = [next(order) if f.var in names else f.var for f in band]
    by_name = {f.var: f for f in band}
    for depth, name in enumerate(new_band):
        inside = set(new_band[depth:])  # including itself
        loop = by_name[name]
        if mentions((loop.begin, loop.end), inside):
            raise ScheduleError(f"{describe(p)}: the bounds of loop {name} depend on a loop that would move inside it")
    stmt: L.Stmt = band[-1].body
    for name in reversed(new_band):
        stmt = replace(by_name[name], body=stmt)
    return replace_loop(nest, band_top, stmt)


def fuse(p: Fuse, nest: L.Stmt) -> L.Stmt:
    outer, _ = find_loop(nest, p.outer, p)
    inner, _ = find_loop(nest, p.inner, p)
    _not_bound(p, outer)
    _not_bound(p, inner)
    if outer.body is not inner:
        raise ScheduleError(f"{describe(p)}: fuse needs adjacent loops, loop {p.inner} must be the whole body "
                            f"of loop {p.outer}")
    if mentions((inner.begin, inner.end), {outer.var}):
        raise ScheduleError(f"{describe(p)}: the bounds of loop {p.inner} depend on {p.outer} (not a rectangle)")
    n = constant_extent(inner)
    if n is None:
        raise ScheduleError(f"{describe(p)}: the extent of loop {p.inner} is not a compile-time constant")
    check_fresh(nest, (p.output,), p)
    fused = L.Var(p.output)
    mapping = {outer.var: L.add(outer.begin, floordiv(fused, max(n, 1))),
               inner.var: L.add(inner.begin, L.Bin("mod", fused, L.const(n)) if n > 1 else L.const(0))}
    body = substitute(inner.body, mapping)
    new = L.For(p.output, L.const(0), L.mul(extent(outer), L.const(n)), body)
    return replace_loop(nest, outer, new)


def _set_kind(p: "Unroll | Vectorize | Parallel", nest: L.Stmt, kind: str,
              check: Callable[[L.For, list[L.For]], L.For]) -> L.Stmt:
    loop, outer = find_loop(nest, p.loop, p)
    if loop.kind != "serial":
        raise ScheduleError(f"{describe(p)}: loop {p.loop} is already {loop.kind}")
    return replace_loop(nest, loop, replace(check(loop, outer), kind=kind))


def unroll(p: Unroll, nest: L.Stmt) -> L.Stmt:
    def check(loop: L.For, outer: list[L.For]) -> L.For:
        n = constant_extent(loop)
        if n is None:
            raise ScheduleError(f"{describe(p)}: the extent of loop {p.loop} is not a compile-time constant; "
                                f"split it by a constant factor and unroll the inner loop")
        if n > UNROLL_LIMIT:
            raise ScheduleError(f"{describe(p)}: loop {p.loop} has {n} iterations, more than the unroll limit "
                                f"{UNROLL_LIMIT}; split it first")
        # normalise to [0, n) so the backend sees a constant trip count
        body = substitute(loop.body, {loop.var: L.add(loop.begin, L.Var(loop.var))})
        return replace(loop, begin=L.const(0), end=L.const(max(n, 0)), body=body)

    return _set_kind(p, nest, "unrolled", check)


def vectorize(p: Vectorize, nest: L.Stmt) -> L.Stmt:
    def check(loop: L.For, outer: list[L.For]) -> L.For:
        if constant_extent(loop) is None:
            raise ScheduleError(f"{describe(p)}: the extent of loop {p.loop} is not a compile-time constant; "
                                f"split it by a constant factor and vectorise the inner loop")
        return loop

    return _set_kind(p, nest, "vectorized", check)


def parallel(p: Parallel, nest: L.Stmt) -> L.Stmt:
    def check(loop: L.For, outer: list[L.For]) -> L.For:
        for f in outer:
            if f.kind == "parallel":
                raise ScheduleError(f"{describe(p)}: loop {p.loop} is nested inside parallel loop {f.var}; "
                                    f"only one level of parallel loops is supported")
        for f in loops_in(loop.body):
            if f.kind == "parallel":
                raise ScheduleError(f"{describe(p)}: loop {p.loop} contains parallel loop {f.var}; "
                                    f"only one level of parallel loops is supported")
        try:
            check_parallel(loop)
        except ScheduleError as err:
            raise ScheduleError(f"{describe(p)}: {err}") from None
        return loop

    return _set_kind(p, nest, "parallel", check)


_RULES: dict[type, Callable] = {Split: split, Reorder: reorder, Fuse: fuse, Unroll: unroll, Vectorize: vectorize,
                                Parallel: parallel, Bind: bind}


def _in_nest(rule: Callable[..., L.Stmt]) -> Callable[..., tuple[L.Stmt, ...]]:
    """A rule on one nest (that also sees the function) as a rule on all nests."""
    def apply(p: Primitive, nests: tuple[L.Stmt, ...], func: L.PrimFunc, outputs: object) -> tuple[L.Stmt, ...]:
        return nests[:p.nest] + (rule(p, nests[p.nest], func),) + nests[p.nest + 1:]

    return apply


# rules that see the whole function: (primitive, nests, func, outputs) -> nests
_FUNC_RULES: dict[type, Callable[..., tuple[L.Stmt, ...]]] = {
    CacheWrite: _in_nest(cache_write), CacheRead: _in_nest(cache_read), Partition: _in_nest(partition),
    Tensorize: _in_nest(tensorize), ComputeInline: compute_inline, ComputeAt: compute_at}

__all__ = ["apply_schedule", "apply_primitive", "split", "reorder", "fuse", "unroll", "vectorize", "parallel"]
