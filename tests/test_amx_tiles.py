"""AMX-BF16 tiles: the loop IR's TileDot against numpy, on the tiles where the CPU has them and
through its plain loops (tilec.codegen.llvm.tile_loops) everywhere; the packed GEMM variant on
tiles against a float32 reference; code for an AMX CPU compiled (and refused to run) on any CPU."""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tilec
from tilec.codegen.llvm.tile_loops import lower_tiles
from tilec.errors import TargetError
from tilec.ir import loop as L
from tilec.ir.verify import verify
from tilec.target import has_tiles, host_cpu

from tests.compiled import load_func

BF16 = ml_dtypes.bfloat16
GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
AMX = "llvm -mcpu=sapphirerapids"  # (its features include AMX-TILE and AMX-BF16: tilec.target.AMX_CPUS)


def tile_dot_func(m: int, n: int, steps: int, pairs: L.Expr, fresh: L.Expr) -> L.PrimFunc:
    """acc[m, n] (+)= A . B with A in tile steps a[steps, m, 32] and B's pairs b[16 steps, n, 2]."""
    acc = L.Buffer("acc", "float32", (m, n))
    a = L.Buffer("a", "bfloat16", (steps, m, 2 * L.TILE_PAIRS))
    b = L.Buffer("b", "bfloat16", (L.TILE_PAIRS * steps, n, 2))
    zero = L.const(0)
    dot = L.TileDot("acc", (zero, zero), "a", (zero, zero, zero), "b", (zero, zero, zero), pairs, fresh, m, n)
    return verify(L.PrimFunc("tilec_kernel", (a, b, acc), L.TileRegion(dot)))


def run(func: L.PrimFunc, *arrays: np.ndarray) -> None:
    kernel = load_func(func)
    kernel.function((ctypes.c_void_p * len(arrays))(*[x.ctypes.data for x in arrays]))


@settings(max_examples=12, deadline=None)
@given(block=st.sampled_from([(16, 16), (32, 32), (32, 16), (16, 32), (16, 48), (48, 16)]), steps=st.integers(1, 4),
       used=st.integers(0, 4), fresh=st.booleans(), seed=st.integers(0, 2**31))
def test_tile_dot_matches_numpy_on_the_tiles_and_as_loops(block, steps, used, fresh, seed):
    """acc = (0 if fresh else acc) + the first `used` tile steps' products, on this CPU (AMX where it
    has it) and through the plain loops a CPU without AMX gets, against numpy in float32."""
    m, n = block
    used = min(used, steps)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((steps, m, 32)).astype(BF16)
    b = rng.standard_normal((16 * steps, n, 2)).astype(BF16)
    acc0 = rng.standard_normal((m, n)).astype(np.float32)
    # A(i, x) = a[x // 32, i, x % 32]; B(x, j) = b[x // 2, j, x % 2]
    a_rows = a.astype(np.float32).transpose(1, 0, 2).reshape(m, 32 * steps)[:, :32 * used]
    b_rows = b.astype(np.float32).transpose(0, 2, 1).reshape(32 * steps, n)[:32 * used]
    want = (0 if fresh else acc0) + a_rows @ b_rows
    func = tile_dot_func(m, n, steps, L.const(16 * used), L.const(bool(fresh), "bool"))
    for f in (func, lower_tiles(func)) if has_tiles(host_cpu()) else (func,):  # (lowered to the loops anyway)
        acc = acc0.copy()
        run(f, a, b, acc)
        np.testing.assert_allclose(acc, want, rtol=1e-5, atol=1e-4)


def test_tile_statements_are_verified():
    zero = L.const(0)
    dot = tile_dot_func(32, 32, 1, L.const(16), L.const(True, "bool")).body.body  # type: ignore[union-attr]
    params = tile_dot_func(32, 32, 1, L.const(16), L.const(True, "bool")).params
    with pytest.raises(AssertionError, match="outside a tile region"):
        verify(L.PrimFunc("k", params, dot))
    too_many = L.TileDot("acc", (zero, zero), "a", (zero, zero, zero), "b", (zero, zero, zero), L.const(16),
                         L.const(True, "bool"), 48, 32)  # 6 accumulators + 3 + 2 tiles
    with pytest.raises(AssertionError, match="at most 8"):
        verify(L.PrimFunc("k", params, L.TileRegion(too_many)))


