"""The packed variant of the implicit-GEMM template: both operands packed into panels and a
register-blocked micro-kernel (the BLIS/GotoBLAS recipe).

The loop nest (knobs in capitals)::

    for outer...:                                  # batch
      for pc in K / KC:                              # reduction block
        Bp[jr, r, jj] = B(r, col) or 0               # pack B: KC x N in NR-wide panels
        parallel for t in THREADS:                   # a contiguous range of row blocks each
          for ic in its row blocks (MC rows each):
            Ap[t, ir, r, ii] = A(row, r) or 0        # pack A: MC x KC in MR-tall panels
            for jr in N / NR: for ir in MC / MR:
              acc[MR, NR] = 0, or the C tile when pc > 0
              for r in KC: for ii unrolled MR: for jj vectorized NR:
                acc[ii, jj] += Ap[t, ir, r, ii] * Bp[jr, r, jj]
              C tile = acc                           # vector stores; a guarded path at the edges

Guards (padding, strides, constraints) and the zero padding of partial panels live in
the packing loops, so the micro-kernel has no branch. Operands are converted to the
accumulator's dtype while packing: the output's, or float32 for a 16-bit float output, whose
partial sums between reduction blocks then live in a float32 workspace (one rounding per cell).

Requires: a GemmPlan of the statement (tilec.schedule.patterns.gemm) and knobs that passed the
template's checks. Guarantees: the statement's sum of products (and its fused epilogue) in the
output, the reduction blocked by KC in the original order per cell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tilec.ir import loop as L
from tilec.ir.bounds import BoundAccess, BoundContraction, Condition
from tilec.ir.dtypes import accumulator_dtype
from tilec.ir.lower import zero_fill
from tilec.ir.loop_nest import index_expr
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.cpu.implicit_gemm.knobs import GemmKnobs, plan_threads, round_up
from tilec.schedule.cpu.implicit_gemm.tiles import TILE_K, uses_tiles
from tilec.schedule.nest import decompose, guarded_store, thread_share, threads_loop
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.templates.base import Context
from tilec.target import Target, has_pair_dot


@dataclass(frozen=True)
class PackedPlan:
    """A statement for the packed variant: its GEMM roles and the epilogue fused into it."""

    gemm: GemmPlan
    epilogue: Epilogue | None
    tiles: bool = False  # the micro-kernel on AMX tiles (.tiles)

    variant = "packed"

    def reads_through(self, knobs: GemmKnobs) -> frozenset[str]:
        """Operands read only while packing them: a layout copy of either folds into the packing; on
        tiles B's only. A is packed in runs of 32 reduction values, which a copy of a convolution's
        NCHW input into NHWC gives as vector loads where reading through it gathers one value per
        channel (Xeon with AMX, the 3x3 64 -> 64 bfloat16 convolution on 8 56x56 images: 14.1 ms
        through the copy)."""
        return frozenset({self.gemm.b.tensor} if self.tiles else {self.gemm.a.tensor, self.gemm.b.tensor})

    def stores(self) -> str | None:
        return None

    def build(self, b: BoundContraction, knobs: GemmKnobs, ctx: Context) -> tuple[L.Stmt, list[L.Buffer]]:
        return build(b, self.gemm, knobs, ctx, self.epilogue)


def build(b: BoundContraction, plan: GemmPlan, knobs: GemmKnobs, ctx: Context,
          epilogue: Epilogue | None = None) -> tuple[L.Stmt, list[L.Buffer]]:
    """The loop nest of the template and the workspaces it needs.

    Parallelism: over the outer (batch) loop when it has an iteration per thread, each thread
    packing into its own slices; otherwise over blocks of rows, after B is packed once.
    """
    bp, target = ctx.bp, ctx.target
    dt, ct = b.dtype, accumulator_dtype(b.dtype)  # the output's dtype, the one it is computed in
    mr, nr, mc = knobs.mr, knobs.nr, knobs.mc
    m, n, k = plan.m, plan.n, plan.k
    pairs = bf16_pairs(plan, bp.dtypes, target, nr)
    tiles = uses_tiles(pairs, target, mr, nr)  # the micro-kernel one TileDot (AMX: .tiles)
    kc = min(knobs.kc, k)
    kc += kc % 2 if pairs else 0  # whole pairs (an odd K's last pair is padded with 0)
    kc = round_up(kc, TILE_K) if tiles else kc  # whole tile steps (padded with 0 past K)
    step = 2 if pairs else 1  # reduction indices per packed row
    packed = "bfloat16" if pairs else ct
    pair_axis: tuple[int, ...] = (2,) if pairs else ()
    panels = -(-n // nr)
    row_blocks = -(-m // mc)
    outer_parallel, threads, n_outer = plan_threads(plan, knobs, target, row_blocks)
    out = b.output
    dest = epilogue.dest if epilogue is not None else out
    bp_buf = L.Buffer(f"{out}.Bp", packed, (threads if outer_parallel else 1, panels, kc // step, nr) + pair_axis)
    # with tiles, Ap in tile steps: each step's MR rows of 32 reduction values, one contiguous run
    ap_shape = (threads, mc // mr, kc // TILE_K, mr, TILE_K) if tiles else (threads, mc // mr, kc // step, mr) + pair_axis
    ap_buf = L.Buffer(f"{out}.Ap", packed, ap_shape)
    blocks = -(-k // kc)
    dest_dt = bp.dtypes.get(dest, dt)  # (an epilogue may round a product held in float32 to 16 bits)
    partial_buf = L.Buffer(f"{out}.partial", ct, b.shape) if ct != dest_dt and blocks > 1 else None
    partials = dest if partial_buf is None else partial_buf.name  # where a tile's sums wait for the next block
    v = L.Var
    o, pc, r, jr, jj, t, ic, ir, ii, p = (f"{out}.{s}" for s in ("o", "pc", "r", "jr", "jj", "t", "ic", "ir", "ii", "p"))
    b_slot = v(t) if outer_parallel else L.const(0)
    outer_env = decompose(v(o), plan.outer) if plan.outer else {}
    def flat_k(row: L.Expr) -> L.Expr:
        """The flat reduction index of packed row `row` (and pair element p)."""
        return L.add(L.mul(v(pc), L.const(kc)), L.add(L.mul(row, L.const(2)), v(p)) if pairs else row)

    kk = flat_k(v(r))
    rows_left = L.sub(L.const(k), L.mul(v(pc), L.const(kc)))
    kc_here: L.Expr = L.Bin("min", L.const(kc // step), L.Bin("div", L.add(rows_left, L.const(step - 1)), L.const(step))
                    if pairs else rows_left)  # packed rows in this reduction block
    exact_rows = L.Bin("min", L.const(kc // step), L.Bin("div", rows_left, L.const(step)))  # rows wholly in K
    if tiles:  # whole tile steps, their rows past K zero
        kc_here = L.mul(L.Bin("div", L.add(kc_here, L.const(L.TILE_PAIRS - 1)), L.const(L.TILE_PAIRS)),
                        L.const(L.TILE_PAIRS))
    in_k: list[L.Expr] = [L.Cmp("lt", kk, L.const(k))] if pairs else []

    def paired(index: tuple[L.Expr, ...]) -> tuple[L.Expr, ...]:
        """A packed cell's index: with pairs, the pair element p last."""
        return index + (v(p),) if pairs else index

    def over_pair(body: L.Stmt) -> L.Stmt:
        """`body` for both elements of a pair (as is without pairs)."""
        return L.For(p, L.const(0), L.const(2), body) if pairs else body

    lanes = ctx.target.lanes(packed)

    def transposes(op: BoundAccess, guards: tuple[Condition, ...], width: int) -> bool:
        return not pairs and transposed_panels(op, guards, plan, width, lanes, bp.dtypes[op.tensor], packed)

    # the first row of row panel ir and column of column panel jr; whether each panel is whole
    row0, col0 = L.add(L.mul(v(ic), L.const(mc)), L.mul(v(ir), L.const(mr))), L.mul(v(jr), L.const(nr))
    whole_a = L.Cmp("le", L.add(row0, L.const(mr)), L.const(m))
    whole_b = L.Cmp("le", L.mul(L.add(v(jr), L.const(1)), L.const(nr)), L.const(n))

    # -- pack B: Bp[slot, jr, r, jj] = B(kk, col) for col = jr * NR + jj < N, else 0
    col_var, col_lo, _ = plan.col

    def b_store(row: L.Expr, jj_: L.Expr, edge: bool, pair_loop: bool = True) -> L.Stmt:
        """Bp's cell (packed row `row`, column jj_ of panel jr); `edge`: the panel may pass N or K.
        With pairs, both elements p of the pair (`pair_loop`), or the one of an enclosing loop over p."""
        col = L.add(col0, jj_)
        env = {**outer_env, **decompose(flat_k(row), plan.red), col_var: L.add(col, L.const(col_lo))}
        store = guarded_store(bp_buf.name, paired((b_slot, v(jr), row, jj_)), plan.b, plan.b_guards, env, packed,
                              bp.dtypes[plan.b.tensor], [L.Cmp("lt", col, L.const(n))] + in_k if edge else [])
        return over_pair(store) if pair_loop else store

    col_index = L.add(col0, v(jj))
    pack_b_panel: L.Stmt = L.For(r, L.const(0), kc_here, L.For(jj, L.const(0), L.const(nr), b_store(v(r), v(jj), True)))
    if transposes(plan.b, plan.b_guards, nr):  # a whole panel: B's rows read as vectors along the reduction
        pack_b_panel = L.If(whole_b, transposing_pack(lambda row, jj_: b_store(row, jj_, False), jj, nr, r, kc_here, lanes),
                            pack_b_panel)
    elif pairs:  # a whole panel's rows wholly in K: each pair's two rows of B read as vectors across the
        # panel and interleaved in registers (a 2 x side transposing tile, tilec.codegen.llvm.transpose)
        side = min(nr, L.TRANSPOSE_MAX_SIDE)
        jo, ji = f"{out}.jo", f"{out}.ji"
        tile_ = L.For(p, L.const(0), L.const(2), L.For(ji, L.const(0), L.const(side), b_store(
            v(r), L.add(L.mul(v(jo), L.const(side)), v(ji)), False, pair_loop=False), "vectorized"), "unrolled")
        rest = L.For(r, exact_rows, kc_here, L.For(jj, L.const(0), L.const(nr), b_store(v(r), v(jj), True)))
        pack_b_panel = L.If(whole_b, L.seq(L.For(r, L.const(0), exact_rows, L.For(jo, L.const(0), L.const(nr // side), tile_)),
                                           rest), pack_b_panel)
    pack_b = L.For(jr, L.const(0), L.const(panels), pack_b_panel,
                   "parallel" if not outer_parallel and panels >= threads > 1 else "serial")

    # -- pack A: Ap[t, ir, r, ii] = A(row, kk) for row = ic * MC + ir * MR + ii < M, else 0
    def a_store(row: L.Expr, ii_: L.Expr, edge: bool) -> L.Stmt:
        """Ap's cell (packed row `row`, row ii_ of panel ir); `edge`: the panel may pass M."""
        m_row = L.add(row0, ii_)
        env = {**outer_env, **decompose(flat_k(row), plan.red), **decompose(m_row, plan.rows)}
        return over_pair(guarded_store(ap_buf.name, paired((v(t), v(ir), row, ii_)), plan.a, plan.a_guards, env,
                                       packed, bp.dtypes[plan.a.tensor],
                                       [L.Cmp("lt", m_row, L.const(m))] + in_k if edge else []))

    row_index = L.add(row0, v(ii))
    pack_a_panel: L.Stmt = L.For(r, L.const(0), kc_here, L.For(ii, L.const(0), L.const(mr), a_store(v(r), v(ii), True)))
    if transposes(plan.a, plan.a_guards, mr):  # a whole panel: A's rows read as vectors along the reduction
        pack_a_panel = L.If(whole_a, transposing_pack(lambda row, ii_: a_store(row, ii_, False), ii, mr, r, kc_here, lanes),
                            pack_a_panel)
    if tiles:  # Ap[t, ir, s, ii, q] = A(row, pc * KC + 32 s + q): a tile step's rows side by side
        st, q = f"{out}.st", f"{out}.q"
        step0 = L.add(L.mul(v(pc), L.const(kc)), L.mul(v(st), L.const(TILE_K)))  # the step's first reduction index
        kq = L.add(step0, v(q))
        m_row = L.add(row0, v(ii))
        red_var, red_lo, red_hi = plan.red[-1]
        if (red_hi - red_lo + 1) % TILE_K == 0:  # a step lies within one run of the innermost reduction variable:
            red_env = decompose(step0, plan.red)  # the others are the step's, so A's row reads as a vector
            red_env[red_var] = L.add(red_env[red_var], v(q))
        else:
            red_env = decompose(kq, plan.red)
        env_q = {**outer_env, **red_env, **decompose(m_row, plan.rows)}

        def a_steps(begin: L.Expr, end: L.Expr, edge: bool) -> L.Stmt:
            # row by row (its indices computed once), each step's 32 values a line of Ap
            return L.For(ii, L.const(0), L.const(mr), L.For(st, begin, end, L.For(q, L.const(0), L.const(TILE_K), guarded_store(
                ap_buf.name, (v(t), v(ir), v(st), v(ii), v(q)), plan.a, plan.a_guards, env_q, packed,
                bp.dtypes[plan.a.tensor], [L.Cmp("lt", m_row, L.const(m)), L.Cmp("lt", kq, L.const(k))] if edge else []),
                "vectorized")))

        exact = L.Bin("div", exact_rows, L.const(L.TILE_PAIRS))  # steps wholly in K
        steps = L.Bin("div", kc_here, L.const(L.TILE_PAIRS))
        pack_a_panel = L.If(whole_a, L.seq(a_steps(L.const(0), exact, False), a_steps(exact, steps, True)),
                            a_steps(L.const(0), steps, True))
    pack_a = L.For(ir, L.const(0), L.const(mc // mr), pack_a_panel)

    # -- micro-kernel on acc[MR, NR]
    acc = L.Buffer(f"{out}.acc", ct, (mr, nr), "local")
    acc_now = L.Load(acc.name, (v(ii), v(jj)), ct)
    kernel: L.Stmt
    if tiles:  # (the first block starts from zeroed tiles)
        kernel = L.TileDot(acc.name, (L.const(0), L.const(0)), ap_buf.name,
                           (v(t), v(ir), L.const(0), L.const(0), L.const(0)),
                           bp_buf.name, (b_slot, v(jr), L.const(0), L.const(0), L.const(0)), kc_here,
                           L.Cmp("eq", v(pc), L.const(0)), mr, nr)
    else:
        if pairs:  # acc += the pair's two products (vdpbf16ps: tilec.ir.loop.DOT2_BF16)
            a_pair = [L.Load(ap_buf.name, (v(t), v(ir), v(r), v(ii), L.const(e)), packed) for e in (0, 1)]
            b_pair = [L.Load(bp_buf.name, (b_slot, v(jr), v(r), v(jj), L.const(e)), packed) for e in (0, 1)]
            update: L.Expr = L.Call(L.DOT2_BF16, (acc_now, *a_pair, *b_pair), ct)
        else:
            update = L.Bin("add", acc_now, L.Bin("mul", L.Load(ap_buf.name, (v(t), v(ir), v(r), v(ii)), ct),
                                                 L.Load(bp_buf.name, (b_slot, v(jr), v(r), v(jj)), ct)))
        fma = L.Store(acc.name, (v(ii), v(jj)), update)
        kernel = L.For(r, L.const(0), kc_here,
                       L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), fma, "vectorized"),
                             "unrolled"))

    # -- the C tile <-> acc, at dest[outer..., rows(row0 + ii)..., col0 + jj]
    row_of_tile = row_index
    cell_env = {**outer_env, **decompose(row_of_tile, plan.rows), col_var: L.add(col_index, L.const(col_lo))}
    out_cell = tuple(substitute_expr(index_expr(e), cell_env) for e in b.out_indices)
    partial = L.cast(ct, L.Load(partials, out_cell, ct if partial_buf is not None else dest_dt))
    result = L.cast(dt, acc_now)  # the contraction's value of the cell (rounded once)
    final = result if epilogue is None else epilogue_value(epilogue, bp, out, result, out_cell)
    zero = L.cast(ct, L.const(0))
    full = L.Bin("and", whole_a, whole_b)
    inside = L.Bin("and", L.Cmp("lt", row_of_tile, L.const(m)), L.Cmp("lt", col_index, L.const(n)))
    first = L.Cmp("eq", v(pc), L.const(0))
    last = L.Cmp("eq", v(pc), L.const(blocks - 1))

    def tile(body: L.Stmt, fast: bool) -> L.Stmt:
        return L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), body,
                                                       "vectorized" if fast else "serial"),
                     "unrolled" if fast else "serial")

    def to_acc(value: L.Expr) -> L.Stmt:
        return L.Store(acc.name, (v(ii), v(jj)), value)

    def to_dest(value: L.Expr) -> L.Stmt:
        return L.Store(dest, out_cell, value)

    def stores(guard: L.Expr | None) -> L.Stmt:
        """The tile's sums: the final values after the last block, else the partial sums."""
        def guarded(s: L.Stmt) -> L.Stmt:
            return s if guard is None else L.If(guard, s)
        if partial_buf is None:  # partial sums wait in the destination itself (or there is one block)
            return tile(guarded(to_dest(L.Select(last, final, acc_now) if ct == dest_dt else final)), True)
        return L.If(last, tile(guarded(to_dest(final)), True),
                    tile(guarded(L.Store(partials, out_cell, acc_now)), True))

    # Edge tiles keep the vector loops: the lane-varying `if`s become masked loads and stores.
    load_fast = tile(to_acc(L.Select(first, zero, partial)), True)
    load_edge = tile(L.If(L.Bin("and", L.Not(first), inside), to_acc(partial), to_acc(zero)), True)
    load: L.Stmt = L.If(full, load_fast, load_edge)
    if tiles:  # the tiles start from 0 in the first block: only later ones load the partial sums
        load = L.If(L.Not(first), L.If(full, tile(to_acc(partial), True),
                                       tile(L.If(inside, to_acc(partial), to_acc(zero)), True)))
    micro = L.Allocate(acc, L.seq(load, kernel, L.If(full, stores(None), stores(inside))))

    rows_here = L.Bin("min", L.const(mc // mr), L.Bin("div", L.add(L.sub(L.const(m), L.mul(v(ic), L.const(mc))),
                                                                   L.const(mr - 1)), L.const(mr)))
    tiles_loop: L.Stmt = L.For(jr, L.const(0), L.const(panels), L.For(ir, L.const(0), rows_here, micro))
    block = L.seq(pack_a, L.TileRegion(tiles_loop) if tiles else tiles_loop)

    def chunk(var: str, total: int, body: L.Stmt) -> L.Stmt:
        return thread_share(t, threads, var, total, body)

    def thread_loop(body: L.Stmt) -> L.Stmt:
        return threads_loop(t, threads, body)

    if outer_parallel:
        per_pc = L.seq(pack_b, L.For(ic, L.const(0), L.const(row_blocks), block))
        nest = thread_loop(chunk(o, n_outer, L.For(pc, L.const(0), L.const(blocks), per_pc)))
    else:
        per_pc = L.seq(pack_b, thread_loop(chunk(ic, row_blocks, block)))
        nest = L.For(o, L.const(0), L.const(n_outer), L.For(pc, L.const(0), L.const(blocks), per_pc))
    if plan.partial:  # cells no tuple writes are 0
        nest = L.seq(zero_fill(dest, b.shape, dt, parallel=threads > 1), nest)
    return nest, [bp_buf, ap_buf] + ([partial_buf] if partial_buf is not None else [])


