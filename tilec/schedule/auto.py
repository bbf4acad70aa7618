"""The default heuristic: which template lowers each contraction, with which knobs, untuned.

Requires: a BoundProgram and a Target. Guarantees: a PrimFunc computing what the
default lowering computes; sum-of-products contractions big enough to gain go
through the implicit-GEMM template with knobs chosen from the shapes and target.
"""

from __future__ import annotations

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import lower
from tilec.schedule import implicit_gemm
from tilec.target import Target


def auto_lower(bp: BoundProgram, target: Target) -> L.PrimFunc:
    def strategy(b: BoundContraction, program: BoundProgram) -> tuple[L.Stmt, list[L.Buffer]] | None:
        plan = implicit_gemm.match(b)
        if plan is None or not implicit_gemm.worthwhile(plan, target):
            return None
        knobs = implicit_gemm.default_knobs(plan, b.dtype, target)
        return implicit_gemm.build(b, program, plan, knobs, target)

    return lower(bp, strategy=strategy)
