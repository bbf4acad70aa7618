"""Vectorized loops of any extent: computed right, and emitted as vectors whose widths are powers
of two (LLVM lowers a 48-lane vector through shuffles that made an 8x48 GEMM tile 30x slower)."""

from __future__ import annotations

from compiled import llvm_text, load_func

import ctypes
import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tilec.ir import loop as L
from tilec.ir.lower import KERNEL_NAME


def _fma_rows(rows: int, extent: int) -> L.PrimFunc:
    """acc[r, j] = 0; acc[r, j] += a[r] * b[j] for 3 steps; out[r, j] = acc[r, j] where j < extent - 1:
    a local accumulator, a broadcast, a fused update and a masked store in one vectorized loop."""
    r, j, k = L.Var("r"), L.Var("j"), L.Var("k")
    acc = L.Buffer("acc", "float32", (rows, extent), "local")
    now = L.Load("acc", (r, j), "float32")
    update = L.Store("acc", (r, j), L.Bin("add", now, L.Bin(
        "mul", L.Load("A", (k, r), "float32"), L.Load("B", (k, j), "float32"))))
    zero = L.For("j", L.const(0), L.const(extent), L.Store("acc", (r, j), L.Const(0.0, "float32")), "vectorized")
    steps = L.For("k", L.const(0), L.const(3), L.For("j", L.const(0), L.const(extent), update, "vectorized"))
    store = L.For("j", L.const(0), L.const(extent),
                  L.If(L.Cmp("lt", j, L.const(extent - 1)), L.Store("O", (r, j), now)), "vectorized")
    body = L.Allocate(acc, L.For("r", L.const(0), L.const(rows), L.seq(zero, steps, store), "unrolled"))
    params = (L.Buffer("A", "float32", (3, rows)), L.Buffer("B", "float32", (3, extent)),
              L.Buffer("O", "float32", (rows, extent)))
    return L.PrimFunc(KERNEL_NAME, params, body)


def _run(func: L.PrimFunc, arrays: list[np.ndarray]) -> str:
    text = llvm_text(func)
    kernel = load_func(func)
    kernel.function((ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays)))
    return text


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 4), extent=st.integers(2, 100), seed=st.integers(0, 2**16))
def test_vectorized_loops_of_any_extent_match_numpy(rows: int, extent: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((3, rows)).astype(np.float32)
    b = rng.standard_normal((3, extent)).astype(np.float32)
    out = np.full((rows, extent), 7.0, np.float32)
    text = _run(_fma_rows(rows, extent), [a, b, out])
    widths = {int(w) for w in re.findall(r"<(\d+) x float>", text)}
    assert widths and all(w & (w - 1) == 0 for w in widths), sorted(widths)
    want = a.T @ b
    np.testing.assert_allclose(out[:, :-1], want[:, :-1], rtol=1e-5, atol=1e-5)
    assert np.all(out[:, -1] == 7.0)  # the masked-off lane kept its value


def _transpose_tile(m: int, n: int, dtype: str) -> L.PrimFunc:
    """O[b, a + 1] = 2 * S[a, b] over an m x n tile: O unit-stride along a (unrolled), S along b
    (vectorized), so the tile is transposed in registers (tilec.codegen.llvm.transpose)."""
    a, b = L.Var("a"), L.Var("b")
    value = L.Bin("mul", L.Load("S", (a, b), dtype), L.Const(2, dtype))
    store = L.Store("O", (b, L.add(a, L.const(1))), value)
    body = L.For("a", L.const(0), L.const(m), L.For("b", L.const(0), L.const(n), store, "vectorized"), "unrolled")
    return L.PrimFunc(KERNEL_NAME, (L.Buffer("S", dtype, (m, n)), L.Buffer("O", dtype, (n, m + 2))), body)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(2, 40), n=st.integers(2, 40), dtype=st.sampled_from(["float32", "float64", "int32"]),
       seed=st.integers(0, 2**16))
def test_transposing_tiles_store_each_cell_once_with_its_value(m: int, n: int, dtype: str, seed: int) -> None:
    from tilec.codegen.llvm.transpose import transposable

    func = _transpose_tile(m, n, dtype)
    buffers = {p.name: p for p in func.params}
    assert transposable(func.body, buffers)  # type: ignore[arg-type]
    src = (np.random.default_rng(seed).standard_normal((m, n)) * 100).astype(dtype)
    out = np.full((n, m + 2), 7, dtype)
    text = _run(func, [src, out])
    assert "shufflevector" in text
    np.testing.assert_array_equal(out[:, 1:m + 1], 2 * src.T)
    assert np.all(out[:, 0] == 7) and np.all(out[:, m + 1] == 7)  # nothing stored outside the tile


def _coalesced_transpose(m: int, h: int, w: int) -> L.PrimFunc:
    """O[b / w, b % w, a] = S[a, b / w, b % w] + 1 over a in [0, m) (unrolled), b in [0, h w)
    (vectorized): a layout permutation whose two dimensions (h, w) are coalesced into one loop, so
    both sides index them by a division and a remainder (NCHW -> NHWC's pixels)."""
    a, b = L.Var("a"), L.Var("b")
    hi, lo = L.Bin("div", b, L.const(w)), L.Bin("mod", b, L.const(w))
    value = L.Bin("add", L.Load("S", (a, hi, lo), "float32"), L.Const(1.0, "float32"))
    body = L.For("a", L.const(0), L.const(m), L.For("b", L.const(0), L.const(h * w), L.Store("O", (hi, lo, a), value),
                                                       "vectorized"), "unrolled")
    return L.PrimFunc(KERNEL_NAME, (L.Buffer("S", "float32", (m, h, w)), L.Buffer("O", "float32", (h, w, m))), body)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(2, 32), h=st.integers(1, 5), w=st.integers(2, 7), seed=st.integers(0, 2**16))
def test_an_index_divided_into_digits_still_vectorizes_and_transposes(m: int, h: int, w: int, seed: int) -> None:
    """Indices are computed in scalar code (once per vector where affine), so a division or a
    remainder inside one does not keep the loop scalar: the permutation of coalesced dimensions is
    a transposing tile (it was stored element by element, 2x slower than torch's permute)."""
    from tilec.codegen.llvm.transpose import transposable
    from tilec.codegen.llvm.vector import vectorizable

    if h * w < 2:
        h = 2
    func = _coalesced_transpose(m, h, w)
    buffers = {p.name: p for p in func.params}
    assert isinstance(func.body, L.For) and isinstance(func.body.body, L.For)
    assert vectorizable(func.body.body, buffers) and transposable(func.body, buffers)
    src = np.random.default_rng(seed).standard_normal((m, h, w)).astype(np.float32)
    out = np.full((h, w, m), 7, np.float32)
    text = _run(func, [src, out])
    assert "shufflevector" in text
    np.testing.assert_array_equal(out, src.transpose(1, 2, 0) + 1)
