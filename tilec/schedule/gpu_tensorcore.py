"""An fp16 GEMM on tensor cores: C[M, N] (float32) = A[M, K] (float16) @ B[K, N] (float16).

`wmma_gemm(M, N, K, config)` builds the GPU PrimFunc (tilec/ir/loop.py conventions, WMMA
statements): one block per (block_m x block_n) tile of C with warps_m x warps_n warps, each
warp owning a (block_m / warps_m) x (block_n / warps_n) sub-tile of 16x16 accumulator
fragments; every block_k step stages A and B tiles in shared memory with cooperative loads
by all threads (a Barrier before the fragments read them and another before they are
overwritten). Requires M, N, K multiples of the block tile (a ScheduleError says which).
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.errors import ScheduleError
from tilec.ir import loop as L

V, c = L.Var, L.const
F16, F32 = "float16", "float32"


@dataclass(frozen=True)
class WmmaGemmConfig:
    """The knobs: block tile (block_m, block_n, block_k) and the warp grid inside a block."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    warps_m: int = 2
    warps_n: int = 2

    def check(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            if getattr(self, name) <= 0 or getattr(self, name) % 16:
                raise ScheduleError(f"{name} = {getattr(self, name)} must be a positive multiple of 16")
        if self.block_m % (16 * self.warps_m) or self.block_n % (16 * self.warps_n):
            raise ScheduleError(f"each of the {self.warps_m}x{self.warps_n} warps needs a whole number of 16x16 "
                                f"fragments of the {self.block_m}x{self.block_n} block tile")
        if not 1 <= 32 * self.warps_m * self.warps_n <= 1024:
            raise ScheduleError(f"{self.warps_m * self.warps_n} warps per block: CUDA allows 1 to 32")


def wmma_gemm(m: int, n: int, k: int, config: WmmaGemmConfig = WmmaGemmConfig(), name: str = "wmma_gemm") -> L.PrimFunc:
    cfg = config
    cfg.check()
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
