"""The implicit-GEMM template without packing A: the micro-kernel reads A in place.

Packing A (an implicit im2col for a convolution) pays off when each packed element is
reused across many column panels. With few panels (a convolution's output channels),
the copy costs more than it saves, so this variant broadcasts A straight from memory:

    [Apad = A with zero borders]                     # only if A's accesses need padding
    for outer...:
      Bp[jr, kk, jj] = B(kk, col) or 0               # pack B once: all of K
      parallel over row tiles:
        for jr in N / NR: for each row tile:
          acc[MR, NR] = 0
          for red...:                                # the original reduction loops: affine, no div/mod
            for ii unrolled MR: for jj vectorized NR:
              acc[ii, jj] += A(row_ii, red) * Bp[jr, kk(red), jj]
          C tile = epilogue(acc)

Row indices of a tile's last rows are clamped into range (their results are never
stored), so the kernel needs no branch. A's bound guards become a zero-padded copy;
any other guard on A (a constraint, a divisibility) makes this variant inapplicable.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from tilec.ir import loop as L
from tilec.ir.affine import INF, IntAffine
from tilec.ir.bounds import BoundAccess, BoundContraction, BoundProgram, Condition
from tilec.ir.lower import affine_expr, index_expr, zero_fill
from tilec.schedule.cpu.copy_fold import Copy
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.schedule.cpu.gemm.packed import (GemmKnobs, GemmPlan, _guarded_store, decompose, plan_threads,
                                         thread_share, threads_loop)
from tilec.schedule.cpu.permute import PermutePlan, nest, parallel_outermost
from tilec.ir.rewrite import substitute_expr
from tilec.target import Target


Pads = tuple[tuple[int, int], ...]  # per dimension of a tensor, its zero border (before, after)
PARALLEL_MIN_CELLS = 1 << 15  # a zero-padded copy this big fills with the cores in parallel


def access_padding(access: BoundAccess, guards: tuple[Condition, ...], box: Mapping[str, tuple[int, int]],
                   shape: tuple[int, ...]) -> Pads | None:
    """Per dimension of `access`'s tensor, the zero border that makes every guard on it redundant
    when its variables range over `box`; None when a guard is not one of the tensor's own bounds,
    or an index is fractional."""
    if any(e.divisor != 1 for e in access.indices):
        return None
    for g in guards:
        if not any(g.expr == e and g.lo in (0, -INF) and g.hi in (n - 1, INF)
                   for e, n in zip(access.indices, shape)):
            return None
    pads = []
    for e, n in zip(access.indices, shape):
        lo, hi = e.interval(box)
        pads.append((max(0, int(-lo)), max(0, int(hi) - (n - 1))))
    return tuple(pads)


def padding(plan: GemmPlan, bp: BoundProgram) -> Pads | None:
    """A's zero borders for reading it in place (see access_padding)."""
    box = {v: (lo, hi) for v, lo, hi in plan.outer + plan.rows + plan.red}
    return access_padding(plan.a, plan.a_guards, box, bp.shapes[plan.a.tensor])


def padded_operand(name: str, tensor: str, bp: BoundProgram, pads: Pads, copies: "Mapping[str, Copy] | None",
                   target: Target) -> tuple[L.Stmt, L.Buffer]:
    """The nest filling buffer `name` with `tensor` and zero borders `pads`, and the buffer: gathered
    straight from the source when `tensor` is a folded layout copy (tilec.schedule.cpu.copy_fold)."""
    through = (copies or {}).get(tensor)
    if through is not None:
        return _padded_gather(name, through, bp.shapes[tensor], pads, target.cores)
    return _padded_copy(name, tensor, bp.shapes[tensor], bp.dtypes[tensor], pads, target.cores)


def applicable(plan: GemmPlan, bp: BoundProgram) -> bool:
    return padding(plan, bp) is not None


