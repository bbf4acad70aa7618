"""Hand-built GPU PrimFuncs (loop IR, GPU conventions) with numpy references.

Shared by tests/test_cuda_codegen.py (render and nvcc checks) and tests/test_cuda_gpu.py
(real launches). Each case gives the function, inputs for every parameter, and the
expected values of the parameters it writes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.schedule.gpu.tensorcore_knobs import WmmaGemmConfig

V = L.Var
F16, F32 = "float16", "float32"


@dataclass(frozen=True)
class Case:
    func: L.PrimFunc
    make_inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    expected: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def c(v: int) -> L.Const:
    return L.const(v)


def ld(buf: str, *idx: L.Expr, dtype: str = F32) -> L.Load:
    return L.Load(buf, tuple(idx), dtype)


def block_thread(n_blocks: int, n_threads: int, body: L.Stmt, bx: str = "bx", tx: str = "tx") -> L.Stmt:
    return L.For(bx, c(0), c(n_blocks), L.For(tx, c(0), c(n_threads), body, "threadIdx.x"), "blockIdx.x")


def elementwise(n: int = 1000, threads: int = 128) -> Case:
    """C[i] = max(A[i], exp(B[i])) over a grid that overshoots n (a guard skips the excess)."""
    i = L.add(L.mul(V("bx"), c(threads)), V("tx"))
    store = L.Store("C", (i,), L.Bin("max", ld("A", i), L.Call("exp", (ld("B", i),), F32)))
    body = block_thread(-(-n // threads), threads, L.If(L.Cmp("lt", i, c(n)), store))
    bufs = tuple(L.Buffer(name, F32, (n,)) for name in "ABC")
    return Case(L.PrimFunc("ew", bufs, body),
                lambda r: {"A": r.standard_normal(n).astype(np.float32),
                           "B": r.standard_normal(n).astype(np.float32), "C": np.zeros(n, np.float32)},
                lambda a: {"C": np.maximum(a["A"], np.exp(a["B"]))})


def block_sum(rows: int = 8, cols: int = 1000, threads: int = 128) -> Case:
    """O[r] = sum(A[r, :]): per-thread partial sums, then a shared-memory tree with barriers."""
    part = L.Buffer("part", F32, (threads,), "shared")
    acc = L.Buffer("acc", F32, (1,), "local")
    # the loop over j strides by `threads`: j = tx + threads * jj
    jj_loop = L.For("jj", c(0), c(-(-cols // threads)), L.If(
        L.Cmp("lt", L.add(V("tx"), L.mul(V("jj"), c(threads))), c(cols)),
        L.Store("acc", (c(0),), L.add(ld("acc", c(0)), ld("A", V("r"), L.add(V("tx"), L.mul(V("jj"), c(threads))))))))
    partial = L.Allocate(acc, L.seq(L.Store("acc", (c(0),), L.const(0.0, F32)), jj_loop,
                                    L.Store("part", (V("tx"),), ld("acc", c(0)))))
    steps: list[L.Stmt] = [L.For("tx", c(0), c(threads), partial, "threadIdx.x"), L.Barrier()]
    s = threads // 2
    while s >= 1:
        steps.append(L.For("tx", c(0), c(threads), L.If(L.Cmp("lt", V("tx"), c(s)), L.Store(
            "part", (V("tx"),), L.add(ld("part", V("tx")), ld("part", L.add(V("tx"), c(s)))))), "threadIdx.x"))
        steps.append(L.Barrier())
        s //= 2
    steps.append(L.Store("O", (V("r"),), ld("part", c(0))))
    body = L.For("r", c(0), c(rows), L.Allocate(part, L.seq(*steps)), "blockIdx.x")
    bufs = (L.Buffer("A", F32, (rows, cols)), L.Buffer("O", F32, (rows,)))
    return Case(L.PrimFunc("block_sum", bufs, body),
                lambda r: {"A": r.standard_normal((rows, cols)).astype(np.float32), "O": np.zeros(rows, np.float32)},
                lambda a: {"O": a["A"].sum(axis=1)})


def axpy4(n: int = 4096, threads: int = 128, misalign: int = 0) -> Case:
    """C[4i + v] = 2 * A[4i + v + misalign] + B[4i + v], the v loop vectorized (float4 when aligned)."""
    base = L.mul(L.add(L.mul(V("bx"), c(threads)), V("tx")), c(4))
    at = L.add(base, V("v"))
    src = L.add(at, c(misalign))
    value = L.add(L.mul(L.const(2.0, F32), ld("A", src)), ld("B", at))
    vec = L.For("v", c(0), c(4), L.Store("C", (at,), value), "vectorized")
    body = block_thread(n // (4 * threads), threads, vec)
    bufs = (L.Buffer("A", F32, (n + misalign,)), L.Buffer("B", F32, (n,)), L.Buffer("C", F32, (n,)))
    return Case(L.PrimFunc(f"axpy4_m{misalign}", bufs, body),
                lambda r: {"A": r.standard_normal(n + misalign).astype(np.float32),
                           "B": r.standard_normal(n).astype(np.float32), "C": np.zeros(n, np.float32)},
                lambda a: {"C": 2 * a["A"][misalign:] + a["B"]})


def half_ops(n: int = 512, threads: int = 64) -> Case:
    """H[i] = tanh(X[i]) * Y[i] + X[i] / Y[i] on float16, computed in float32 and rounded once where
    stored; F[i] = float32 of that."""
    i = L.add(L.mul(V("bx"), c(threads)), V("tx"))
    x, y = ld("X", i, dtype="float16"), ld("Y", i, dtype="float16")
    t = L.Call("tanh", (x,), "float16")
    value = L.add(L.mul(t, y), L.Bin("div", x, y))
    body = block_thread(n // threads, threads, L.seq(
        L.Store("H", (i,), value),
        L.Store("F", (i,), L.Cast(F32, ld("H", i, dtype="float16")))))
    bufs = (L.Buffer("X", "float16", (n,)), L.Buffer("Y", "float16", (n,)), L.Buffer("H", "float16", (n,)),
            L.Buffer("F", F32, (n,)))

    def expected(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x, y = a["X"].astype(np.float32), a["Y"].astype(np.float32)
        h = (np.tanh(x) * y + x / y).astype(np.float16)
        return {"H": h, "F": h.astype(np.float32)}

    return Case(L.PrimFunc("half_ops", bufs, body),
                lambda r: {"X": r.standard_normal(n).astype(np.float16),
                           "Y": (r.uniform(0.5, 2.0, n) * r.choice([-1, 1], n)).astype(np.float16),
                           "H": np.zeros(n, np.float16), "F": np.zeros(n, np.float32)},
                expected)


def int_semantics(n: int = 256) -> Case:
    """Floor division and modulo (negative operands, divisor 0), wrapping int32, NaN max, bools."""
    i = V("tx")
    a, b = ld("IA", i, dtype="int32"), ld("IB", i, dtype="int32")
    fa, fb = ld("FA", i), ld("FB", i)
    body = L.For("tx", c(0), c(n), L.seq(
        L.Store("Q", (i,), L.Bin("div", a, b)),
        L.Store("R", (i,), L.Bin("mod", a, b)),
        L.Store("W", (i,), L.Bin("mul", a, L.const(1 << 30, "int32"))),
        L.Store("M", (i,), L.Bin("max", fa, fb)),
        L.Store("FM", (i,), L.Bin("mod", fa, fb)),
        L.Store("P", (i,), L.Select(L.Bin("and", L.Cmp("gt", a, b), L.Not(L.Cmp("eq", fa, fa))),
                                    L.Cast("int32", fa), L.Call("abs", (b,), "int32"))),
        L.Store("Bo", (i,), L.Cast("bool", fa)),
    ), "threadIdx.x")
    i32, f32 = "int32", F32
    bufs = tuple(L.Buffer(nm, dt, (n,)) for nm, dt in [
        ("IA", i32), ("IB", i32), ("FA", f32), ("FB", f32), ("Q", i32), ("R", i32), ("W", i32), ("M", f32),
        ("FM", f32), ("P", i32), ("Bo", "bool")])

    def inputs(r: np.random.Generator) -> dict[str, np.ndarray]:
        fa = r.standard_normal(n).astype(np.float32) * 4
        fa[::7] = np.nan
        fb = r.standard_normal(n).astype(np.float32)
        fb[3::11] = np.nan
        ib = r.integers(-6, 7, n).astype(np.int32)
        ib[::13] = 0
        out = {"IA": r.integers(-50, 51, n).astype(np.int32), "IB": ib, "FA": fa, "FB": fb}
        for nm, dt in [("Q", i32), ("R", i32), ("W", i32), ("M", f32), ("FM", f32), ("P", i32), ("Bo", "bool")]:
            out[nm] = np.zeros(n, dt)
        return out

    def expected(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with np.errstate(all="ignore"):
            ia, ib, fa, fb = a["IA"], a["IB"], a["FA"], a["FB"]
            safe = np.where(ib == 0, 1, ib)
            pick = (ia > ib) & np.isnan(fa)
            return {"Q": np.where(ib == 0, 0, ia // safe).astype(np.int32),
                    "R": np.where(ib == 0, 0, ia % safe).astype(np.int32),
                    "W": (ia.astype(np.int64) * (1 << 30)).astype(np.int32),
                    "M": np.maximum(fa, fb), "FM": np.mod(fa, fb),
                    "P": np.where(pick, 0, np.abs(ib)).astype(np.int32), "Bo": fa.astype(bool)}

    return Case(L.PrimFunc("int_semantics", bufs, body), inputs, expected)


def staged_gemm(m: int = 64, n: int = 64, k: int = 64, tile: int = 16) -> Case:
    """C = A @ B with 16x16 tiles of A and B staged through shared memory (2-D blocks and threads)."""
    sa = L.Buffer("sA", F32, (tile, tile), "shared")
    sb = L.Buffer("sB", F32, (tile, tile), "shared")
    acc = L.Buffer("acc", F32, (1,), "local")
    row = L.add(L.mul(V("by"), c(tile)), V("ty"))
    col = L.add(L.mul(V("bx"), c(tile)), V("tx"))
    kk = L.mul(V("ko"), c(tile))

    def threads(body: L.Stmt) -> L.Stmt:
        return L.For("ty", c(0), c(tile), L.For("tx", c(0), c(tile), body, "threadIdx.x"), "threadIdx.y")

    inner = L.seq(
        L.Store("sA", (V("ty"), V("tx")), ld("A", row, L.add(kk, V("tx")))),
        L.Store("sB", (V("ty"), V("tx")), ld("B", L.add(kk, V("ty")), col)),
        L.Barrier(),
        L.For("ki", c(0), c(tile), L.Store("acc", (c(0),), L.add(
            ld("acc", c(0)), L.mul(ld("sA", V("ty"), V("ki")), ld("sB", V("ki"), V("tx"))))), "unrolled"),
        L.Barrier())
    per_thread = L.Allocate(acc, L.seq(
        L.Store("acc", (c(0),), L.const(0.0, F32)),
        L.For("ko", c(0), c(k // tile), inner),
        L.Store("C", (row, col), ld("acc", c(0)))))
    body = L.For("by", c(0), c(m // tile), L.For("bx", c(0), c(n // tile), L.Allocate(sa, L.Allocate(
        sb, threads(per_thread))), "blockIdx.x"), "blockIdx.y")
    bufs = (L.Buffer("A", F32, (m, k)), L.Buffer("B", F32, (k, n)), L.Buffer("C", F32, (m, n)))
    return Case(L.PrimFunc("staged_gemm", bufs, body),
                lambda r: {"A": r.standard_normal((m, k)).astype(np.float32),
                           "B": r.standard_normal((k, n)).astype(np.float32), "C": np.zeros((m, n), np.float32)},
                lambda a: {"C": a["A"] @ a["B"]})


def all_cases() -> list[Case]:
    return [elementwise(), block_sum(), axpy4(), axpy4(misalign=1), half_ops(), int_semantics(), staged_gemm()]


def single_warp_mma(m: int = 32, n: int = 16, k: int = 32) -> Case:
    """One warp per 16x16 tile of C = A @ B (float16 in, float32 out) straight from global memory."""
    acc = L.Buffer("acc", F32, (16, 16), "wmma.accumulator")
    fa = L.Buffer("fa", "float16", (16, 16), "wmma.matrix_a")
    fb = L.Buffer("fb", "float16", (16, 16), "wmma.matrix_b")
    row, col, kk = L.mul(V("by"), c(16)), L.mul(V("bx"), c(16)), L.mul(V("ko"), c(16))
    warp = L.Allocate(acc, L.Allocate(fa, L.Allocate(fb, L.seq(
        L.WmmaFill("acc", (), L.const(0.0, F32)),
        L.For("ko", c(0), c(k // 16), L.seq(
            L.WmmaLoad("fa", (), "A", (row, kk)),
            L.WmmaLoad("fb", (), "B", (kk, col)),
            L.WmmaMma("acc", (), "fa", (), "fb", ()))),
        L.WmmaStore("C", (row, col), "acc", ())))))
    body = L.For("by", c(0), c(m // 16), L.For("bx", c(0), c(n // 16), L.For(
        "tx", c(0), c(32), warp, "threadIdx.x"), "blockIdx.x"), "blockIdx.y")
    bufs = (L.Buffer("A", "float16", (m, k)), L.Buffer("B", "float16", (k, n)), L.Buffer("C", F32, (m, n)))
    return Case(L.PrimFunc("single_warp_mma", bufs, body), lambda r: _gemm_inputs(r, m, n, k), _gemm_expected)


def _gemm_inputs(r: np.random.Generator, m: int, n: int, k: int) -> dict[str, np.ndarray]:
    return {"A": r.standard_normal((m, k)).astype(np.float16), "B": r.standard_normal((k, n)).astype(np.float16),
            "C": np.zeros((m, n), np.float32)}


def _gemm_expected(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"C": a["A"].astype(np.float32) @ a["B"].astype(np.float32)}


def tensorcore_gemm(m: int = 128, n: int = 128, k: int = 64) -> Case:
    return Case(wmma_gemm(m, n, k), lambda r: _gemm_inputs(r, m, n, k), _gemm_expected)


def tensorcore_cases() -> list[Case]:
    return [single_warp_mma(), tensorcore_gemm()]


def wmma_gemm(m: int, n: int, k: int, config: WmmaGemmConfig | None = None, name: str = "wmma_gemm") -> L.PrimFunc:
    """A hand-built fp16 GEMM on tensor cores, C[M, N] (float32) = A[M, K] (float16) @ B[K, N] (float16),
    exercising every WMMA statement: one block per (block_m x block_n) tile of C with warps_m x warps_n
    warps, each owning a sub-tile of 16x16 accumulator fragments; every block_k step stages A and B in
    shared memory with cooperative loads (a Barrier before the fragments read them and another before
    they are overwritten). M, N, K must be multiples of the block tile (a ScheduleError says which).
    (The template tilec compiles fp16 products with is tilec.schedule.gpu.tensorcore.)"""
    cfg = config or WmmaGemmConfig()
    problems = cfg.problems(1024)
    if problems:
        raise ScheduleError("; ".join(problems))
    for dim, size, tile in (("M", m, cfg.block_m), ("N", n, cfg.block_n), ("K", k, cfg.block_k)):
        if size % tile:
            raise ScheduleError(f"{dim} = {size} is not a multiple of the block tile {tile}; pad it or pick "
                                "a tile that divides it")
    frag_m, frag_n = cfg.block_m // (16 * cfg.warps_m), cfg.block_n // (16 * cfg.warps_n)
    threads = 32 * cfg.warps_m * cfg.warps_n
    warp_m, warp_n = V("ty"), L.Bin("div", V("tx"), c(32))  # this thread's warp in the warp grid
    row0 = L.add(L.mul(V("by"), c(cfg.block_m)), L.mul(warp_m, c(16 * frag_m)))
    col0 = L.add(L.mul(V("bx"), c(cfg.block_n)), L.mul(warp_n, c(16 * frag_n)))
    fi, fj, kk = V("fi"), V("fj"), V("kk")

    def unrolled(var: str, extent: int, body: L.Stmt) -> L.Stmt:
        return L.For(var, c(0), c(extent), body, "unrolled")

    tid = L.add(L.mul(V("ty"), c(32 * cfg.warps_n)), V("tx"))
    ko = L.mul(V("ko"), c(cfg.block_k))
    stage = L.seq(
        _cooperative_copy("sA", (cfg.block_m, cfg.block_k), "A", (L.mul(V("by"), c(cfg.block_m)), ko), tid, threads, "la"),
        _cooperative_copy("sB", (cfg.block_k, cfg.block_n), "B", (ko, L.mul(V("bx"), c(cfg.block_n))), tid, threads, "lb"),
        L.Barrier(),
        unrolled("kk", cfg.block_k // 16, L.seq(
            unrolled("fi", frag_m, L.WmmaLoad("fa", (fi,), "sA", (L.add(L.mul(warp_m, c(16 * frag_m)),
                                                                           L.mul(fi, c(16))), L.mul(kk, c(16))))),
            unrolled("fj", frag_n, L.WmmaLoad("fb", (fj,), "sB", (L.mul(kk, c(16)), L.add(
                L.mul(warp_n, c(16 * frag_n)), L.mul(fj, c(16)))))),
            unrolled("fi", frag_m, unrolled("fj", frag_n, L.WmmaMma("acc", (fi, fj), "fa", (fi,), "fb", (fj,)))))),
        L.Barrier())
    per_thread = L.Allocate(
        L.Buffer("acc", F32, (frag_m, frag_n, 16, 16), "wmma.accumulator"), L.Allocate(
            L.Buffer("fa", F16, (frag_m, 16, 16), "wmma.matrix_a"), L.Allocate(
                L.Buffer("fb", F16, (frag_n, 16, 16), "wmma.matrix_b"), L.seq(
                    unrolled("fi", frag_m, unrolled("fj", frag_n, L.WmmaFill("acc", (fi, fj), L.const(0.0, F32)))),
                    L.For("ko", c(0), c(k // cfg.block_k), stage),
                    unrolled("fi", frag_m, unrolled("fj", frag_n, L.WmmaStore(
                        "C", (L.add(row0, L.mul(fi, c(16))), L.add(col0, L.mul(fj, c(16)))), "acc", (fi, fj))))))))
    threads_nest = L.For("ty", c(0), c(cfg.warps_m), L.For(
        "tx", c(0), c(32 * cfg.warps_n), per_thread, "threadIdx.x"), "threadIdx.y")
    shared = L.Allocate(L.Buffer("sA", F16, (cfg.block_m, cfg.block_k), "shared"), L.Allocate(
        L.Buffer("sB", F16, (cfg.block_k, cfg.block_n), "shared"), threads_nest))
    body = L.For("by", c(0), c(m // cfg.block_m), L.For(
        "bx", c(0), c(n // cfg.block_n), shared, "blockIdx.x"), "blockIdx.y")
    params = (L.Buffer("A", F16, (m, k)), L.Buffer("B", F16, (k, n)), L.Buffer("C", F32, (m, n)))
    return L.PrimFunc(name, params, body)


def _cooperative_copy(dst: str, shape: tuple[int, int], src: str, origin: tuple[L.Expr, L.Expr], tid: L.Expr,
                      threads: int, var: str) -> L.Stmt:
    """dst[r, q] = src[origin + (r, q)] over a rows x cols tile, element e by thread e % threads."""
    rows, cols = shape
    total = rows * cols
    e = L.add(L.mul(V(var), c(threads)), tid)
    r, q = L.Bin("div", e, c(cols)), L.Bin("mod", e, c(cols))
    store: L.Stmt = L.Store(dst, (r, q), L.Load(src, (L.add(origin[0], r), L.add(origin[1], q)), F16))
    if total % threads:
        store = L.If(L.Cmp("lt", e, c(total)), store)
    return L.For(var, c(0), c(-(-total // threads)), store, "unrolled")
