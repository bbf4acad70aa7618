"""The implicit-GEMM template without packing A: the micro-kernel reads A in place.

Packing A (an implicit im2col for a convolution) pays off when each packed element is
reused across many column panels and its rows would not stay in cache otherwise. With few
panels (a convolution's output channels), or a matrix A read as it lies while B's panel over
all of K stays in L2, the copy costs more than it saves, so this variant broadcasts A straight
from memory:

    [Apad = A with zero borders]                     # only if A's accesses need padding
    for outer...:
      Bp[jr, kk, jj] = B(kk, col) or 0               # pack B once: all of K
      parallel over row tiles, or over column panels (`by_panels`):
        for jr in N / NR: for each row tile:
          acc[MR, NR] = 0
          for red...:                                # the original reduction loops: affine, no div/mod
            for ii unrolled MR: for jj vectorized NR:
              acc[ii, jj] += A(row_ii, red) * Bp[jr, kk(red), jj]
          C tile = epilogue(acc)

B's rows are packed in the order its source holds the reduction where that source is contiguous
along several reduction variables taken as one flat index (a convolution's OIHW filter F[co, c,
i, j] read as K[i, j, c, co]: row c * KH * KW + i * KW + j): whole panels are then read as vectors
along that index and transposed in registers (`b_source_order`, packed.transposing_pack), instead of
gathered element by element 9 KiB apart; the kernel reads them back in its own loop order.

bfloat16 operands on a CPU with AVX512-BF16 run in pairs (.pairs.pair_variable) where A's innermost
index is a reduction variable alone over a whole dimension of even size (a convolution's channels in
NHWC): that variable's loop steps by two, A's two neighbouring cells are broadcast as one 32-bit
word and B is packed as bfloat16 pairs, Bp[jr, kk, jj, 2], for one `vdpbf16ps` per vector
(tilec.ir.loop.DOT2_BF16): twice the products of a float32 FMA. Bp's rows then follow the
kernel's loop order. Where no such variable exists but A serves enough products per element (a
weight gradient's input, read at a stride), a copy of A holds each pair side by side (.pairs.pairs):
of A's size where a reduction variable indexes a dimension alone (the images: .padding.halved_pairs,
gathered straight from NCHW through the layout copy), else interleaved at twice its size
(.padding.interleaved_pairs). On Zen 4 the 3x3 stride-2 64->64 bfloat16 weight gradient of 32 32x32
images took 2.6-3.0 ms with the images halved against 4.0-6.5 ms interleaved (torch 3.0-3.4).

The reduction loops leave out the iterations where a guard of B on one reduction variable (and
outer ones) fails, as B is 0 there (`b_nonzero`: a transposed convolution's phases).

Where a layout copy alone reads the result (`out_copy`: a convolution computed channels-last and
copied back to NCHW), the tiles are stored straight into the copy's output and the copy is never
run. A tile's rows then stay within the run of rows the copy's output holds back to back (one
image's pixels: `tile_rows`), so the code generator stores each of its columns as one vector
(a transposing tile, tilec.codegen.llvm.transpose).

Row indices of a tile's last rows are clamped into range (their results are never
stored), so the kernel needs no branch. A's bound guards become a zero-padded copy;
any other guard on A (a constraint, a divisibility) makes this variant inapplicable.

Requires: a GemmPlan whose A has only its own bounds as guards (`padding`). Guarantees: the
statement's sum of products (and its fused epilogue), the reduction in the original loop order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tilec.ir import loop as L
from tilec.ir.dtypes import accumulator_dtype
from tilec.ir.bounds import BoundContraction, BoundProgram
from tilec.ir.lower import tuple_operand, zero_fill
from tilec.ir.loop_nest import index_expr
from tilec.ir.rewrite import substitute_expr
from tilec.schedule.cpu.implicit_gemm.direct_b import b_nonzero, b_source_order, outer_work, pair_rows_variable
from tilec.schedule.cpu.implicit_gemm.knobs import GemmKnobs, plan_threads
from tilec.schedule.cpu.implicit_gemm.padding import (Pads, access_padding, halved_pairs, interleaved_pairs, padded_index,
                                                      padded_operand)
from tilec.schedule.cpu.implicit_gemm.packed import transposable, transposed_panels, transposing_pack
from tilec.schedule.cpu.implicit_gemm.pairs import pair_dimension, pair_steps, pairs
from tilec.schedule.cpu.implicit_gemm.stored_tiles import tile_rows
from tilec.schedule.cpu.permute import LINE_BYTES
from tilec.schedule.nest import decompose, guarded_store, thread_share, threads_loop, transposing_tiles
from tilec.schedule.patterns.epilogue import Epilogue, epilogue_value
from tilec.schedule.patterns.gemm import GemmPlan
from tilec.schedule.patterns.layout_copy import Copy
from tilec.schedule.templates.base import Context


def padding(plan: GemmPlan, bp: BoundProgram) -> Pads | None:
    """A's zero borders for reading it in place, or None where a guard on A is not one of its
    bounds (see access_padding)."""
    box = {v: (lo, hi) for v, lo, hi in plan.outer + plan.rows + plan.red}
    return access_padding(plan.a, plan.a_guards, box, bp.shapes[plan.a.tensor])


@dataclass(frozen=True)
class DirectPlan:
    """A statement for the direct variant: its GEMM roles, A's zero borders, the fused epilogue,
    the layout copy it stores its tiles into (or None), whether B is packed through its layout
    copy (`b_through`)."""

    gemm: GemmPlan
    pads: Pads
    epilogue: Epilogue | None
    out_copy: Copy | None = None
    b_through: bool = True

    variant = "direct"

    def reads_through(self, knobs: GemmKnobs) -> frozenset[str]:
        """B is packed; A only when it is copied into a zero-padded buffer (else A is read in place,
        not through a copy, even where it is B too)."""
        a, b = self.gemm.a.tensor, self.gemm.b.tensor
        packed = {b} if self.b_through else set()
        if any(p != (0, 0) for p in self.pads):
            return frozenset({a} | packed)
        return frozenset(packed - {a})

    def stores(self) -> str | None:
        return self.out_copy.output if self.out_copy is not None else None

    def build(self, b: BoundContraction, knobs: GemmKnobs, ctx: Context) -> tuple[L.Stmt, list[L.Buffer]]:
        return build(b, self.gemm, self.pads, knobs, ctx, self.epilogue, self.out_copy)


def build(b: BoundContraction, plan: GemmPlan, pads: Pads, knobs: GemmKnobs, ctx: Context,
          epilogue: Epilogue | None = None, out_copy: Copy | None = None) -> tuple[L.Stmt, list[L.Buffer]]:
    bp, target = ctx.bp, ctx.target
    dt, ct = b.dtype, accumulator_dtype(b.dtype)  # the output's dtype, the one it is computed in (16-bit: float32)
    mr, nr = knobs.mr, knobs.nr
    m, n, k = plan.m, plan.n, plan.k
    panels = -(-n // nr)
    spanned = tile_rows(plan, b, out_copy, bp)  # the tiles cut each run of the last `spanned` rows
    prefix, suffix = plan.rows[:len(plan.rows) - spanned], plan.rows[len(plan.rows) - spanned:]
    run = math.prod(hi - lo + 1 for _, lo, hi in suffix)
    per_run = -(-run // mr)
    tiles = (m // run) * per_run
    outer_parallel, threads, n_outer = plan_threads(plan, knobs, target, tiles, outer_work(plan))
    wanted = max(1, knobs.threads or target.cores)
    share_panels = not outer_parallel and by_panels(plan, panels, wanted, bp.shapes[plan.a.tensor])
    if share_panels:
        threads = min(wanted, panels)
    out = b.output
    dest = epilogue.dest if epilogue is not None else out
    v = L.Var
    o, jr, jj, t, ir, ii = (f"{out}.{s}" for s in ("o", "jr", "jj", "t", "ir", "ii"))
    workspaces: list[L.Buffer] = []
    stmts: list[L.Stmt] = []

    a_tensor, a_dtype = plan.a.tensor, bp.dtypes[plan.a.tensor]
    a_offsets = [lo for lo, _ in pads]
    how = pairs(plan, pads, bp, target, nr)
    pair = how.var if how is not None else None
    layout = how.layout if how is not None else None
    a_shape, a_pads = bp.shapes[a_tensor], pads
    if layout == "halved":  # A's pairs side by side in a zero-bordered copy of its size, read through its layout copy
        assert how is not None and how.dim is not None
        fill, apair = halved_pairs(f"{out}.Apair", a_tensor, a_shape, pads, a_dtype, how.dim, ctx.folded.get(a_tensor),
                                   target.cores)
        stmts.append(fill)
        workspaces.append(apair)
        a_tensor = apair.name
    elif any(p != (0, 0) for p in pads) and (layout != "interleaved" or a_tensor in ctx.folded):
        widen = ct if pair is None and a_dtype == dt and dt != ct else None  # 16-bit A, no pairs: a float32 copy
        fill, apad = padded_operand(f"{out}.Apad", a_tensor, pads, ctx, widen)
        stmts.append(fill)
        workspaces.append(apad)
        a_tensor, a_shape, a_pads, a_dtype = apad.name, apad.shape, tuple((0, 0) for _ in pads), apad.dtype
    if layout == "interleaved":  # A's pairs side by side in a (zero-bordered) copy of their own
        assert pair is not None
        fill, apair = interleaved_pairs(f"{out}.Apair", a_tensor, a_shape, a_pads, a_dtype, pair_steps(plan, pair),
                                        target.cores)
        stmts.append(fill)
        workspaces.append(apair)
        a_tensor = apair.name
    packed = "bfloat16" if pair is not None else ct  # Bp's dtype: bfloat16 pairs, else the accumulator's
    step = 2 if pair is not None else 1  # reduction indices per packed row
    cp = f"{out}.cp"  # the pair variable's loop: pair cp holds its values 2 cp and 2 cp + 1
    red = tuple((cp, 0, (hi + 1) // 2 - 1) if var == pair else (var, lo, hi) for var, lo, hi in plan.red)
    pair_axis: tuple[int, ...] = (2,) if pair is not None else ()
    bp_buf = L.Buffer(f"{out}.Bp", packed, (threads if outer_parallel else 1, panels, k // step, nr) + pair_axis)
    workspaces.append(bp_buf)
    slot = v(t) if outer_parallel else L.const(0)
    outer_env = decompose(v(o), plan.outer) if plan.outer else {}

    def pair_env(element: int | str) -> dict[str, L.Expr]:
        """The pair variable's value at pair cp's `element` (0, 1 or a variable's name)."""
        e = L.const(element) if isinstance(element, int) else v(element)
        return {} if pair is None else {pair: L.add(L.mul(v(cp), L.const(2)), e)}

    # the flat reduction index (of packed rows) as an affine function of the reduction loop variables
    kk: L.Expr = L.const(0)
    stride = 1
    for var, lo, hi in reversed(red):
        kk = L.add(L.mul(L.sub(v(var), L.const(lo)), L.const(stride)), kk)
        stride *= hi - lo + 1

    # B's pack runs on all threads: across its panels, or where there are fewer panels than threads
    # (a weight gradient's 64 columns) across its outermost reduction loop, each thread packing
    # its own rows: a 1 -> 64 3x3 convolution's 32768 x 64 pairs took 0.4 ms on one thread
    pack_across_rows = not outer_parallel and 1 < wanted and panels < wanted

    def red_loops(body: L.Stmt, skip_zero_b: bool = False, parallel: bool = False, innermost: bool = True) -> L.Stmt:
        """The reduction loops around `body`; with `skip_zero_b`, without the iterations where B's
        guards make it 0 (b_nonzero); with `parallel`, the outermost one a parallel loop; without
        `innermost`, all but the innermost one (`body` runs it)."""
        tight = b_nonzero(plan, outer_env) if skip_zero_b else {}
        for var, lo, hi in reversed(red if innermost else red[:-1]):
            begin, end = tight.get(var, (L.const(lo), L.const(hi + 1)))
            body = L.For(var, begin, end, body, "parallel" if parallel and var == red[0][0] else "serial")
        return body

    # -- pack B: Bp[slot, jr, kk, jj] = B(red, col) for col < N, else 0 (with pairs: Bp[slot, jr, kk, jj, e])
    col_var, col_lo, _ = plan.col
    col_index = L.add(L.mul(v(jr), L.const(nr)), v(jj))
    e = f"{out}.e"

    def b_store(row: L.Expr, jj_: L.Expr, red_env: dict[str, L.Expr], edge: bool, pair_loop: bool = True,
                clamp: bool = False) -> L.Stmt:
        """Bp's cell (packed row `row`, column jj_ of panel jr) with the reduction variables `red_env`
        maps (the others are the pack loops' own); `edge`: the panel may pass N. With pairs, both
        elements e of the pair (`pair_loop`), or the one of the enclosing loop over e. With `clamp`
        (a B without guards), no branch: B read at column min(col, N - 1), which is in bounds, and 0
        stored where col >= N (a select)."""
        col = L.add(L.mul(v(jr), L.const(nr)), jj_)
        read_at = L.Bin("min", col, L.const(n - 1)) if clamp else col
        env = {**outer_env, **red_env, **pair_env(e), col_var: L.add(read_at, L.const(col_lo))}
        cell = (slot, v(jr), row, jj_) + ((v(e),) if pair is not None else ())
        if clamp:
            assert not plan.b_guards
            load = L.cast(packed, L.Load(plan.b.tensor, tuple(substitute_expr(index_expr(i), env)
                                                              for i in plan.b.indices), bp.dtypes[plan.b.tensor]))
            store: L.Stmt = L.Store(bp_buf.name, cell, L.Select(L.Cmp("lt", col, L.const(n)), load,
                                                               L.cast(packed, L.const(0))))
        else:
            store = guarded_store(bp_buf.name, cell, plan.b, plan.b_guards, env, packed,
                                  bp.dtypes[plan.b.tensor], [L.Cmp("lt", col, L.const(n))] if edge else [])
        return L.For(e, L.const(0), L.const(2), store) if pair is not None and pair_loop else store

    lanes = ctx.target.lanes(ct)
    source_order = b_source_order(plan, ctx) if not plan.b_guards and lanes > 1 and pair is None else None
    if source_order is not None:  # Bp's rows in the order B's source holds them: a flat index of its own
        kk = L.const(0)
        stride = 1
        for var, lo, hi in reversed(source_order):
            kk = L.add(L.mul(L.sub(v(var), L.const(lo)), L.const(stride)), kk)
            stride *= hi - lo + 1

    def vector_panel(clamp: bool) -> L.Stmt:
        """A panel of B packed in vectors along its columns; with `clamp`, one that may pass N."""
        return red_loops(L.For(jj, L.const(0), L.const(nr), b_store(kk, v(jj), {}, clamp, clamp=clamp), "vectorized"),
                         parallel=pack_across_rows)

    if plan.b_guards or pair is not None:  # (pairs: their own partial panels, below)
        pack_b_panel: L.Stmt = red_loops(L.For(jj, L.const(0), L.const(nr), b_store(kk, v(jj), {}, True)),
                                         parallel=pack_across_rows)
    else:  # any panel as vectors, a partial one clamped (no branch per element)
        pack_b_panel = vector_panel(clamp=True)
    whole = L.Cmp("le", L.mul(L.add(v(jr), L.const(1)), L.const(nr)), L.const(n))
    through = ctx.folded.get(plan.b.tensor)
    rows_var = pair_rows_variable(plan, through, pair) if through is not None else None
    if pair is not None and not plan.b_guards:
        # a partial panel (and a whole one, unless read as below): the pair's two rows of B read as
        # vectors across the panel and interleaved in registers (a 2 x side transposing tile,
        # tilec.codegen.llvm.transpose), its columns past N reading column N - 1 and storing 0 (a
        # select: no branch per element)
        side = min(nr, L.TRANSPOSE_MAX_SIDE)
        jo, ji = f"{out}.jo", f"{out}.ji"

        def pair_tile(edge: bool) -> L.Stmt:
            jj_ = L.add(L.mul(v(jo), L.const(side)), v(ji))
            store = b_store(kk, jj_, {}, edge, pair_loop=False, clamp=edge)
            tile = L.For(e, L.const(0), L.const(2), L.For(ji, L.const(0), L.const(side), store, "vectorized"), "unrolled")
            return red_loops(L.For(jo, L.const(0), L.const(nr // side), tile), parallel=pack_across_rows)

        partial_panel = pair_tile(True)
        pack_b_panel = L.If(whole, pair_tile(False), partial_panel) if rows_var is None else partial_panel
    else:
        partial_panel = pack_b_panel  # (a whole one packs as well)
    if rows_var is not None:
        # a whole panel read through B's layout copy from a source contiguous along the innermost
        # reduction loop's variable (a weight gradient's DO[n, co, x, y], read as DY[n, x, y, co]):
        # tiles whose rows are the panel's columns (with pairs: (column, pair element) as one flat
        # index), read as vectors along that variable and transposed in registers; the copy itself
        # is never made
        _, s_lo, s_hi = red[-1]
        side_ = max(2, LINE_BYTES // np.dtype(bp.dtypes[plan.b.tensor]).itemsize)  # a cache line of the source
        width = nr * (2 if pair is not None else 1)  # the panel's rows of the tile

        def panel_row(flat: L.Expr, s_at: L.Expr) -> L.Stmt:  # Bp's row flat = (column[, pair element]), s_at
            s_value = L.add(s_at, L.const(s_lo))
            env = {**outer_env, rows_var: s_value}
            jj_: L.Expr
            if pair is not None:
                jj_, element = L.Bin("div", flat, L.const(2)), L.Bin("mod", flat, L.const(2))
                env[pair] = L.add(L.mul(v(cp), L.const(2)), element)
            else:
                jj_ = flat
            env[col_var] = L.add(L.add(L.mul(v(jr), L.const(nr)), jj_), L.const(col_lo))
            load = L.cast(packed, L.Load(plan.b.tensor, tuple(substitute_expr(index_expr(i), env)
                                                              for i in plan.b.indices), bp.dtypes[plan.b.tensor]))
            cell = (slot, v(jr), substitute_expr(kk, {rows_var: s_value}), jj_) + ((element,) if pair is not None else ())
            return L.Store(bp_buf.name, cell, load)

        whole_panel = red_loops(transposing_tiles(f"{out}.pr", width, f"{out}.ps", s_hi - s_lo + 1, side_, panel_row),
                                parallel=pack_across_rows, innermost=False)
        pack_b_panel = L.If(whole, whole_panel, partial_panel)
    elif source_order is not None and transposable(nr, lanes, bp.dtypes[plan.b.tensor], ct):
        # a whole panel: B's source read as vectors along its flat reduction index
        pack_b_panel = L.If(whole, transposing_pack(lambda row, jj_: b_store(row, jj_, decompose(row, source_order),
                                                                             False), jj, nr, f"{out}.r", L.const(k), lanes),
                            pack_b_panel)
    elif pair is None and transposed_panels(plan.b, plan.b_guards, plan, nr, lanes, bp.dtypes[plan.b.tensor], ct):
        red_var, red_lo, _ = plan.red[0]  # a whole panel: B's rows read as vectors along the reduction
        pack_b_panel = L.If(whole, transposing_pack(lambda row, jj_: b_store(row, jj_, {red_var: L.add(row, L.const(red_lo))},
                                                                             False), jj, nr, f"{out}.r", L.const(k), lanes),
                            pack_b_panel)
    elif pair is None and not plan.b_guards:
        # a whole panel read as it lies: the clamped read of a partial one, min(col, N - 1), is not
        # contiguous, so the vectoriser loads it an element at a time (64 loads and inserts a row of a
        # 64-column panel). Zen 5, B in cache: 64x1024x1024 414-434 -> 377-384 us, 64x256x256 55-68 ->
        # 38-54; where B comes from memory (1024^3) the pack's time is memory's either way
        pack_b_panel = L.If(whole, vector_panel(clamp=False), pack_b_panel)
    pack_b = L.For(jr, L.const(0), L.const(panels), pack_b_panel,
                   "parallel" if not outer_parallel and panels >= threads > 1 else "serial")

    # -- micro-kernel: rows clamped into range, A read in place (from the padded copy)
    run_of = {} if not prefix else decompose(L.Bin("div", v(ir), L.const(per_run)), prefix)
    tile_in_run = v(ir) if not prefix else L.Bin("mod", v(ir), L.const(per_run))
    row_of_tile = L.add(L.mul(tile_in_run, L.const(mr)), v(ii))  # the row within its run
    row = L.Bin("min", row_of_tile, L.const(run - 1))
    env_a = {**outer_env, **run_of, **decompose(row, suffix), **pair_env(0)}
    a_index = padded_index(plan.a.indices, a_offsets, env_a)
    acc = L.Buffer(f"{out}.acc", ct, (mr, nr), "local")
    acc_now = L.Load(acc.name, (v(ii), v(jj)), ct)
    b_cell = (slot, v(jr), kk, v(jj))
    if pair is not None:  # acc += the pair's two products (vdpbf16ps), A's pair one 32-bit word
        if layout in ("halved", "interleaved"):  # the copy's last dimension holds the pair
            if layout == "halved":  # the pair variable's dimension indexed by the pair
                a_index = padded_index(plan.a.indices, a_offsets, {**env_a, pair: v(cp)})
            a_cells = [a_index + (L.const(x),) for x in (0, 1)]
        else:
            d = pair_dimension(bp.shapes[plan.a.tensor])
            assert d is not None
            a_cells = [a_index, a_index[:d] + (L.Bin("add", a_index[d], L.const(1)),) + a_index[d + 1:]]
        a_pair = [L.Load(a_tensor, index, a_dtype) for index in a_cells]
        b_pair = [L.Load(bp_buf.name, b_cell + (L.const(x),), packed) for x in (0, 1)]
        update: L.Expr = L.Call(L.DOT2_BF16, (acc_now, *a_pair, *b_pair), ct)
    else:
        a_value = tuple_operand(L.Load(a_tensor, a_index, a_dtype), dt, ct)  # (a widened copy is ct already)
        update = L.Bin("add", acc_now, L.Bin("mul", a_value, L.Load(bp_buf.name, b_cell, ct)))
    fma = L.Store(acc.name, (v(ii), v(jj)), update)
    kernel = red_loops(L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), fma, "vectorized"),
                             "unrolled"), skip_zero_b=True)

    cell_env = {**outer_env, **run_of, **decompose(row_of_tile, suffix), col_var: L.add(col_index, L.const(col_lo))}
    out_cell = tuple(substitute_expr(index_expr(e), cell_env) for e in b.out_indices)
    result = L.cast(dt, acc_now)  # the contraction's value of the cell (rounded once)
    final = result if epilogue is None else epilogue_value(epilogue, bp, out, result, out_cell)
    if out_copy is not None:
        dest, out_cell, final = out_copy.output, out_copy.dest_cell(out_cell), out_copy.apply(final)
    full = L.Bin("and", L.Cmp("le", L.mul(L.add(tile_in_run, L.const(1)), L.const(mr)), L.const(run)),
                 L.Cmp("le", L.mul(L.add(v(jr), L.const(1)), L.const(nr)), L.const(n)))
    inside = L.Bin("and", L.Cmp("lt", row_of_tile, L.const(run)), L.Cmp("lt", col_index, L.const(n)))
    zero_acc = L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), L.Store(
        acc.name, (v(ii), v(jj)), L.cast(ct, L.const(0))), "vectorized"), "unrolled")
    store_fast = L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr),
                                                          L.Store(dest, out_cell, final), "vectorized"), "unrolled")
    store_edge = L.For(ii, L.const(0), L.const(mr), L.For(jj, L.const(0), L.const(nr), L.If(
        inside, L.Store(dest, out_cell, final)), "vectorized"), "unrolled")  # masked stores
    micro = L.Allocate(acc, L.seq(zero_acc, kernel, L.If(full, store_fast, store_edge)))

    def chunk(var: str, total: int, body: L.Stmt) -> L.Stmt:
        return thread_share(t, threads, var, total, body)

    def thread_loop(body: L.Stmt) -> L.Stmt:
        return threads_loop(t, threads, body)

    if outer_parallel:
        per_outer = L.seq(pack_b, L.For(jr, L.const(0), L.const(panels), L.For(ir, L.const(0), L.const(tiles), micro)))
        stmts.append(thread_loop(chunk(o, n_outer, per_outer)))
    elif share_panels:  # each thread its own panels of B, all of A
        tiles_loop = thread_loop(chunk(jr, panels, L.For(ir, L.const(0), L.const(tiles), micro)))
        stmts.append(L.For(o, L.const(0), L.const(n_outer), L.seq(pack_b, tiles_loop)))
    else:
        tiles_loop = thread_loop(L.For(jr, L.const(0), L.const(panels), chunk(ir, tiles, micro)))
        stmts.append(L.For(o, L.const(0), L.const(n_outer), L.seq(pack_b, tiles_loop)))
    if plan.partial:  # cells no tuple writes are 0
        stmts.insert(0, zero_fill(dest, bp.shapes[dest] if out_copy is not None else b.shape, dt, parallel=threads > 1))
    return L.seq(*stmts), workspaces


def by_panels(plan: GemmPlan, panels: int, threads: int, a_shape: tuple[int, ...]) -> bool:
    """Whether the threads share B's column panels rather than the row tiles: when each thread then
    reads fewer bytes (its share of B and all of A, which it reads as it lies, against all of B
    and its share of A) and the panels share out evenly enough. A convolution on a small map is
    such a product: the 3x3 256->256 on a 2x2 map with 8 images has 32 rows of A (a 130 KB padded
    input) against 2.4 MB of weights, which each thread read whole when the rows were shared."""
    if threads < 2 or panels < threads or (panels % threads and panels < 4 * threads):
        return False
    a_elements = math.prod(a_shape)
    b_elements = plan.k * plan.n
    return b_elements / threads + a_elements < b_elements + a_elements / threads


__all__ = ["DirectPlan", "build", "by_panels", "padding"]