def _padded_copy(name: str, source: str, shape: tuple[int, ...], dtype: str,
                 pads: tuple[tuple[int, int], ...], cores: int) -> tuple[L.Stmt, L.Buffer]:
    """dest = source with zero borders; the innermost loop is vectorized when that dim has none,
    the outermost with an iteration per core parallel."""
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(shape, pads))
    buf = L.Buffer(name, dtype, padded)
    names = [f"{name}.p{d}" for d in range(len(shape))]
    cell = tuple(L.Var(v) for v in names)
    src = tuple(L.sub(L.Var(v), L.const(lo)) for v, (lo, _) in zip(names, pads))
    inside: list[L.Expr] = [L.Bin("and", L.Cmp("ge", s, L.const(0)), L.Cmp("lt", s, L.const(n)))
                            for s, n in zip(src, shape)]
    copy = L.Store(name, cell, L.Load(source, src, dtype))
    zero = L.Store(name, cell, L.cast(dtype, L.const(0)))
    inner_padded = pads[-1] != (0, 0)
    if inner_padded:
        body: L.Stmt = L.If(L.logical_and(inside), copy, zero)  # type: ignore[arg-type]
        stmt = body
        for v, n in reversed(list(zip(names, padded))):
            stmt = L.For(v, L.const(0), L.const(n), stmt)
    else:
        last = names[-1]
        vec = "vectorized" if padded[-1] <= 1024 else "serial"
        inner_copy = L.For(last, L.const(0), L.const(padded[-1]), copy, vec)
        inner_zero = L.For(last, L.const(0), L.const(padded[-1]), zero, vec)
        outer_inside = L.logical_and(list(inside[:-1]))
        stmt = inner_copy if outer_inside is None else L.If(outer_inside, inner_copy, inner_zero)
        for v, n in reversed(list(zip(names[:-1], padded[:-1]))):
            stmt = L.For(v, L.const(0), L.const(n), stmt)
    if cores >= 2 and isinstance(stmt, L.For) and math.prod(padded) >= PARALLEL_MIN_CELLS:
        stmt = parallel_outermost(stmt, cores)
    return stmt, buf


def padded_index(indices: "tuple[IntAffine, ...]", offsets: "tuple[int, ...] | list[int]",
                 env: dict[str, L.Expr]) -> tuple[L.Expr, ...]:
    """An access's indices into its zero-padded copy (each shifted by its border), the index
    variables replaced by `env`."""
    return tuple(substitute_expr(L.add(affine_expr(e), L.const(off)), env) for e, off in zip(indices, offsets))


def gathered(name: str, copy: Copy, shape: tuple[int, ...], cores: int,
             cell: Callable[[dict[str, L.Expr]], tuple[L.Expr, ...]], origin: Mapping[str, int] | None = None) -> L.Stmt:
    """The nest storing every element of `copy` (a permutation of its source) in the box of `shape`
    starting at `origin` (per output variable, 0 where not given) into buffer `name` at
    `cell(index of each of the copy's output variables)`, read straight from the source in the
    permutation's cache-friendly order (tilec.schedule.cpu.permute.nest)."""
    names = {v: f"{name}.{v}" for v in copy.out_vars}
    plan = PermutePlan(tuple(names[v] for v in copy.out_vars), tuple(names[v] for v in copy.src_vars),
                       tuple((names[v], n) for v, n in zip(copy.out_vars, shape)))
    origin = origin or {}

    def body(where: dict[str, L.Expr]) -> L.Stmt:
        at = {v: L.add(where[names[v]], L.const(origin[v])) if origin.get(v) else where[names[v]]
              for v in copy.out_vars}
        return L.Store(name, cell(at), copy.value(at))

    return nest(plan, np.dtype(copy.dtype).itemsize, body, cores, True)


