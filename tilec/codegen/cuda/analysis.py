"""Facts about GPU loop IR that the CUDA C renderer needs: launch shapes, index ranges, alignment.

Pure functions over loop IR (:mod:`tilec.ir.loop`); nothing here renders text.
- `launch_shape` is a launch's grid and block (tilec.ir.launch), checked against CUDA's limits.
- `interval` bounds an index expression given the ranges of the loop variables in scope.
- `affine` writes an index expression as ``sum(coeff * var) + const`` where it is affine.
"""

from __future__ import annotations

from typing import Any

from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.launch import launch_extents
from tilec.ir.visitor import walk

Interval = tuple[int, int]
INT32_MAX = 2**31 - 1
MAX_THREADS_PER_BLOCK = 1024
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)


def launch_shape(stmt: L.Stmt) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of one launch (tilec.ir.launch), within CUDA's limits."""
    grid, block = launch_extents(stmt)
    threads = block[0] * block[1] * block[2]
    if threads > MAX_THREADS_PER_BLOCK or any(b > m for b, m in zip(block, _MAX_BLOCK)):
        raise CodegenError(f"a block of {tuple(block)} threads exceeds CUDA's limits "
                           f"({MAX_THREADS_PER_BLOCK} threads, at most {_MAX_BLOCK} per axis); "
                           "bind fewer iterations to threadIdx")
    if any(g > m for g, m in zip(grid, _MAX_GRID)):
        raise CodegenError(f"a grid of {tuple(grid)} blocks exceeds CUDA's limits {_MAX_GRID}")
    return grid, block


def has_thread_loop(node: Any) -> bool:
    return any(isinstance(n, L.For) and n.kind in L.GPU_THREAD_AXES for n in walk(node))


def has_barrier(node: Any) -> bool:
    """Whether `node` holds a block- or warp-collective statement (Barrier, the WMMA statements)."""
    return any(isinstance(n, (L.Barrier,) + L.WMMA_STMTS) for n in walk(node))


def uses_vars(e: Any, names: set[str]) -> bool:
    return any(isinstance(n, L.Var) and n.name in names for n in walk(e))


# ---------------------------------------------------------------- index ranges


def _floordiv(a: int, b: int) -> int:
    return a // b


def interval(e: L.Expr, ranges: dict[str, Interval]) -> Interval | None:
    """Inclusive bounds of an integer expression, or None where they are unknown.

    `ranges` gives each loop variable's bounds; loads, casts and calls are unknown.
    """
    if isinstance(e, L.Const) and not isinstance(e.value, float):
        return int(e.value), int(e.value)
    if isinstance(e, L.Var):
        return ranges.get(e.name)
    if isinstance(e, L.Select):
        a, b = interval(e.a, ranges), interval(e.b, ranges)
        return None if a is None or b is None else (min(a[0], b[0]), max(a[1], b[1]))
    if not isinstance(e, L.Bin):
        return None
    a, b = interval(e.a, ranges), interval(e.b, ranges)
    if a is None or b is None:
        return None
    if e.op == "add":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if e.op == "mul":
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if e.op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if e.op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if e.op in ("div", "mod") and b[0] == b[1] and b[0] > 0:
        c = b[0]
        if e.op == "div":
            return _floordiv(a[0], c), _floordiv(a[1], c)
        return (a[0] % c, a[1] % c) if _floordiv(a[0], c) == _floordiv(a[1], c) else (0, c - 1)
    return None


def loop_range(loop: L.For, ranges: dict[str, Interval]) -> Interval | None:
    lo, hi = interval(loop.begin, ranges), interval(loop.end, ranges)
    if lo is None or hi is None:
        return None
    return lo[0], max(lo[0], hi[1] - 1)


def fits_int32(iv: Interval | None) -> bool:
    return iv is not None and -INT32_MAX - 1 <= iv[0] and iv[1] <= INT32_MAX


# ---------------------------------------------------------------- affine forms

Affine = tuple[dict[str, int], int]


def affine(e: L.Expr, atoms: bool = False) -> Affine | None:
    """``({var: coeff}, const)`` with ``e == sum(coeff * var) + const``, or None if not affine.

    With `atoms`, a non-affine integer subterm (``tx // 32``) counts as one more unknown
    integer, keyed by its repr: enough to reason about divisibility, not about ranges.
    """
    if isinstance(e, L.Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {}, e.value
    if isinstance(e, L.Var):
        return {e.name: 1}, 0
    if not isinstance(e, L.Bin) or e.op not in ("add", "sub", "mul"):
        return ({repr(e): 1}, 0) if atoms and e.dtype == L.INDEX else None
    a, b = affine(e.a, atoms), affine(e.b, atoms)
    if a is None or b is None:
        return None
    if e.op == "mul":
        if not a[0]:
            return scale(b, a[1])
        if not b[0]:
            return scale(a, b[1])
        return ({repr(e): 1}, 0) if atoms else None
    return combine(a, scale(b, -1) if e.op == "sub" else b)


def scale(a: Affine, k: int) -> Affine:
    return {v: c * k for v, c in a[0].items()}, a[1] * k


def combine(a: Affine, b: Affine) -> Affine:
    coeffs = dict(a[0])
    for v, c in b[0].items():
        coeffs[v] = coeffs.get(v, 0) + c
    return {v: c for v, c in coeffs.items() if c != 0}, a[1] + b[1]


def flat_affine(indices: tuple[L.Expr, ...], shape: tuple[int, ...], atoms: bool = False) -> Affine | None:
    """The row-major element offset of an access, as an affine form (None where not affine)."""
    total: Affine = ({}, 0)
    stride = 1
    for idx, n in zip(reversed(indices), reversed(shape)):
        a = affine(idx, atoms)
        if a is None:
            return None
        total = combine(total, scale(a, stride))
        stride *= n
    return total


def pure_index(e: L.Expr) -> bool:
    """An index expression made of loop variables, constants and arithmetic (no loads or casts)."""
    if isinstance(e, (L.Var, L.Const)):
        return e.dtype == L.INDEX
    if isinstance(e, L.Bin):
        return e.dtype == L.INDEX and pure_index(e.a) and pure_index(e.b)
    if isinstance(e, L.Select):
        return pure_index(e.a) and pure_index(e.b)
    return False
