"""Lane-varying conditions in vectorized loops become masked loads and stores that never touch
memory their scalar iterations would not: checked against a guard page, in a subprocess."""

from __future__ import annotations


import subprocess
import sys

from tilec.codegen.llvm.vector import vectorizable
from tilec.ir import loop as L

CHILD = r"""
import ctypes, mmap, numpy as np
from tilec.ir import loop as L
from tilec.codegen.llvm.jit import emit_object, load_object, optimise
from tilec.codegen.llvm.module import emit_module
from tilec.ir.lower import KERNEL_NAME
from tilec.target import host_cpu

libc = ctypes.CDLL(None)
page = mmap.PAGESIZE
region = mmap.mmap(-1, 2 * page)
base = ctypes.addressof(ctypes.c_char.from_buffer(region))
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + page, page, 0) == 0  # the second page: no access at all
n = 10
src = np.frombuffer(region, dtype=np.float32, count=n, offset=page - 4 * n)  # ends right at the guard page
dst = np.frombuffer(region, dtype=np.float32, count=n, offset=page - 8 * n)
src[:] = np.arange(1, n + 1)
dst[:] = -1
i = L.Var("i")
inside = L.Cmp("lt", i, L.const(n))
body = L.seq(
    # masked store of a masked load: lanes 10..15 must neither read src nor write dst
    L.If(inside, L.Store("D", (i,), L.Bin("mul", L.Load("S", (i,), "float32"), L.Const(2.0, "float32")))),
    # if/else into a local-free select: the else arm keeps the old value
    L.If(inside, L.Store("E", (i,), L.Load("S", (i,), "float32")), L.Store("E", (i,), L.Const(0.0, "float32"))),
)
func = L.PrimFunc("tilec_kernel", (L.Buffer("S", "float32", (n,)), L.Buffer("D", "float32", (n,)),
                                   L.Buffer("E", "float32", (16,))),
                  L.For("i", L.const(0), L.const(16), body, "vectorized"))
cpu = host_cpu()
ir_text = emit_module(func, cpu)
assert "llvm.masked.load" in ir_text and "llvm.masked.store" in ir_text, ir_text
kernel = load_object(emit_object(optimise(ir_text, cpu), cpu), KERNEL_NAME, cpu)
e = np.full(16, 7, np.float32)
kernel.function((ctypes.c_void_p * 3)(src.ctypes.data, dst.ctypes.data, e.ctypes.data))
assert np.array_equal(dst, 2 * np.arange(1, n + 1)), dst
assert np.array_equal(e, np.concatenate([np.arange(1, n + 1), np.zeros(6)])), e
print("ok")
"""


def test_masked_lanes_never_touch_memory_past_a_guard_page():
    result = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr


def test_uniform_or_gathered_loads_under_a_lane_mask_are_not_vectorized():
    i = L.Var("i")
    buffers = {"A": L.Buffer("A", "float32", (16, 16)), "B": L.Buffer("B", "float32", (16,)),
               "O": L.Buffer("O", "float32", (16,))}
    inside = L.Cmp("lt", i, L.const(10))
    gathered = L.For("i", L.const(0), L.const(16),
                     L.If(inside, L.Store("O", (i,), L.Load("A", (i, L.const(0)), "float32"))), "vectorized")
    uniform = L.For("i", L.const(0), L.const(16),
                    L.If(inside, L.Store("O", (i,), L.Load("B", (L.const(3),), "float32"))), "vectorized")
    contiguous = L.For("i", L.const(0), L.const(16),
                       L.If(inside, L.Store("O", (i,), L.Load("B", (i,), "float32"))), "vectorized")
    assert not vectorizable(gathered, buffers)
    assert not vectorizable(uniform, buffers)
    assert vectorizable(contiguous, buffers)