def zero_slabs(name: str, dtype: str, shape: tuple[int, ...], slabs: list[tuple[int, int, int]]) -> list[L.Stmt]:
    """``name[...] = 0`` over each slab (dimension, begin, end) of a buffer of `shape`, its other
    dimensions whole; the innermost loop vectorized when it is whole and 2 to 1024 long."""
    loop_vars = [f"{name}.z{k}" for k in range(len(shape))]
    nests: list[L.Stmt] = []
    for d, begin, end in slabs:
        if begin == end:
            continue
        zero: L.Stmt = L.Store(name, tuple(L.Var(v) for v in loop_vars), L.cast(dtype, L.const(0)))
        for k in reversed(range(len(shape))):
            b, e = (begin, end) if k == d else (0, shape[k])
            vec = k == len(shape) - 1 and k != d and 2 <= e - b <= 1024
            zero = L.For(loop_vars[k], L.const(b), L.const(e), zero, "vectorized" if vec else "serial")
        nests.append(zero)
    return nests


def _padded_gather(name: str, copy: Copy, shape: tuple[int, ...], pads: tuple[tuple[int, int], ...],
                   cores: int) -> tuple[L.Stmt, L.Buffer]:
    """dest = copy (a permutation of its source, tilec.schedule.cpu.copy_fold) with zero borders, read
    straight from the source: the interior gathered, then the border slabs zeroed."""
    padded = tuple(n + lo + hi for n, (lo, hi) in zip(shape, pads))
    buf = L.Buffer(name, copy.dtype, padded)
    interior = gathered(name, copy, shape, cores,
                        lambda at: tuple(L.add(at[v], L.const(lo)) for v, (lo, _) in zip(copy.out_vars, pads)))
    slabs = [(d, b, e) for d, (lo, _) in enumerate(pads) for b, e in ((0, lo), (lo + shape[d], padded[d]))]
    return L.seq(interior, *zero_slabs(name, copy.dtype, padded, slabs)), buf


