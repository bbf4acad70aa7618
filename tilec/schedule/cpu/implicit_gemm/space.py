"""The implicit-GEMM template's search space: the tuner's choice lists and constraints.

Requires: the statement's GemmPlan and the heuristic's knobs (always a point of the space).
Guarantees: choice lists around the default, constraints that give their reason (register
pressure from the target's register file, block sizes against its L2, the variants' rules).
"""

from __future__ import annotations

from tilec.ir.bounds import BoundContraction
from tilec.schedule.cpu.implicit_gemm.direct import padding
from tilec.schedule.cpu.implicit_gemm.inplace import candidates
from tilec.ir import loop as L
from tilec.schedule.cpu.implicit_gemm.knobs import itemsize
from tilec.schedule.cpu.implicit_gemm.packed import bf16_pairs
from tilec.schedule.cpu.implicit_gemm.tiles import uses_tiles
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.base import Context
from tilec.schedule.templates.space import Config, Constraint, Knob, choices_with


def inplace_columns(index: int, ctx: Context) -> tuple[int, ...]:
    """The column counts of the in-place variant's candidates for statement `index` (knob
    pack_b=False needs an nr that divides one of them); empty when it does not apply."""
    b = ctx.bp.statements[index]
    if not isinstance(b, BoundContraction):
        return ()
    return tuple(ip.gemm.n for ip in candidates(b, ctx.bp, ctx.target.lanes(b.dtype)))


def gemm_space(index: int, plan: GemmPlan, ctx: Context, default: Config) -> tuple[tuple[Knob, ...], tuple[Constraint, ...]]:
    """The knobs' choice lists (around the heuristic's `default`) and the constraints with reasons."""
    target, dtype = ctx.target, ctx.bp.statements[index].dtype
    assert target.host is not None
    size = itemsize(dtype)
    lanes = target.lanes(dtype)
    regs = target.host.vector_registers
    l2 = target.host.l2_bytes
    m, n, k = plan.m, plan.n, plan.k
    tiled = uses_tiles(bf16_pairs(plan, ctx.bp.dtypes, target, 16), target, 16, 16)  # AMX blocks too (.tiles)
    tile_sides = (16, 32, 48) if tiled else ()  # (mr is at most 32: GemmKnobs)
    mrs = choices_with(tuple(sorted({1, 2, 3, 4, 6, 8, 10, 12, 14, *tile_sides[:2]})), default["mr"])
    nrs = choices_with(tuple(sorted({lanes * v for v in (1, 2, 3, 4) if lanes * v <= max(lanes, -(-n // lanes) * lanes)}
                                    | {side for side in tile_sides if side <= max(16, n)})), default["nr"])
    kcs = choices_with(tuple(c for c in (16, 32, 64, 128, 256, 512, 1024, 2048) if c < k) + (min(k, 2048),), default["kc"])
    m_up = max(mrs) * -(-m // max(mrs))
    mcs = choices_with(tuple(sorted({mr * j for mr in mrs for j in (1, 2, 4, 8, 12, 16, 24, 32) if mr * j <= m_up})),
                default["mc"])
    pack_as = (True, False) if padding(plan, ctx.bp) is not None else (True,)
    inplace_ns = inplace_columns(index, ctx)
    pack_bs = (True, False) if inplace_ns else (True,)
    knobs = (Knob("mr", mrs), Knob("nr", nrs), Knob("kc", kcs), Knob("mc", mcs),
             Knob("threads", (default["threads"],)), Knob("pack_a", choices_with(pack_as, default["pack_a"])),
             Knob("pack_b", choices_with(pack_bs, default["pack_b"])))

    def registers(c: Config) -> str | None:
        if tiled and c["pack_a"] and c["mr"] % L.TILE_ROWS == 0 and c["nr"] % L.TILE_ROWS == 0:  # an AMX block
            return None if uses_tiles(True, target, c["mr"], c["nr"]) else \
                f"the {c['mr']}x{c['nr']} block needs more than the {L.AMX_TILES} AMX tiles with its operands"
        used = c["mr"] * c["nr"] // lanes + c["nr"] // lanes + 1
        return None if used <= regs else (f"the {c['mr']}x{c['nr']} block needs {used} vector registers "
                                          f"(accumulators, a B row, an A broadcast), more than the {regs} there are")

    def mc_multiple(c: Config) -> str | None:
        return None if c["mc"] % c["mr"] == 0 else f"mc ({c['mc']}) must be a multiple of mr ({c['mr']})"

    def mc_rows(c: Config) -> str | None:
        limit = c["mr"] * -(-m // c["mr"])
        return None if c["mc"] <= limit else f"mc ({c['mc']}) exceeds the {m} rows rounded up to mr ({limit})"

    def b_panel(c: Config) -> str | None:
        panel = min(c["kc"], k) * c["nr"] * size
        return None if panel <= l2 // 2 else f"the B micro-panel (kc x nr, {panel} bytes) overflows half of L2"

    def a_block(c: Config) -> str | None:
        block = c["mc"] * min(c["kc"], k) * size
        return None if block <= l2 else f"the packed A block (mc x kc, {block} bytes) overflows L2"

    def direct_canonical(c: Config) -> str | None:
        if c["pack_a"] or (c["kc"] == kcs[0] and c["mc"] == c["mr"]):
            return None
        return "pack_a=False ignores kc and mc: only kc=first choice, mc=mr are kept"

    def inplace(c: Config) -> str | None:
        if c["pack_b"]:
            return None
        if c["pack_a"]:
            return "pack_b=False reads A in place too: it needs pack_a=False"
        if any(w % c["nr"] == 0 for w in inplace_ns):
            return None
        return f"pack_b=False needs nr ({c['nr']}) to divide the columns ({', '.join(map(str, inplace_ns))})"

    def direct_legal(c: Config) -> str | None:
        if c["pack_a"] or False in pack_as:
            return None
        return "pack_a=False needs A's only guards to be its own bounds (tilec.schedule.cpu.implicit_gemm.direct.padding)"

    constraints = (Constraint("registers", registers), Constraint("mc_multiple", mc_multiple),
                   Constraint("mc_rows", mc_rows), Constraint("b_panel", b_panel), Constraint("a_block", a_block),
                   Constraint("direct_canonical", direct_canonical), Constraint("direct_legal", direct_legal),
                   Constraint("inplace", inplace))
    return knobs, constraints


__all__ = ["gemm_space", "inplace_columns"]
