"""How much work one iteration of a parallel loop does, estimated at compile time.

The runtime (tilec.codegen.llvm.runtime) runs a parallel loop on the calling thread when
iterations x this estimate is below what a parallel region costs on the machine, measured once per
process in the same units (its calibration loop: one unit is a load, a multiply-add and a store).

Units: a store counts 1 plus one per operation and load in its value (index arithmetic is not
counted); a loop multiplies its body by its trip count, a `vectorized` one divides it by the
vector lanes of the widest value type it stores; an `if` counts its condition plus its costlier
branch. A trip count that is not a constant is bounded where the bounds differ by a constant or
by a `min` with one; where no bound is found the estimate is unknown (None), and the loop always
runs in parallel. The estimate errs high for register-blocked vector code (a GEMM micro-kernel
keeps its accumulators in registers, yet each of its multiply-adds counts a load, an operation
and a store): such loops run in parallel somewhat below where it pays, as every loop did before.

The same estimate of a whole kernel decides whether LLVM unrolls its loops (`unrolling_pays`): O3's
unroller fully unrolls loops of small constant trip counts, nested and after vectorisation, so a
small kernel's object code grows several-fold and its compile time with it (a max_pool2d with
indices on a 2 x 3 x 17 x 19 input: 1.6 s at O3, 0.14 s without unrolling), while the kernel runs
in microseconds either way. Large kernels keep it: it is worth 5-10% to some of them (max pooling,
SiLU, attention on Zen 3).

Requires: loop IR. Guarantees: `iteration_work` is None or a non-negative int below MAX_WORK.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from tilec.ir import loop as L
from tilec.ir.visitor import walk

MAX_WORK = 1 << 31  # larger estimates are "unknown": parallel in any case, and iterations x work fits i64
UNROLL_MIN_WORK = 1 << 18  # units of work below which a kernel runs in well under a millisecond on any core


def iteration_work(body: L.Stmt, vector_bytes: int) -> int | None:
    """The estimated work units of one execution of `body` (see the module doc), or None."""
    work = _stmt_work(body, vector_bytes)
    return work if work is not None and work < MAX_WORK else None


def unrolling_pays(func: L.PrimFunc, vector_bytes: int) -> bool:
    """Whether LLVM's own loop unrolling is worth its compile time for kernel `func`: unless the
    whole kernel's estimated work is known and below UNROLL_MIN_WORK (see the module doc)."""
    work = iteration_work(func.body, vector_bytes)
    return work is None or work >= UNROLL_MIN_WORK


def largest_parallel_work(body: L.Stmt, vector_bytes: int) -> int:
    """The estimated work of the largest parallel loop in `body` (one execution of it), -1 where
    one of them has no estimate, 0 where there is none: the runtime runs a kernel's small
    parallel loops where its large one runs (tilec.codegen.llvm.pool_ir's entry)."""
    largest = 0
    for s in walk(body):
        if isinstance(s, L.For) and s.kind == "parallel":
            work = _loop_work(s, vector_bytes)
            if work is None or work >= MAX_WORK:
                return -1
            largest = max(largest, work)
    return largest


def _stmt_work(s: L.Stmt, vector_bytes: int) -> int | None:
    if isinstance(s, L.Store):
        return 1 + _expr_work(s.value)
    if isinstance(s, L.Seq):
        return _sum(_stmt_work(x, vector_bytes) for x in s.stmts)
    if isinstance(s, L.Allocate):
        return _stmt_work(s.body, vector_bytes)
    if isinstance(s, L.Barrier):
        return 0
    if isinstance(s, L.If):
        then = _stmt_work(s.then, vector_bytes)
        other = 0 if s.orelse is None else _stmt_work(s.orelse, vector_bytes)
        return None if then is None or other is None else _expr_work(s.cond) + max(then, other)
    if isinstance(s, L.For):
        return _loop_work(s, vector_bytes)
    return None  # statements the CPU emitter does not know (GPU matrix ops) never reach it


