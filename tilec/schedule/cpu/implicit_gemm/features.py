"""The implicit-GEMM template's features for the cost model: analytic, from knobs and extents.

Register-block size and pressure, bytes each buffer touches per innermost iteration, packed
buffers against the target's L1 and L2, padding waste at the edges, load balance of the
parallel loop. Ratios and logarithms rather than raw sizes, so that a model trained on one
shape transfers to others. Costs microseconds per candidate (nothing is lowered).
"""

from __future__ import annotations

from typing import Any, Mapping

from tilec.schedule.cpu.implicit_gemm.knobs import itemsize, round_up
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.base import Context
from tilec.schedule.templates.space import log_feature

NAMES = ("log_mr", "log_nr", "vectors", "log_kc", "log_mc", "pack_a", "pack_b", "threads", "reg_use", "log_block",
         "intensity", "bytes_per_flop", "b_panel_l1", "a_block_l2", "b_all_l2", "m_waste", "n_waste",
         "mc_waste", "k_waste", "edge_tiles", "imbalance", "k_blocks", "row_blocks", "log_m", "log_n",
         "log_k", "a_reads_per_elem", "a_panel_l1", "kernel_l1", "a_block_l1", "log_mc_tiles", "acc_regs",
         "b_all_l1", "n_tiles", "k_tail", "m_tail")


def gemm_features(index: int, p: GemmPlan, ctx: Context, c: Mapping[str, Any]) -> list[float]:
    """Analytic features of the packed/direct/in-place nest for knobs `c` (see the module doc)."""
    t, dtype = ctx.target, ctx.bp.statements[index].dtype
    assert t.host is not None
    size = itemsize(dtype)
    l1, l2 = t.host.l1d_bytes, t.host.l2_bytes
    lanes = t.lanes(dtype)
    m, n, k = p.m, p.n, p.k
    mr, nr, mc, pack = c["mr"], c["nr"], c["mc"], bool(c["pack_a"])
    kc = min(c["kc"], k) if pack else k
    threads = max(1, c["threads"] or t.cores)
    vectors = -(-nr // lanes)
    regs = (mr * vectors + vectors + 1) / t.host.vector_registers
    row_units = -(-m // mc) if pack else -(-m // mr)
    per_thread = -(-row_units // threads)
    imbalance = per_thread * min(threads, row_units) / row_units
    tiles_m, tiles_n = -(-m // mr), -(-n // nr)
    edge = ((m % mr != 0) * tiles_n + (n % nr != 0) * tiles_m) / (tiles_m * tiles_n)
    return [log_feature(mr), log_feature(nr), vectors, log_feature(kc), log_feature(mc if pack else mr), float(pack), float(c.get("pack_b", True)),
            threads, regs,
            log_feature(mr * nr), mr * nr / (mr + nr), (mr + nr) * size / (2 * mr * nr),
            kc * nr * size / l1, (mc if pack else mr) * kc * size / l2,
            kc * round_up(n, nr) * size / l2, round_up(m, mr) / m, round_up(n, nr) / n,
            round_up(m, mc) / m if pack else 1.0, round_up(k, kc) / k, edge, imbalance, log_feature(-(-k // kc)), log_feature(row_units),
            log_feature(m), log_feature(n), log_feature(k), tiles_n if not pack else 1.0,
            # the micro-kernel's working set against L1: the A micro-panel (mr x kc), with the B
            # micro-panel (kc x nr), the packed A block (mc x kc) that every column panel re-reads
            mr * kc * size / l1, (mr + nr) * kc * size / l1,
            (mc if pack else mr) * kc * size / l1,
            log_feature((mc if pack else mr) / mr),  # micro-tiles per packed A block (B micro-panel reuse)
            mr * vectors,  # accumulator registers
            kc * round_up(n, nr) * size / l1, log_feature(tiles_n),
            (k % kc) / kc, (m % (mc if pack else mr)) / (mc if pack else mr)]  # partial last blocks


__all__ = ["NAMES", "gemm_features"]