def build_direct(b: BoundContraction, bp: BoundProgram, plan: GemmPlan, knobs: GemmKnobs, target: Target,
                 epilogue: Epilogue | None = None,
                 copies: "Mapping[str, Copy] | None" = None) -> tuple[L.Stmt, list[L.Buffer]]:
    pads = padding(plan, bp)
    assert pads is not None, "build_direct needs applicable(plan, bp)"
    dt = b.dtype
    mr, nr = knobs.mr, knobs.nr
    m, n, k = plan.m, plan.n, plan.k
    panels = -(-n // nr)
    tiles = -(-m // mr)
    outer_parallel, threads, n_outer = plan_threads(plan, knobs, target, tiles)
    out = b.output
    dest = epilogue.dest if epilogue is not None else out
    v = L.Var
    o, jr, jj, t, ir, ii = (f"{out}.{s}" for s in ("o", "jr", "jj", "t", "ir", "ii"))
    workspaces: list[L.Buffer] = []
    stmts: list[L.Stmt] = []

    a_tensor, a_dtype = plan.a.tensor, bp.dtypes[plan.a.tensor]
    a_offsets = [lo for lo, _ in pads]
    if any(p != (0, 0) for p in pads):
        fill, apad = padded_operand(f"{out}.Apad", a_tensor, bp, pads, copies, target)
        stmts.append(fill)
        workspaces.append(apad)
        a_tensor = apad.name

    bp_buf = L.Buffer(f"{out}.Bp", dt, (threads if outer_parallel else 1, panels, k, nr))
    workspaces.append(bp_buf)
    slot = v(t) if outer_parallel else L.const(0)
    outer_env = decompose(v(o), plan.outer) if plan.outer else {}

    # the flat reduction index as an affine function of the reduction loop variables
    kk: L.Expr = L.const(0)
    stride = 1
    for var, lo, hi in reversed(plan.red):
        kk = L.add(L.mul(L.sub(v(var), L.const(lo)), L.const(stride)), kk)
        stride *= hi - lo + 1

    def red_loops(body: L.Stmt) -> L.Stmt:
        for var, lo, hi in reversed(plan.red):
            body = L.For(var, L.const(lo), L.const(hi + 1), body)
        return body

    # -- pack B: Bp[slot, jr, kk, jj] = B(red, col) for col < N, else 0
    col_var, col_lo, _ = plan.col
    col_index = L.add(L.mul(v(jr), L.const(nr)), v(jj))
    env_b = {**outer_env, col_var: L.add(col_index, L.const(col_lo))}
    b_store = _guarded_store(bp_buf.name, (slot, v(jr), kk, v(jj)), plan.b, plan.b_guards, env_b, dt,
                             bp.dtypes[plan.b.tensor], [L.Cmp("lt", col_index, L.const(n))])
    pack_b = L.For(jr, L.const(0), L.const(panels), red_loops(L.For(jj, L.const(0), L.const(nr), b_store)),
                   "parallel" if not outer_parallel and panels >= threads > 1 else "serial")

    # -- micro-kernel: rows clamped into range, A read in place (from the padded copy)
    row = L.Bin("min", L.add(L.mul(v(ir), L.const(mr)), v(ii)), L.const(m - 1))
    env_a = {**outer_env, **decompose(row, plan.rows)}
    a_index = padded_index(plan.a.indices, a_offsets, env_a)
    a_value = L.cast(dt, L.Load(a_tensor, a_index, a_dtype))
    acc = L.Buffer(f"{out}.acc", dt, (mr, nr), "local")
    acc_now = L.Load(acc.name, (v(ii), v(jj)), dt)
    fma = L.Store(acc.name, (v(ii), v(jj)), L.Bin("add", acc_now, L.Bin(
        "mul", a_value, L.Load(bp_buf.name, (slot, v(jr), kk, v(jj)), dt))))
    kernel = red_loops(L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), fma, "vectorized"),
                             "unrolled"))

    row_of_tile = L.add(L.mul(v(ir), L.const(mr)), v(ii))
    cell_env = {**outer_env, **decompose(row_of_tile, plan.rows), col_var: L.add(col_index, L.const(col_lo))}
    out_cell = tuple(substitute_expr(index_expr(e), cell_env) for e in b.out_indices)
    final = acc_now if epilogue is None else epilogue_value(epilogue, bp, out, acc_now, out_cell)
    full = L.Bin("and", L.Cmp("le", L.mul(L.add(v(ir), L.const(1)), L.const(mr)), L.const(m)),
                 L.Cmp("le", L.mul(L.add(v(jr), L.const(1)), L.const(nr)), L.const(n)))
    inside = L.Bin("and", L.Cmp("lt", row_of_tile, L.const(m)), L.Cmp("lt", col_index, L.const(n)))
    zero_acc = L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), L.Store(
        acc.name, (v(ii), v(jj)), L.cast(dt, L.const(0))), "vectorized"), "unrolled")
    store_fast = L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr),
                                                          L.Store(dest, out_cell, final), "vectorized"), "unrolled")
    store_edge = L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), L.If(
        inside, L.Store(dest, out_cell, final)), "vectorized"), "unrolled")  # masked stores
    micro = L.Allocate(acc, L.seq(zero_acc, kernel, L.If(full, store_fast, store_edge)))

    def chunk(var: str, total: int, body: L.Stmt) -> L.Stmt:
        return thread_share(t, threads, var, total, body)

    def thread_loop(body: L.Stmt) -> L.Stmt:
        return threads_loop(t, threads, body)

    if outer_parallel:
        per_outer = L.seq(pack_b, L.For(jr, L.const(0), L.const(panels), L.For(ir, L.const(0), L.const(tiles), micro)))
        stmts.append(thread_loop(chunk(o, n_outer, per_outer)))
    else:
        tiles_loop = thread_loop(L.For(jr, L.const(0), L.const(panels), chunk(ir, tiles, micro)))
        stmts.append(L.For(o, L.const(0), L.const(n_outer), L.seq(pack_b, tiles_loop)))
    if plan.partial:  # cells no tuple writes are 0
        stmts.insert(0, zero_fill(dest, b.shape, dt, parallel=threads > 1))
    return L.seq(*stmts), workspaces


__all__ = ["Pads", "access_padding", "applicable", "build_direct", "gathered", "padded_index", "padded_operand",
           "padding", "zero_slabs"]