def _loop_work(s: L.For, vector_bytes: int) -> int | None:
    trips, body = trip_bound(s.begin, s.end), _stmt_work(s.body, vector_bytes)
    if trips is None or body is None:
        return None
    if s.kind == "vectorized":
        lanes = max(1, vector_bytes // _widest_store(s.body))
        trips = -(-trips // lanes)
    work = trips * body
    return work if work < MAX_WORK else None


def _widest_store(s: L.Stmt) -> int:
    """The largest item size (bytes) of a value stored in `s` (1 when it stores nothing)."""
    sizes = [np.dtype(n.value.dtype).itemsize for n in walk(s) if isinstance(n, L.Store)]
    return max(sizes, default=1)


def _expr_work(e: L.Expr) -> int:
    """Operations and loads in `e`, not counting the index arithmetic inside loads."""
    if isinstance(e, L.Load):
        return 1
    children: tuple[L.Expr, ...]
    if isinstance(e, L.Bin):
        children = (e.a, e.b)
    elif isinstance(e, L.Cmp):
        children = (e.a, e.b)
    elif isinstance(e, L.Select):
        children = (e.cond, e.a, e.b)
    elif isinstance(e, (L.Cast, L.Not)):
        children = (e.a,)
    elif isinstance(e, L.Call):
        children = e.args
    else:
        return 0
    return 1 + sum(_expr_work(c) for c in children)


def trip_bound(begin: L.Expr, end: L.Expr) -> int | None:
    """An upper bound of end - begin when one is evident (both constant, or end = begin + c, or
    end = min(x, y) (+ c) with a bound for x or y, or begin = max(a, b) with one for a or b (a
    guard's clipped window), or [0, x / c) with a bound for [0, x), or the remainder
    [(x / c) * c, x) of blocks of c), else None."""
    difference = _constant_difference(end, begin)
    if difference is not None:
        return max(0, difference)
    if _is_int(begin, 0) and isinstance(end, L.Bin) and end.op == "div" and _positive_const(end.b):
        whole = trip_bound(begin, end.a)
        return None if whole is None else whole // int(end.b.value)  # type: ignore[union-attr]
    if isinstance(begin, L.Bin) and begin.op == "mul" and isinstance(begin.a, L.Bin) and begin.a.op == "div" \
            and begin.a.a == end and _positive_const(begin.b) and begin.a.b == begin.b:
        return int(begin.b.value) - 1  # type: ignore[union-attr]
    if isinstance(end, L.Bin) and end.op == "add" and isinstance(end.b, L.Const) and isinstance(end.a, L.Bin) \
            and end.a.op == "min":  # min(x, y) + c = min(x + c, y + c)
        end = L.Bin("min", L.Bin("add", end.a.a, end.b), L.Bin("add", end.a.b, end.b))
    alternatives = [(begin, end.a), (begin, end.b)] if isinstance(end, L.Bin) and end.op == "min" else \
        [(begin.a, end), (begin.b, end)] if isinstance(begin, L.Bin) and begin.op == "max" else []
    bounds = [b for b in (trip_bound(*pair) for pair in alternatives) if b is not None]
    return min(bounds) if bounds else None


def _is_int(e: L.Expr, value: int) -> bool:
    return isinstance(e, L.Const) and not isinstance(e.value, bool) and e.value == value


def _positive_const(e: L.Expr) -> bool:
    return isinstance(e, L.Const) and isinstance(e.value, (int, np.integer)) and not isinstance(e.value, bool) and e.value > 0


def _constant_difference(a: L.Expr, b: L.Expr) -> int | None:
    """a - b when both are linear in the same variables with the same coefficients, else None."""
    la, lb = _linear(a), _linear(b)
    if la is None or lb is None:
        return None
    terms = {v: la[0].get(v, 0) - lb[0].get(v, 0) for v in set(la[0]) | set(lb[0])}
    return la[1] - lb[1] if all(c == 0 for c in terms.values()) else None


def _folded(e: L.Expr) -> int | None:
    """The value of integer expression `e` when it has no variables (a template's tile arithmetic,
    ``(3 - (3 / 16) * 16) / 4``, reaches LLVM unfolded), else None."""
    if isinstance(e, L.Const):
        return int(e.value) if isinstance(e.value, (int, np.integer)) and not isinstance(e.value, bool) else None
    if not isinstance(e, L.Bin) or e.op not in ("add", "sub", "mul", "div", "min", "max"):
        return None
    a, b = _folded(e.a), _folded(e.b)
    if a is None or b is None or (e.op == "div" and (a < 0 or b <= 0)):  # (the one division both semantics agree on)
        return None
    return {"add": a + b, "sub": a - b, "mul": a * b, "div": a // max(b, 1), "min": min(a, b), "max": max(a, b)}[e.op]


def _linear(e: L.Expr) -> tuple[dict[str, int], int] | None:
    """e as ({variable: coefficient}, constant) when e is an integer sum of variables times constants."""
    value = _folded(e)
    if value is not None:
        return {}, value
    if isinstance(e, L.Var):
        return {e.name: 1}, 0
    if not isinstance(e, L.Bin) or e.op not in ("add", "sub", "mul"):
        return None
    a, b = _linear(e.a), _linear(e.b)
    if a is None or b is None:
        return None
    if e.op == "mul":
        if a[0] and b[0]:
            return None
        (terms, k), c = (a, b[1]) if not b[0] else (b, a[1])
        return {v: x * c for v, x in terms.items()}, k * c
    sign = 1 if e.op == "add" else -1
    terms = dict(a[0])
    for v, x in b[0].items():
        terms[v] = terms.get(v, 0) + sign * x
    return terms, a[1] + sign * b[1]


def _sum(values: Iterable[int | None]) -> int | None:
    total = 0
    for v in values:
        if v is None:
            return None
        total += v
    return total


__all__ = ["MAX_WORK", "iteration_work", "largest_parallel_work", "trip_bound"]
