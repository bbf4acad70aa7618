"""The geometry of a GPU launch in loop IR's GPU conventions (tilec.ir.loop): its grid and block.

Requires: one launch (a top-level statement of a GPU PrimFunc). Guarantees: `launch_extents` gives
per axis the largest extent of the loops bound to it, or a CodegenError where the conventions do
not hold (a bound loop not over [0, constant), an axis nested in itself, a block loop inside a
thread loop). The limits of a particular GPU are its backend's to check.
"""

from __future__ import annotations

from typing import Any

from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.visitor import child_stmts


def gpu_extent(loop: L.For) -> int:
    """The launch extent of a GPU-bound loop (convention: begin 0, constant end)."""
    if not (isinstance(loop.begin, L.Const) and loop.begin.value == 0 and isinstance(loop.end, L.Const)):
        raise CodegenError(f"GPU loop {loop.var} ({loop.kind}) must run over [0, constant); "
                           f"got [{loop.begin}, {loop.end}]")
    extent = int(loop.end.value)
    if extent < 1:
        raise CodegenError(f"GPU loop {loop.var} ({loop.kind}) has extent {extent}; it must be at least 1")
    return extent


def launch_extents(stmt: L.Stmt) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) of one launch: per axis the largest extent of the loops bound to it."""
    grid = [1, 1, 1]
    block = [1, 1, 1]

    def visit(node: Any, bound: tuple[str, ...]) -> None:
        if isinstance(node, L.For) and node.kind in L.GPU_AXES:
            if node.kind in bound:
                raise CodegenError(f"loop {node.var} is bound to {node.kind} inside another {node.kind} loop")
            if node.kind in L.GPU_BLOCK_AXES and any(a in L.GPU_THREAD_AXES for a in bound):
                raise CodegenError(f"block loop {node.var} ({node.kind}) is nested inside a thread loop; "
                                   "block loops must enclose thread loops")
            extent = gpu_extent(node)
            dims, axis = (grid, L.GPU_BLOCK_AXES.index(node.kind)) if node.kind in L.GPU_BLOCK_AXES \
                else (block, L.GPU_THREAD_AXES.index(node.kind))
            dims[axis] = max(dims[axis], extent)
            bound = bound + (node.kind,)
        for c in child_stmts(node):
            visit(c, bound)

    visit(stmt, ())
    return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])


__all__ = ["gpu_extent", "launch_extents"]