def test_lowering_leaves_functions_without_tiles_alone():
    func = L.PrimFunc("k", (L.Buffer("x", "float32", (4,)),), L.Store("x", (L.const(0),), L.const(1.0, "float32")))
    assert lower_tiles(func) is func


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 300), n=st.integers(1, 200), k=st.integers(1, 1200), seed=st.integers(0, 2**31))
def test_bfloat16_gemm_matches_float32_on_any_shape(m, n, k, seed):
    """The untuned bfloat16 GEMM (on AMX tiles where the CPU has them: padded rows, columns and tile
    steps) against a float32 reference, within bfloat16's rounding."""
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16)
    got = tilec.compile(GEMM)(a, b).astype(np.float32)
    ref = a.astype(np.float32) @ b.astype(np.float32)
    assert np.abs(got - ref).max() <= 1e-2 * max(1.0, np.abs(ref).max())


def test_bfloat16_gemm_and_convolution_run_on_tiles_where_the_cpu_has_amx():
    """With AMX-BF16 the packed variant's micro-kernel is a TileDot (tdpbf16ps in the assembly);
    without, no tile statement appears."""
    f = tilec.compile(GEMM)
    shapes, dtypes = {"A": (512, 1000), "B": (1000, 256)}, {"A": "bfloat16", "B": "bfloat16"}
    tiles = has_tiles(host_cpu())
    assert ("tile_dot_32x32" in f.explain(shapes, dtypes, stage="loop")) == tiles
    assert ("tdpbf16ps" in f.explain(shapes, dtypes, stage="asm")) == tiles
    conv = tilec.compile("function (I[N, H, W, C], K[KH, KW, C, CO]) -> (O) "
                         "{ O[n, x, y, co: N, H - 2, W - 2, CO] = +(I[n, x + i, y + j, c] * K[i, j, c, co]); }")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 18, 18, 64)).astype(BF16), rng.standard_normal((3, 3, 64, 96)).astype(BF16)
    got = conv(I=x, K=w).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float32), (3, 3), axis=(1, 2))  # n, x, y, c, i, j
    ref = np.einsum("nxycij,ijco->nxyo", windows, w.astype(np.float32))
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
    assert ("tile_dot" in conv.explain({"I": x.shape, "K": w.shape}, {"I": "bfloat16", "K": "bfloat16"},
                                        stage="loop")) == tiles


def test_code_for_an_amx_cpu_compiles_anywhere_and_runs_only_there():
    """A target with AMX-BF16 gets the tiles in its assembly on any x86-64 machine; a machine
    without AMX refuses to run it with a TargetError (never a SIGILL)."""
    f = tilec.compile(GEMM, target=AMX)
    shapes, dtypes = {"A": (256, 512), "B": (512, 256)}, {"A": "bfloat16", "B": "bfloat16"}
    asm = f.explain(shapes, dtypes, stage="asm")
    assert "tdpbf16ps" in asm and "ldtilecfg" in asm and "tilerelease" in asm
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((256, 512)).astype(BF16), rng.standard_normal((512, 256)).astype(BF16)
    if has_tiles(host_cpu()):
        got, ref = f(a, b).astype(np.float32), a.astype(np.float32) @ b.astype(np.float32)
        assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
    else:
        with pytest.raises(TargetError, match="amx-bf16"):
            f(a, b)


@pytest.mark.parametrize("m, n, k, kc, mc", [(100, 70, 300, 64, 64), (64, 32, 97, 32, 32), (33, 96, 1000, 256, 96)])
def test_reduction_blocks_carry_their_partial_sums_through_the_tiles(m, n, k, kc, mc):
    """Knobs that split K into blocks: the first block's tiles start from zero, the later ones from
    the float32 partial sums (a bfloat16 output rounds once, after the last block). A 16 x 32 block
    on AMX tiles where the CPU has them, elsewhere 4 rows of two vectors (a register block any
    register file holds)."""
    host = host_cpu()
    mr, nr = (16, 32) if has_tiles(host) else (4, 2 * host.vector_bits // 32)
    knobs = (("kc", kc), ("mc", mc), ("mr", mr), ("nr", nr), ("pack_a", True), ("pack_b", True), ("threads", 0))
    f = tilec.compile(GEMM).with_schedule(tilec.TemplateSchedule((tilec.TemplateConfig(0, "implicit_gemm", knobs),)))
    rng = np.random.default_rng(k)
    a, b = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16)
    got, ref = f(a, b).astype(np.float32), a.astype(np.float32) @ b.astype(np.float32)
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()
    loop = f.explain({"A": a.shape, "B": b.shape}, {"A": "bfloat16", "B": "bfloat16"}, stage="loop")
    assert ("tile_dot_16x32" in loop) == has_tiles(host_cpu())


