"""The GPU emulator (tilec.passes.emulate_gpu) on hand-written GPU kernels, run natively via LLVM."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tilec.passes.emulate_gpu import emulate
from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.verify import verify
from tilec.ir.visitor import walk
from tilec.pipeline import load_from, resolve_target

from reference import rng

F32 = "float32"


def run(func: L.PrimFunc, *arrays: np.ndarray) -> None:
    """Compile `func` (a GPU PrimFunc) for cuda-sim and run it on `arrays`, one per param."""
    loaded, _ = load_from("gpu", func, resolve_target("cuda-sim"))
    loaded.function((ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays]))


def var(name: str) -> L.Var:
    return L.Var(name)


def launch(blocks: int, threads: int, body: L.Stmt, shared: tuple[L.Buffer, ...] = ()) -> L.For:
    inner: L.Stmt = L.For("t", L.const(0), L.const(threads), body, "threadIdx.x")
    for buf in shared:
        inner = L.Allocate(buf, inner)
    return L.For("b", L.const(0), L.const(blocks), inner, "blockIdx.x")


def gid(threads: int) -> L.Expr:
    return L.add(L.mul(var("b"), L.const(threads)), var("t"))


def test_barrier_splits_the_thread_loop() -> None:
    """O = each block's segment of A reversed, through shared memory: every thread reads a cell
    another thread wrote before the barrier."""
    B, T = 5, 32
    S = L.Buffer("S", F32, (T,), "shared")
    body = L.seq(L.Store("S", (var("t"),), L.Load("A", (gid(T),), F32)),
                 L.Barrier(),
                 L.Store("O", (gid(T),), L.Load("S", (L.sub(L.const(T - 1), var("t")),), F32)))
    func = L.PrimFunc("tilec_kernel", (L.Buffer("A", F32, (B * T,)), L.Buffer("O", F32, (B * T,))),
                      launch(B, T, body, (S,)))
    cpu = emulate(func)
    verify(cpu)
    assert not any(isinstance(n, L.Barrier) for n in walk(cpu.body))
    assert not any(isinstance(n, L.For) and n.kind in L.GPU_AXES for n in walk(cpu.body))
    assert sum(isinstance(n, L.For) and n.var == "t" for n in walk(cpu.body)) == 2  # two segments
    a = rng(0).standard_normal(B * T).astype(F32)
    o = np.zeros_like(a)
    run(func, a, o)
    np.testing.assert_array_equal(o, a.reshape(B, T)[:, ::-1].reshape(-1))


def test_locals_living_across_a_barrier_are_per_thread() -> None:
    """x (a scalar local) is computed before two barriers and used after them."""
    B, T = 3, 16
    S = L.Buffer("S", F32, (T,), "shared")
    x = L.Buffer("x", F32, (), "local")
    mine = L.Load("A", (gid(T),), F32)
    body = L.Allocate(x, L.seq(
        L.Store("x", (), L.Bin("mul", mine, L.Const(2.0, F32))),
        L.Store("S", (var("t"),), mine),
        L.Barrier(),
        L.Store("O", (gid(T),), L.Bin("add", L.Load("x", (), F32),
                                      L.Load("S", (L.Bin("mod", L.add(var("t"), L.const(1)), L.const(T)),), F32))),
        L.Barrier()))
    func = L.PrimFunc("tilec_kernel", (L.Buffer("A", F32, (B * T,)), L.Buffer("O", F32, (B * T,))),
                      launch(B, T, body, (S,)))
    expanded = [n.buffer for n in walk(emulate(func).body) if isinstance(n, L.Allocate) and n.buffer.name == "x"]
    assert expanded and expanded[0].shape == (T,)
    a = rng(1).standard_normal(B * T).astype(F32)
    o = np.zeros_like(a)
    run(func, a, o)
    blocks = a.reshape(B, T)
    np.testing.assert_allclose(o.reshape(B, T), 2 * blocks + np.roll(blocks, -1, axis=1), rtol=1e-6)


@pytest.mark.parametrize("blocks", [4, 512])  # 512 x 64 threads: the block loop runs in parallel
def test_shared_buffers_are_per_block(blocks: int) -> None:
    """Each block sums its row in shared memory by a tree reduction (barriers in a uniform loop)."""
    T = 64
    S = L.Buffer("S", F32, (T,), "shared")
    step = L.For("s", L.const(0), L.const(6), L.seq(
        L.If(L.Cmp("eq", L.Bin("mod", var("t"), L.Bin("mul", L.const(2), _pow2(var("s")))), L.const(0)),
             L.Store("S", (var("t"),), L.Bin("add", L.Load("S", (var("t"),), F32),
                                             L.Load("S", (L.Bin("min", L.add(var("t"), _pow2(var("s"))),
                                                                L.const(T - 1)),), F32)))),
        L.Barrier()))
    body = L.seq(L.Store("S", (var("t"),), L.Load("A", (var("b"), var("t")), F32)), L.Barrier(), step,
                 L.If(L.Cmp("eq", var("t"), L.const(0)), L.Store("O", (var("b"),), L.Load("S", (L.const(0),), F32))))
    func = L.PrimFunc("tilec_kernel", (L.Buffer("A", F32, (blocks, T)), L.Buffer("O", F32, (blocks,))),
                      launch(blocks, T, body, (S,)))
    kinds = {n.kind for n in walk(emulate(func).body) if isinstance(n, L.For) and n.var == "b"}
    assert kinds == ({"parallel"} if blocks == 512 else {"serial"})
    a = rng(2).standard_normal((blocks, T)).astype(F32)
    o = np.zeros(blocks, F32)
    run(func, a, o)
    np.testing.assert_allclose(o, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def _pow2(e: L.Expr) -> L.Expr:
    """2 ** e for 0 <= e < 6, as integer arithmetic the loop IR has (a select chain)."""
    out: L.Expr = L.const(32)
    for k in range(4, -1, -1):
        out = L.Select(L.Cmp("eq", e, L.const(k)), L.const(1 << k), out)
    return out


def test_barrier_under_thread_dependent_if_is_refused() -> None:
    body = L.If(L.Cmp("lt", var("t"), L.const(4)), L.seq(L.Store("O", (var("t"),), L.Const(1.0, F32)), L.Barrier()))
    func = L.PrimFunc("tilec_kernel", (L.Buffer("O", F32, (8,)),), launch(1, 8, body))
    with pytest.raises(CodegenError, match="thread-dependent control flow"):
        emulate(func)


def test_barrier_in_loop_with_thread_dependent_bounds_is_refused() -> None:
    body = L.For("k", L.const(0), var("t"), L.Barrier())
    func = L.PrimFunc("tilec_kernel", (L.Buffer("O", F32, (8,)),), launch(1, 8, body))
    with pytest.raises(CodegenError, match="bounds of loop k depends on the thread|depends on the thread"):
        emulate(func)


def test_thread_loops_must_form_one_band() -> None:
    inner = L.For("u", L.const(0), L.const(2), L.Store("O", (var("u"),), L.Const(1.0, F32)), "threadIdx.y")
    body = L.seq(L.Store("O", (var("t"),), L.Const(0.0, F32)), inner)
    func = L.PrimFunc("tilec_kernel", (L.Buffer("O", F32, (8,)),), launch(1, 8, body))
    with pytest.raises(CodegenError, match="one band"):
        emulate(func)


def test_launches_run_in_order() -> None:
    """The second launch reads what every block of the first one wrote."""
    n, T = 96, 32
    first = launch(n // T, T, L.Store("X", (gid(T),), L.Bin("mul", L.Load("A", (gid(T),), F32), L.Const(3.0, F32))))
    rev = L.sub(L.const(n - 1), gid(T))
    second = launch(n // T, T, L.Store("O", (gid(T),), L.Load("X", (rev,), F32)))
    func = L.PrimFunc("tilec_kernel", (L.Buffer("A", F32, (n,)), L.Buffer("O", F32, (n,)), L.Buffer("X", F32, (n,))),
                      L.seq(first, second))
    a = rng(3).standard_normal(n).astype(F32)
    o, x = np.zeros_like(a), np.zeros_like(a)
    run(func, a, o, x)
    np.testing.assert_allclose(o, 3 * a[::-1], rtol=1e-6)
