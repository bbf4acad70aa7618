"""The implicit-GEMM template's knob record and the blocking the heuristic derives from the target.

Requires: a GemmPlan (tilec.schedule.patterns.gemm) and a CPU Target. Guarantees:
`default_knobs` gives a blocking derived from the target's CpuInfo by the model below (no
constant measured on one chip); `knob_problems` says why knobs cannot be built for a plan on a
target.

The model (BLIS's analytical recipe, adapted to this template's loop nest, tilec.schedule.cpu.
implicit_gemm.packed: the vector dimension is NR, the columns; A is broadcast row by row):

* Register block (`register_block`). A k step of the micro-kernel issues MR x V vector FMAs
  (V = NR / lanes vectors per row), V vector loads of B and MR broadcasts of A. It takes at least
  MR x V / units cycles (the FMA units), `fma_latency` + CHAIN_SLACK cycles (each accumulator's
  chain gets one FMA per step; with exactly latency x units accumulators every FMA must issue the
  cycle its input is ready, which the loads sharing the scheduler do not allow: on Zen 3, 4 x 2
  vectors, the 8 accumulators latency 4 x 2 units ask for, ran at 0.95x 4 x 3 and 6 x 2 on
  2048^3), (V + MR) / 2 cycles (two loads per cycle)
  and V x vector bytes / (L2_SUSTAINED x the core's L2 fill bytes per cycle) cycles (the B
  micro-panel streams from L2, see KC; the fill path, 32 or 64 bytes a cycle, sustains about
  three quarters of its width while the core also loads from L1: measured on Zen 3 (AVX2, two
  FMA units, a 32-byte fill path; 1024^3 on both cores), a 2-row block of 4 vectors, which asks
  for 32 bytes of B per cycle, ran at 0.75-0.79x the speed of 4 x 3 and 6 x 2 blocks, which ask
  for 16 and 11). Its efficiency is the FMA-bound time over the longest of these. The registers
  hold the MR x V accumulators, V B vectors and a broadcast. Among the blocks that fit, the one
  whose efficiency times the share of useful cells (edge tiles of M and N compute padding) is
  highest (scores within SCORE_TIE of the best count as equal), then the one with the fewest loads
  per FMA (BLIS: MR x NR / (MR + NR) as large as possible), then the widest. Where every reduction
  step fetches A's line again (a transposed A whose steps alias in L1), the most accumulators win.
* KC, the reduction block (`reduction_block`): each reduction block reloads and stores every C
  tile, a cache miss per row of the tile, so KC is as large as the caches allow: the B
  micro-panel (KC x NR) in a quarter of L2, the packed B block (KC x N, shared by the threads, read
  again by every row block) in a quarter of L3 (which the other cores and processes share), and K
  split into equal blocks. The B micro-panel does not stay in L1 (with NR the
  vector dimension it is 4 vectors wide: L1 would cap KC near 100); measured on Zen 4 (1024^3, one
  core), KC = K ran 1.06x KC = K / 2 and 1.17x KC = 128, the B micro-panel streaming from L2.
* MC, the rows packed at once (`row_block`): the packed A block (MC x KC) in another quarter of
  L2, and, when the threads share the rows, MC so that the row blocks give every thread the same
  number of MR-row tiles as nearly as whole blocks can.
* Threads: one per core. They share the row tiles, or, where the rows are few and B's panel over
  all of K exceeds L2, B's column panels (`shared_panels_block`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tilec.ir.dtypes import accumulator_dtype
from tilec.schedule.params import LoweringParams
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.knobs import knob
from tilec.target import CpuInfo, Target

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
# 16-bit floats are converted to float32 while packing (tilec.schedule.cpu.implicit_gemm.packed; the direct
# variant reads A in place and converts it as it goes), or packed as bfloat16 pairs for the pair dot product
# where the CPU has it (both variants): the in-place variant (pack_b False) takes float32 and float64 only


def itemsize(dtype: str) -> int:
    """Bytes of one element of `dtype` as the micro-kernel holds it (16-bit floats in float32)."""
    return np.dtype(accumulator_dtype(dtype)).itemsize


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def accumulators(target: Target) -> int:
    """Vector registers a register block may hold at most: three quarters of the register file (a
    bound for the checks and the in-place variant; `register_block` counts registers exactly)."""
    assert target.host is not None
    return target.host.vector_registers * 3 // 4


def most_rows(nr: int, lanes: int, target: Target) -> int:
    """The most rows an nr-wide register block (of `lanes`-lane vectors) may have for
    `knob_problems`: twice `accumulators` vectors in all, beyond which compile times explode."""
    return 2 * accumulators(target) // -(-nr // lanes)


LOADS_PER_CYCLE = 2  # loads a core issues per cycle: two on every x86-64 core since Haswell and Zen
CHAIN_SLACK = 1  # cycles an accumulator's chain needs beyond the FMA latency (module doc)
L2_SUSTAINED = 0.75  # the share of the L2 -> L1 fill path's width it sustains beside the kernel's own loads
MAX_ROWS = 16  # MR at most: a taller block only adds broadcasts (and compile time) for no more reuse
# Register blocks whose scores (efficiency x useful cells) differ by less than this share are equal, and the
# fewest loads per FMA decides: a 6 x 4-vector block's 0.02% of padded cells over 25,088 rows (a 3x3
# convolution's 8 x 56 x 56 pixels) made the 4 x 4 block win, which ran the convolution 1.09x slower (float32,
# Zen 5, 30 interleaved rounds: 4.54 vs 4.18 ms), and so did 0.05% of 8,192 rows (a stride-2 convolution's
# 32 x 16 x 16 pixels, 64 -> 64 channels: bfloat16 1.13 vs 1.03 ms, float32 2.47 vs 2.40). A block that tiles
# 1024 or 2048 rows exactly still beats one that pads 0.1% or more of them (GEMMs ran the same with either).
SCORE_TIE = 6e-4


def kernel_efficiency(mr: int, vectors: int, cpu: CpuInfo) -> float:
    """Share of the FMA peak an MR x (vectors) register block sustains (module doc)."""
    fma = mr * vectors / cpu.fma_units
    cycles = max(fma, cpu.fma_latency + CHAIN_SLACK, (vectors + mr) / LOADS_PER_CYCLE,
                 vectors * cpu.vector_bits / 8 / (L2_SUSTAINED * cpu.l2_fill_bytes))
    return fma / cycles


def register_block(m: int, n: int, lanes: int, cpu: CpuInfo, threads: int = 1,
                   per_line: bool = False) -> tuple[int, int]:
    """(MR, NR): the register block of the module doc for an M x N output, NR a multiple of `lanes`.
    Where `threads` share the row tiles, a block whose tiles do not share out evenly counts the idle
    threads' time as waste: 9 rows (a 1 -> 64 3x3 convolution's weight gradient) take two tiles of
    5 on two threads rather than three of 3. With `per_line`, A's rows lie side by side and every
    reduction step of a tile fetches A's cache line again from beyond L1 (tilec.schedule.cpu.
    implicit_gemm.aliased_a_steps): the block with the most FMAs per fetched line, MR x V
    accumulators, wins instead (14 x 2 vectors with AVX-512's 32 registers)."""
    ranked = _ranked_block(m, n, lanes, cpu, threads, per_line)
    assert ranked is not None  # threads sharing the row tiles can take any block
    return ranked[2], ranked[3]


def _ranked_block(m: int, n: int, lanes: int, cpu: CpuInfo, threads: int, per_line: bool = False,
                  panels_shared: bool = False) -> tuple[float, float, int, int] | None:
    """(the best score, the chosen block's score, MR, NR) of the blocks `register_block` weighs, for
    `threads` that share the row tiles or, with `panels_shared`, the column panels (each thread then
    runs all of the rows, and only blocks whose panels share out evenly count); None where none does."""
    most_vectors = max(1, min(4, -(-n // lanes)))
    scored: list[tuple[float, float, int, int]] = []  # (score, -loads per FMA, nr, mr)
    for vectors in range(1, most_vectors + 1):
        nr = vectors * lanes
        panels = -(-n // nr)
        if panels_shared and (panels < threads or panels % threads):
            continue
        rows = min(MAX_ROWS, (cpu.vector_registers - vectors - 1) // vectors, max(1, m))
        for mr in range(1, rows + 1):
            tiles = -(-m // mr)
            # row tiles a thread runs times the threads (the busiest one's, where they share the tiles)
            slots = tiles if panels_shared else -(-tiles // threads) * threads
            useful = m / (slots * mr) * n / round_up(n, nr)
            efficiency = kernel_efficiency(mr, vectors, cpu) * useful
            scored.append((efficiency * (mr * vectors if per_line else 1), -(vectors + mr) / (mr * vectors), nr, mr))
    if not scored:
        return None
    best = max(score for score, *_ in scored)
    chosen, _, nr, mr = max((c for c in scored if c[0] >= best * (1 - SCORE_TIE)), key=lambda c: c[1:])
    return best, chosen, mr, nr


def shared_panels_block(m: int, n: int, lanes: int, cpu: CpuInfo, threads: int) -> tuple[int, int] | None:
    """(MR, NR) for `threads` that share B's column panels evenly, each running all of the rows (the
    direct variant's `by_panels`, which decides from the bytes each thread reads), where that block
    scores at least as well as `register_block`'s for threads sharing the row tiles (within
    SCORE_TIE). Few rows, as in the weight gradient of a convolution with few input channels, take
    such a block: there the default 5 x 64 block gave each of two threads one tile of the 9 rows (one
    channel, 3x3 taps) and had each read all of the output gradient; with 9 x 32 blocks, one panel a
    thread, they read it once between them (Zen 5, float32, 32 32x32 images, 1 -> 64 channels: the
    gradient program 0.85 -> 0.63 ms, 1.52 -> 1.32 with the caches cold). The caller takes it only
    where B's panel over all of K exceeds L2 (implicit_gemm.panels_shared). None with one thread or
    no even share of the panels."""
    if threads < 2:
        return None
    shared = _ranked_block(m, n, lanes, cpu, threads, panels_shared=True)
    rows = _ranked_block(m, n, lanes, cpu, threads)
    assert rows is not None
    return (shared[2], shared[3]) if shared is not None and shared[0] >= rows[1] * (1 - SCORE_TIE) else None


def widths_block(target: Target, widths: tuple[int, ...]) -> tuple[int, int]:
    """(mr, vectors) for a template whose width must be one of `widths` (in vectors; the in-place
    variant's divide the columns): the block with the most accumulators that fits the register file
    beside a B row and an A broadcast (mr x vectors + vectors + 1 registers), the widest on a tie:
    6 x 4 vectors with 32 registers (AVX-512), 4 x 3 with 16 (AVX2), whose 4 x 4 would spill."""
    assert target.host is not None
    regs = target.host.vector_registers

    def rows(vectors: int) -> int:
        return max(1, min(14, accumulators(target) // vectors, (regs - vectors - 1) // vectors))

    best = max(widths, key=lambda v: (rows(v) * v, v))
    return rows(best), best


def reduction_block(k: int, n: int, nr: int, size: int, cpu: CpuInfo) -> int:
    """KC: the B micro-panel in a quarter of L2, the packed B block in a quarter of L3, K in equal blocks."""
    most = min(cpu.l2_bytes // (4 * nr * size), cpu.l3_bytes // (4 * round_up(n, nr) * size))
    most = max(16, most)
    blocks = -(-k // most)
    return -(-k // blocks)


def row_block(m: int, mr: int, kc: int, size: int, cpu: CpuInfo, sharing: int) -> int:
    """MC: the packed A block in a quarter of L2; with `sharing` threads splitting the rows, row blocks
    that give each thread as nearly the same number of MR-row tiles as whole blocks can."""
    tiles = -(-m // mr)
    most = max(1, min(tiles, cpu.l2_bytes // (4 * kc * size * mr)))  # tiles per block
    if sharing <= 1:
        return mr * -(-tiles // -(-tiles // most))

    def heaviest(per_block: int) -> int:  # tiles of the busiest thread (tilec.schedule.nest.thread_share)
        blocks = -(-tiles // per_block)
        return min(per_block * -(-blocks // sharing), tiles)

    return mr * min(range(1, most + 1), key=lambda b: (heaviest(b), -b))


def default_knobs(plan: GemmPlan, dtype: str, target: Target, per_line: bool = False) -> GemmKnobs:
    """The blocking of the module doc for `plan` on `target` (`per_line`: see `register_block`)."""
    cpu = target.host
    assert cpu is not None
    size = itemsize(dtype)
    threads = target.cores
    sharing = 1 if plan.batch >= threads else threads  # row blocks are split over threads only then
    mr, nr = register_block(plan.m, plan.n, target.lanes(accumulator_dtype(dtype)), cpu, sharing, per_line)
    kc = reduction_block(plan.k, plan.n, nr, size, cpu)
    return GemmKnobs(mr=mr, nr=nr, kc=kc, mc=row_block(plan.m, mr, kc, size, cpu, sharing), threads=threads)


def worthwhile(plan: GemmPlan, params: LoweringParams) -> bool:
    """Small problems are faster as plain loops than packed."""
    return plan.n >= params.gemm_min_columns and plan.m * plan.n * plan.k >= params.gemm_min_work


OUTER_IDLE = 1.25  # the most the threads' longest share of the outer loop may take, over an even share's time


def plan_threads(plan: GemmPlan, knobs: GemmKnobs, target: Target, row_units: int,
                 work: Sequence[int] | None = None) -> tuple[bool, int, int]:
    """(parallel over the outer loop?, threads, outer iterations): the outer (batch) loop when it
    has an iteration per thread and the threads' contiguous shares of it take at most OUTER_IDLE
    times an even share's time, else `row_units` (row blocks or tiles) shared by the threads.
    `work` weighs each outer iteration where they differ (a transposed convolution's phases,
    direct_b.outer_work: their 4, 2, 2 and 1 filter taps ran 6 : 3 on two threads). So 9 filter
    taps on two threads (5 : 4) share the outer loop and 3 images (2 : 1) do not."""
    n_outer = plan.batch
    wanted = max(1, knobs.threads or target.cores)
    weights = list(work) if work is not None else [1] * n_outer
    per = -(-n_outer // wanted)
    longest = max((sum(weights[t * per:(t + 1) * per]) for t in range(wanted)), default=0)
    total = sum(weights)
    outer_parallel = wanted > 1 and n_outer >= wanted and total > 0 and longest * wanted <= OUTER_IDLE * total
    return outer_parallel, wanted if outer_parallel else max(1, min(wanted, row_units)), n_outer


def knob_problems(knobs: GemmKnobs, plan: GemmPlan, dtype: str, target: Target, tiles: bool = False) -> list[str]:
    """Why `knobs` cannot be built for `plan` on `target`, each problem naming its knob (types and
    the record's bounds are checked before: tilec.schedule.templates.knobs). With `tiles` the
    register block lives in AMX tiles (tilec.schedule.cpu.implicit_gemm.tiles), not vector registers."""
    compute = accumulator_dtype(dtype)
    lanes = target.lanes(compute)
    problems = []
    if knobs.nr % lanes:
        problems.append(f"nr ({knobs.nr}) must be a multiple of the {lanes} {compute} lanes of a vector register")
    if compute != dtype and not knobs.pack_b:
        problems.append(f"pack_b must be true for {dtype}: B is converted to {compute} while it is packed")
    vectors = -(-knobs.nr // lanes)
    if knobs.mr > most_rows(knobs.nr, lanes, target) and not tiles:
        problems.append(f"the mr x nr = {knobs.mr}x{knobs.nr} register block holds {knobs.mr * vectors} vectors; "
                        f"at most {2 * accumulators(target)} compile in reasonable time")
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


__all__ = ["DTYPES", "GemmKnobs", "MAX_THREADS", "accumulators", "default_knobs", "itemsize", "kernel_efficiency", "most_rows",
           "knob_problems", "plan_threads", "reduction_block", "register_block", "round_up", "row_block", "widths_block",
           "worthwhile"]
