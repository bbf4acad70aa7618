"""The default heuristic: which template lowers each contraction, with which knobs, untuned.

Requires: a BoundProgram and a Target. Guarantees: a PrimFunc computing what the
default lowering computes; sum-of-products contractions big enough to gain go
through the implicit-GEMM template with knobs chosen from the shapes and target,
with the elementwise statements that follow them fused in as an epilogue.
"""

from __future__ import annotations

from dataclasses import replace

from tilec.ir import loop as L
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import LoweredGroup, lower
from tilec.schedule import direct_gemm, implicit_gemm
from tilec.schedule.fusion import find_epilogue
from tilec.target import Target

DIRECT_MAX_PANELS = 4  # column panels up to which reading A in place beats packing it


def auto_lower(bp: BoundProgram, target: Target) -> L.PrimFunc:
    def strategy(index: int, program: BoundProgram) -> LoweredGroup | None:
        b = program.statements[index]
        assert isinstance(b, BoundContraction)
        plan = implicit_gemm.match(b)
        if plan is None or not implicit_gemm.worthwhile(plan, target):
            return None
        knobs = implicit_gemm.default_knobs(plan, b.dtype, target)
        if -(-plan.n // knobs.nr) <= DIRECT_MAX_PANELS and direct_gemm.applicable(plan, program):
            knobs = replace(knobs, pack_a=False)  # each packed A element would serve too few panels
        epilogue = find_epilogue(index, program)
        stmt, workspaces = implicit_gemm.build(b, program, plan, knobs, target, epilogue)
        if epilogue is None:
            return LoweredGroup(stmt, tuple(workspaces))
        elided = (b.output,) + tuple(link.output for link in epilogue.links[:-1])
        return LoweredGroup(stmt, tuple(workspaces), 1 + len(epilogue.links), elided)

    return lower(bp, strategy=strategy)