@pytest.mark.parametrize("m, n, k", [(4096, 16, 576), (4096, 64, 32), (16, 256, 1024)])
def test_products_that_would_leave_the_tiles_half_empty_stay_off_them(m, n, k):
    """Fewer than 64 reduction values or 32 rows or columns: the tiles' padding would cost more than
    they gain (tiles.tiles_pay), so no TileDot, on any CPU; the result against float32."""
    f = tilec.compile(GEMM)
    shapes, dtypes = {"A": (m, k), "B": (k, n)}, {"A": "bfloat16", "B": "bfloat16"}
    assert "tile_dot" not in f.explain(shapes, dtypes, stage="loop")
    rng = np.random.default_rng(m + n + k)
    a, b = rng.standard_normal((m, k)).astype(BF16), rng.standard_normal((k, n)).astype(BF16)
    got, ref = f(a, b).astype(np.float32), a.astype(np.float32) @ b.astype(np.float32)
    assert np.abs(got - ref).max() <= 1e-2 * np.abs(ref).max()


@settings(max_examples=8, deadline=None)
@given(b=st.integers(1, 2), h=st.integers(1, 3), s=st.integers(1, 140), d=st.sampled_from([32, 64, 96]),
       causal=st.booleans(), seed=st.integers(0, 2**31))
def test_bfloat16_attention_on_tiles_matches_float32(b, h, s, d, causal, seed):
    """bfloat16 attention (the fused template's tile variant where the CPU has AMX: both products on
    tiles, the softmax between them in float32) against torch's float32 attention of the same
    inputs, odd lengths and causal masks included."""
    torch = pytest.importorskip("torch")
    from tilec.bench.ops.sources import attention_source

    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=gen).to(torch.bfloat16) for _ in range(3))
    f = tilec.compile(attention_source({"B": b, "H": h, "S": s, "D": d}, causal))
    got = torch.from_numpy(np.asarray(f(Q=q, K=k, V=v)).astype(np.float32))
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    assert (got - want).abs().max() <= 2e-2 * want.abs().max()
    shapes = {"Q": (b, h, s, d), "K": (b, h, s, d), "V": (b, h, s, d)}
    loop = f.explain(shapes, dict.fromkeys(shapes, "bfloat16"), stage="loop")
    assert ("tile_dot" in loop) == has_tiles(host_cpu())


def test_a_features_last_mention_decides_whether_the_tiles_are_on():
    """`-mattr=-amx-tile` appended to a host's `+amx-tile` (the without_tiles fixture, TILEC_TARGET)
    turns the tiles off; both AMX features must be on."""
    from dataclasses import replace

    cpu = host_cpu()
    on = replace(cpu, features="+avx512f,+amx-tile,+amx-bf16")
    assert has_tiles(on)
    assert not has_tiles(replace(cpu, features="+amx-tile,+amx-bf16,-amx-tile"))
    assert not has_tiles(replace(cpu, features="+amx-tile,-amx-bf16"))
    assert has_tiles(replace(cpu, features="-amx-tile,+amx-bf16,+amx-tile"))


def test_an_amx_cpu_named_has_the_tiles_unless_its_features_turn_them_off():
    """`-mcpu=sapphirerapids` alone enables the tiles (its name says so: LLVM's feature string is
    empty), `-mattr=-amx-bf16` turns them off again; a CPU without AMX never has them."""
    from tilec.target import cpu_info

    assert has_tiles(cpu_info("sapphirerapids"))
    assert not has_tiles(cpu_info("sapphirerapids", "-amx-bf16"))
    assert not has_tiles(cpu_info("znver4")) and not has_tiles(cpu_info("haswell"))


def test_pair_dot_products_are_computed_in_float32_where_the_cpu_lacks_vdpbf16ps():
    """A TileDot lowered to loops vectorises DOT2_BF16 over 16 lanes: `vdpbf16ps` only where the
    CPU has it (a CPU without it aborted LLVM's code generation, taking the process down)."""
    from tilec.codegen.llvm.jit import emit_assembly, optimise
    from tilec.codegen.llvm.module import emit_module
    from tilec.target import cpu_info, has_pair_dot

    func = lower_tiles(tile_dot_func(16, 16, 2, L.const(32), L.const(True, "bool")))
    for name, features in (("haswell", ""), ("znver3", ""), ("znver4", ""), ("skylake-avx512", "")):
        cpu = cpu_info(name, features)
        asm = emit_assembly(optimise(emit_module(func, cpu), cpu), cpu)
        assert ("vdpbf16ps" in asm) == has_pair_dot(cpu) == (name == "znver4"), name
