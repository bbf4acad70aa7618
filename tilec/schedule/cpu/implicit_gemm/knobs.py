"""The implicit-GEMM template's knob record and the blocking the heuristic derives from the target.

Requires: a GemmPlan (tilec.schedule.patterns.gemm) and a CPU Target. Guarantees:
`default_knobs` gives the BLIS-style blocking (register block from the vector width and
register count, KC so the B micro-panel stays in L1, MC so row blocks split evenly over the
threads); `knob_problems` says why knobs cannot be built for a plan on a target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tilec.ir.dtypes import accumulator_dtype
from tilec.schedule.params import LoweringParams
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.knobs import knob
from tilec.target import Target

MAX_THREADS = 256  # threads a template splits its work over: more only multiplies the packing buffers
MAX_WORKSPACE_BYTES = 1 << 30  # packed panels a choice of knobs may ask for


@dataclass(frozen=True)
class GemmKnobs:
    """The template's tunable knobs (a schedule record)."""

    mr: int = knob(6, 1, 32, "rows of the register block")
    nr: int = knob(64, 1, 1024, "columns of the register block, a multiple of the vector lanes")
    kc: int = knob(256, 1, 1 << 16, "reduction block (at most the reduction is used)")
    mc: int = knob(144, 1, 1 << 20, "rows packed at once, a multiple of mr")
    threads: int = knob(0, 0, MAX_THREADS, "threads sharing the work; 0: one per core")
    pack_a: bool = knob(True, doc="False: read A in place (tilec.schedule.cpu.implicit_gemm.direct), for few column panels")
    pack_b: bool = knob(True, doc="False: read B in place too, its innermost index the column "
                                  "(tilec.schedule.cpu.implicit_gemm.inplace)")


DTYPES = ("float32", "float64", "bfloat16", "float16")  # the dtypes the CPU GEMM templates take
# 16-bit floats are converted to float32 while packing (tilec.schedule.cpu.implicit_gemm.packed): the
# variants that read an operand in place (pack_a or pack_b False) take float32 and float64 only


def itemsize(dtype: str) -> int:
    """Bytes of one element of `dtype` as the micro-kernel holds it (16-bit floats in float32)."""
    return np.dtype(accumulator_dtype(dtype)).itemsize


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def accumulators(target: Target) -> int:
    """Vector registers the register block may hold: three quarters of the register file (the rest
    holds a row of B, a broadcast of A and addresses)."""
    assert target.host is not None
    return target.host.vector_registers * 3 // 4


def register_block(target: Target, widths: tuple[int, ...]) -> tuple[int, int]:
    """(mr, vectors): of the widths allowed (in vectors), the block with the most accumulators that
    fits the register file beside a B row and an A broadcast (mr x vectors + vectors + 1 registers),
    the widest on a tie: 6 x 4 vectors with 32 registers (AVX-512), 4 x 3 with 16 (AVX2), whose
    4 x 4 would need 21 and spill."""
    assert target.host is not None
    regs = target.host.vector_registers

    def rows(vectors: int) -> int:
        return max(1, min(14, accumulators(target) // vectors, (regs - vectors - 1) // vectors))

    best = max(widths, key=lambda v: (rows(v) * v, v))
    return rows(best), best


def default_knobs(plan: GemmPlan, dtype: str, target: Target, mc_rows: int) -> GemmKnobs:
    """Register block from the vector width and register count; KC so the B micro-panel (KC x NR)
    stays in L1; MC (about `mc_rows`) so that the row blocks split evenly over the threads when they
    share the rows."""
    assert target.host is not None
    lanes = target.lanes(accumulator_dtype(dtype))
    mr, vectors = register_block(target, (4, 3, 2, 1) if plan.n > 2 * lanes else (2, 1) if plan.n > lanes else (1,))
    nr = vectors * lanes
    kc = min(plan.k, max(16, target.host.l1d_bytes // (nr * itemsize(dtype))))
    threads = target.cores
    n_outer = plan.batch
    share = 1 if n_outer >= threads else threads  # row blocks are split over threads only then
    blocks = share * -(-plan.m // (share * mc_rows))
    mc = round_up(-(-plan.m // blocks), mr)
    return GemmKnobs(mr=mr, nr=nr, kc=kc, mc=mc, threads=threads)


def worthwhile(plan: GemmPlan, params: LoweringParams) -> bool:
    """Small problems are faster as plain loops than packed."""
    return plan.n >= params.gemm_min_columns and plan.m * plan.n * plan.k >= params.gemm_min_work


def plan_threads(plan: GemmPlan, knobs: GemmKnobs, target: Target, row_units: int) -> tuple[bool, int, int]:
    """(parallel over the outer loop?, threads, outer iterations): the outer (batch) loop when it
    has an iteration per thread, else `row_units` (row blocks or tiles) shared by the threads."""
    n_outer = plan.batch
    wanted = max(1, knobs.threads or target.cores)
    outer_parallel = n_outer >= wanted and wanted > 1
    return outer_parallel, wanted if outer_parallel else max(1, min(wanted, row_units)), n_outer


def knob_problems(knobs: GemmKnobs, plan: GemmPlan, dtype: str, target: Target) -> list[str]:
    """Why `knobs` cannot be built for `plan` on `target`, each problem naming its knob (types and
    the record's bounds are checked before: tilec.schedule.templates.knobs)."""
    compute = accumulator_dtype(dtype)
    lanes = target.lanes(compute)
    problems = []
    if knobs.nr % lanes:
        problems.append(f"nr ({knobs.nr}) must be a multiple of the {lanes} {compute} lanes of a vector register")
    if compute != dtype and not (knobs.pack_a and knobs.pack_b):
        problems.append(f"pack_a and pack_b must be true for {dtype}: its operands are converted to {compute} while packing")
    vectors = -(-knobs.nr // lanes)
    limit = 2 * accumulators(target)
    if knobs.mr * vectors > limit:
        problems.append(f"the mr x nr = {knobs.mr}x{knobs.nr} register block holds {knobs.mr * vectors} vectors; "
                        f"at most {limit} compile in reasonable time")
    if knobs.mc % knobs.mr:
        problems.append(f"mc ({knobs.mc}) must be a multiple of mr ({knobs.mr})")
    threads = max(1, knobs.threads or target.cores)
    panels = -(-plan.n // knobs.nr)
    kc = min(knobs.kc, plan.k)
    packed = threads * (knobs.mc * kc + panels * kc * knobs.nr) * itemsize(dtype)
    if packed > MAX_WORKSPACE_BYTES:
        problems.append(f"threads x (mc x kc + N x kc) = {packed} bytes of packed panels (threads={knobs.threads}, "
                        f"mc={knobs.mc}, kc={kc}); at most {MAX_WORKSPACE_BYTES}")
    return problems


__all__ = ["DTYPES", "GemmKnobs", "MAX_THREADS", "accumulators", "default_knobs", "register_block", "itemsize", "knob_problems", "plan_threads",
           "round_up", "worthwhile"]