_TRANSPOSABLE = ("float32", "float64")  # packed dtypes the register transposes handle


def _tile_side(width: int, lanes: int) -> int | None:
    """The side across the panel of a transposed tile: whole vectors when the panel is, else the
    panel's width when it fits the registers (tilec.ir.loop.TRANSPOSE_MAX_SIDE), else None."""
    if width % lanes == 0:
        return lanes
    return width if 2 <= width <= L.TRANSPOSE_MAX_SIDE else None


def transposed_panels(op: BoundAccess, guards: tuple[Condition, ...], plan: GemmPlan, width: int, lanes: int,
                      dtype: str, packed: str) -> bool:
    """Whether panels `width` wide of operand `op` pack as register transposes (transposing_pack):
    its source is contiguous along the reduction (one reduction variable, alone in the innermost
    index), unguarded and already in the packed dtype, one the transposes handle."""
    return (not guards and len(plan.red) == 1 and op.indices[-1].lone_var == plan.red[0][0]
            and transposable(width, lanes, dtype, packed))


def transposable(width: int, lanes: int, dtype: str, packed: str) -> bool:
    """Whether panels `width` wide of a `dtype` source packed as `packed` can be register transposes."""
    return packed in _TRANSPOSABLE and lanes > 1 and dtype == packed and _tile_side(width, lanes) is not None


