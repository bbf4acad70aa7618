"""Features of a candidate: a fixed-length float vector for the cost model.

Two parts: (1) the template's own analytic features (its `features`, derived from the knobs and
the plan's extents: register-block size and pressure, bytes per innermost iteration, buffers
against the target's caches, padding waste, load balance; tilec.schedule.cpu.implicit_gemm.features, the
attention template's), or for templates without them, the knobs plus counts read off the lowered
GPU kernel (`kernel_features`: launch shape, shared and local buffers, barriers, loops);
(2) optionally, totals read off the lowered loop IR (loops of each kind, nesting depth, vector
width, parallel extent, workspace and register-buffer bytes).

Analytic features cost microseconds per candidate and are all the search needs; the IR totals
lower the candidate (about a millisecond), so the Featurizer leaves them off unless asked.
Features are ratios and logarithms rather than raw sizes where possible, so that a model trained
on one shape of a template transfers to other shapes of it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from tilec.autotune.task import Task
from tilec.errors import TilecError
from tilec.ir import loop as L
from tilec.ir.visitor import Visitor, walk
from tilec.schedule.templates.space import log_feature

IR_NAMES = ("loops", "serial", "parallel", "vectorized", "unrolled", "depth", "vector_width", "parallel_extent",
            "log_workspace_bytes", "local_bytes")


def loop_totals(func: L.PrimFunc) -> list[float]:
    """Totals of the loop IR: loops of each kind, depth, vector width, parallel extent, bytes."""
    totals = _LoopTotals()
    totals.visit(func.body)
    kinds = totals.kinds
    workspace = sum(b.size * 4 for b in func.params if "." in b.name)
    return [float(sum(kinds.values())), kinds["serial"], kinds["parallel"], kinds["vectorized"], kinds["unrolled"],
            totals.depth, totals.width, totals.par, log_feature(workspace + 1), totals.local / 1024]


class _LoopTotals(Visitor):
    def __init__(self) -> None:
        self.kinds = {"serial": 0, "parallel": 0, "vectorized": 0, "unrolled": 0}
        self.depth = self.width = self.par = self.local = 0
        self.level = 0  # loops around the node visited

    def visit_For(self, s: L.For) -> None:
        self.kinds[s.kind] = self.kinds.get(s.kind, 0) + 1
        self.depth = max(self.depth, self.level + 1)
        if s.kind == "vectorized":
            self.width = max(self.width, _constant_extent(s))
        if s.kind == "parallel":
            self.par = max(self.par, _constant_extent(s))
        self.level += 1
        self.visit(s.body)
        self.level -= 1

    def visit_Allocate(self, s: L.Allocate) -> None:
        self.local += s.buffer.size * (8 if s.buffer.dtype.endswith("64") else 4)
        self.visit(s.body)

    def visit_expr(self, e: L.Expr) -> None:
        pass  # loops and allocations are statements


def _constant_extent(f: L.For) -> int:
    if isinstance(f.begin, L.Const) and isinstance(f.end, L.Const):
        return int(f.end.value) - int(f.begin.value)
    return 0


KERNEL_NAMES = ("log_blocks", "threads", "shared_kib", "local_elems", "barriers", "loops")


def kernel_counts(func: L.PrimFunc) -> list[float]:
    """Counts of a lowered GPU kernel: grid and block sizes, shared/local buffers, barriers, loops."""
    blocks, threads, shared, local, barriers, loops = 1, 1, 0, 0, 0, 0
    for node in walk(func.body):
        if isinstance(node, L.For):
            loops += 1
            if node.kind in L.GPU_BLOCK_AXES and isinstance(node.end, L.Const):
                blocks *= int(node.end.value)
            elif node.kind in L.GPU_THREAD_AXES and isinstance(node.end, L.Const):
                threads *= int(node.end.value)
        elif isinstance(node, L.Allocate):
            if node.buffer.scope == "shared":
                shared += node.buffer.size * np.dtype(node.buffer.dtype).itemsize
            elif node.buffer.scope != "global":
                local += node.buffer.size
        elif isinstance(node, L.Barrier):
            barriers += 1
    return [math.log2(blocks), float(threads), shared / 1024, float(local), float(barriers), float(loops)]


def kernel_features(task: Task, config: Mapping[str, Any]) -> list[float]:
    """The knobs (by name, booleans as 0/1), the lowered kernel's counts, log2 flops per thread."""
    knobs = [float(v) for _, v in sorted(config.items())]
    try:
        counts = kernel_counts(task.lower(config))
    except TilecError:  # an illegal candidate: the measurement will say why
        return knobs + [0.0] * (len(KERNEL_NAMES) + 1)
    return knobs + counts + [math.log2(max(task.flops, 1.0) / (2 ** counts[0] * max(counts[1], 1.0)))]


class Featurizer:
    """Feature vectors of a task's candidates, memoised per config."""

    def __init__(self, task: Task, with_ir: bool = False) -> None:
        self.task = task
        own = task.impl.feature_names
        if not own:  # the knobs and the lowered kernel's counts (which hold its IR already)
            with_ir = False
            own = tuple(sorted(task.default_config())) + KERNEL_NAMES + ("log_flops_per_thread",)
        self.with_ir = with_ir
        self.names: tuple[str, ...] = own + (IR_NAMES if with_ir else ())
        self._memo: dict[tuple, np.ndarray] = {}

    def _analytic(self, config: Mapping[str, Any]) -> list[float]:
        task = self.task
        if task.impl.feature_names:
            return task.impl.features(task.stmt, task.plan, task.context, config)
        return kernel_features(task, config)

    def __call__(self, config: Mapping[str, Any]) -> np.ndarray:
        key = tuple(sorted(config.items()))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        values = self._analytic(config)
        if self.with_ir:
            try:
                values += loop_totals(self.task.lower(config))
            except Exception:  # an illegal candidate: the measurement will say why
                values += [0.0] * len(IR_NAMES)
        vec = np.asarray(values, dtype=np.float32)
        self._memo[key] = vec
        return vec

    def matrix(self, configs: list[Mapping[str, Any]]) -> np.ndarray:
        if not configs:
            return np.zeros((0, len(self.names)), np.float32)
        return np.stack([self(c) for c in configs])


__all__ = ["Featurizer", "IR_NAMES", "KERNEL_NAMES", "kernel_counts", "kernel_features", "loop_totals"]