def transposing_pack(store_at: Callable[[L.Expr, L.Expr], L.Stmt], across: str, width: int, along: str,
                     rows: L.Expr, lanes: int) -> L.Stmt:
    """``for along in [0, rows): for across in [0, width): store_at(along, across)`` for a source
    contiguous along `along` and a panel contiguous across: tiles of `lanes` rows by a side across,
    each loaded as vectors along the source and stored as vectors across the panel after a
    transpose in registers (tilec.codegen.llvm.transpose), then the last rows one by one."""
    side = _tile_side(width, lanes)
    assert side is not None
    v = L.Var
    row_block, col_block, col, row = f"{along}b", f"{across}b", f"{across}1", f"{along}1"
    tiles_end = L.Bin("div", rows, L.const(lanes))
    tile = L.For(col, L.const(0), L.const(side),
                 L.For(row, L.const(0), L.const(lanes),
                       store_at(L.add(L.mul(v(row_block), L.const(lanes)), v(row)),
                                L.add(L.mul(v(col_block), L.const(side)), v(col))), "vectorized"), "unrolled")
    tiles = L.For(row_block, L.const(0), tiles_end, L.For(col_block, L.const(0), L.const(width // side), tile))
    rest = L.For(along, L.mul(tiles_end, L.const(lanes)), rows,
                 L.For(across, L.const(0), L.const(width), store_at(v(along), v(across))))
    return L.seq(tiles, rest)


def bf16_dot(target: Target) -> bool:
    """Whether `target`'s CPU has AVX512-BF16's pair dot product (on 512-bit vectors)."""
    return target.host is not None and has_pair_dot(target.host)


def bf16_pairs(plan: GemmPlan, dtypes: dict[str, str], target: Target, nr: int) -> bool:
    """Whether the micro-kernel may run on bfloat16 pairs (twice the products of a float32 FMA per
    instruction): bfloat16 operands, a bfloat16 output or a float32 one (a bfloat16 product held in
    float32 for its epilogue: tilec.ir.dtypes.Widening), on a CPU that has them, NR whole vectors."""
    return (plan.dtype in ("bfloat16", "float32") and nr % 16 == 0 and bf16_dot(target)  # operands may be a template's own buffers
            and dtypes.get(plan.a.tensor) == dtypes.get(plan.b.tensor) == "bfloat16")


__all__ = ["PackedPlan", "bf16_dot", "bf16_pairs", "build", "transposable", "transposed_panels", "transposing_pack"]
