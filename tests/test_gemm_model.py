"""The GEMM heuristic's analytical blocking (tilec.schedule.cpu.implicit_gemm.knobs) on synthetic CPUs.

Three CpuInfos stand for the machines the model must serve: a Sapphire Rapids-like core (two
512-bit FMA units, 48 KiB L1, 2 MiB L2), a Zen 4-like one (one full-width unit, 32 KiB L1, 1 MiB
L2) and an AVX2 core (256-bit vectors, 16 registers, 256 KiB L2). Each derives knobs that must
satisfy the model's own constraints (registers, latency hiding, cache fits, lanes, thread
balance), and GEMMs compiled for each (its vector width and caches, the host's instruction set)
must compute what numpy does.
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

import tilec
from tilec.ir.bounds import bind
from tilec.schedule import params
from tilec.schedule.cpu.implicit_gemm import IMPLICIT_GEMM
from tilec.schedule.cpu.implicit_gemm.knobs import (default_knobs, kernel_efficiency, knob_problems, register_block,
                                                    row_block, shared_panels_block)
from tilec.schedule.templates.base import Context
from tilec.target import CpuInfo, Target, host_cpu

GEMM = "C[i, j: M, N] = +(A[i, k] * B[k, j])"
HOST = host_cpu()
# Synthetic CPUs: the host's LLVM name and features (so that their code runs here), the model's inputs replaced.
CPUS = {
    "spr": replace(HOST, vector_bits=512, cores=4, fma_units=2, fma_latency=4, l1d_bytes=48 << 10, l2_bytes=2 << 20,
                   l3_bytes=105 << 20, l2_fill_bytes=64),
    "zen4": replace(HOST, vector_bits=512, cores=2, fma_units=1, fma_latency=4, l1d_bytes=32 << 10, l2_bytes=1 << 20,
                    l3_bytes=32 << 20, l2_fill_bytes=32),
    "avx2": replace(HOST, vector_bits=256, cores=3, fma_units=2, fma_latency=5, l1d_bytes=32 << 10,
                    l2_bytes=256 << 10, l3_bytes=8 << 20, l2_fill_bytes=32),
}
SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (128, 4096, 1024), (4096, 512, 512), (64, 1024, 1024),
          (1021, 999, 1003), (25088, 64, 576), (40, 40, 40)]


def knobs_for(cpu: CpuInfo, m: int, n: int, k: int, dtype: str = "float32"):
    target = Target("llvm", cpu)
    bp = bind(tilec.parse(GEMM), {"A": (m, k), "B": (k, n)}, {"A": dtype, "B": dtype})
    plan = IMPLICIT_GEMM.match(0, Context(bp, target, params.current()))
    assert plan is not None
    return target, plan, default_knobs(plan, dtype, target)


@pytest.mark.parametrize("name", sorted(CPUS))
@pytest.mark.parametrize("shape", SHAPES)
def test_derived_knobs_meet_the_model_constraints(name, shape):
    cpu = CPUS[name]
    m, n, k = shape
    target, plan, knobs = knobs_for(cpu, m, n, k)
    lanes = cpu.lanes("float32")
    vectors = knobs.nr // lanes
    assert knobs.nr % lanes == 0 and 1 <= vectors <= 4
    assert knobs.mr * vectors + vectors + 1 <= cpu.vector_registers  # accumulators, a B row, a broadcast
    assert knobs.nr <= max(lanes, -(-n // lanes) * lanes)  # no wholly empty vector
    if m >= 64:  # room for a block that hides the FMA latency and keeps the FMA units busy
        assert knobs.mr * vectors >= cpu.fma_latency * cpu.fma_units
        assert kernel_efficiency(knobs.mr, vectors, cpu) == 1.0
    assert 1 <= knobs.kc <= k
    if knobs.kc > 16:
        assert knobs.kc * knobs.nr * 4 <= cpu.l2_bytes // 4  # the B micro-panel: a quarter of L2
    blocks = -(-k // knobs.kc)
    assert blocks * knobs.kc - k < blocks  # K in equal blocks (the last short by less than one per block)
    assert knobs.mc % knobs.mr == 0
    if knobs.mc > knobs.mr:
        assert knobs.mc * knobs.kc * 4 <= cpu.l2_bytes // 4  # the packed A block: another quarter
    assert knobs.threads == cpu.cores
    assert knob_problems(knobs, plan, "float32", target) == []


@pytest.mark.parametrize("name", ["spr", "zen4"])
def test_a_block_fits_the_rows_exactly_when_one_can(name):
    """1024 rows and columns on AVX-512: a register block that tiles them with no edge (4 rows of 4
    vectors, where 6 would leave a partial tile). (On the AVX2 CPU no edge-free block hides the FMA
    latency: it needs 12 accumulators, (latency 5 + a cycle's slack) x 2 units.)"""
    cpu = CPUS[name]
    lanes = cpu.lanes("float32")
    mr, nr = register_block(1024, 1024, lanes, cpu)
    assert 1024 % mr == 0 and 1024 % nr == 0
    assert kernel_efficiency(mr, nr // lanes, cpu) == 1.0


@pytest.mark.parametrize("name", ["spr", "zen4"])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_block_padding_a_twentieth_of_a_percent_ties_with_one_that_tiles_exactly(name, threads):
    """8,192 rows (a stride-2 convolution's 32 x 16 x 16 pixels): the 6-row block pads 0.05% of them
    and ties with the 4-row block that tiles them, so the one with fewer loads per FMA wins (1.10x
    faster in bfloat16 on Zen 5); 1024 and 2048 rows, which 6 rows would pad by 0.2-0.4%, keep 4."""
    cpu = CPUS[name]
    lanes = cpu.lanes("float32")
    assert register_block(8192, 64, lanes, cpu, threads) == (6, 64)
    for rows in (1024, 2048):
        assert register_block(rows, 64, lanes, cpu, threads) == (4, 64)


@pytest.mark.parametrize("name", ["spr", "zen4"])
@pytest.mark.parametrize("rows, threads", [(9, 2), (9, 3), (13, 2), (27, 4)])
def test_few_rows_shared_by_threads_take_a_block_whose_tiles_share_out_evenly(name, rows, threads):
    """A weight gradient of a 1-channel 3x3 convolution has 9 rows: 3 tiles of 3 on two threads
    leave one thread idle half the time, 2 tiles of 5 do not."""
    cpu = CPUS[name]
    mr, _ = register_block(rows, 64, cpu.lanes("float32"), cpu, threads)
    assert -(-rows // mr) % threads == 0


@pytest.mark.parametrize("name", ["spr", "zen4", "avx2"])
@pytest.mark.parametrize("rows, cols, threads", [(9, 64, 2), (18, 64, 2), (27, 64, 2), (9, 128, 4), (32, 64, 2)])
def test_few_rows_let_the_threads_share_the_column_panels(name, rows, cols, threads):
    """Few rows (a weight gradient of a 1-3 channel convolution) take a block whose columns split
    evenly over the threads and that fits the registers; with AVX-512's 32 registers the 9 rows of a
    one-channel 3x3 filter fit one tile of 2 vectors."""
    cpu = CPUS[name]
    lanes = cpu.lanes("float32")
    block = shared_panels_block(rows, cols, lanes, cpu, threads)
    assert block is not None
    mr, nr = block
    assert nr % lanes == 0 and (-(-cols // nr)) % threads == 0
    assert mr * (nr // lanes) + nr // lanes + 1 <= cpu.vector_registers  # accumulators, a B row and a broadcast
    if (rows, cols, threads) == (9, 64, 2) and cpu.vector_bits == 512:
        assert (mr, nr) == (9, 32)


def test_many_rows_or_one_thread_keep_sharing_row_tiles():
    cpu = CPUS["zen4"]
    lanes = cpu.lanes("float32")
    assert shared_panels_block(9, 64, lanes, cpu, 1) is None
    assert shared_panels_block(9, 16, lanes, cpu, 2) is None  # one panel: nothing to share
    for m, n in ((1024, 1024), (2048, 256)):  # where panels are shared anyway, the row block serves as well
        assert shared_panels_block(m, n, lanes, cpu, 2) in (None, register_block(m, n, lanes, cpu, 2))


def test_a_one_channel_convolution_weight_gradient_shares_the_columns_and_matches_torch(pairs_target):
    """The 9 x 64 weight gradient of a 1 -> 64 3x3 convolution over 32 32x32 images: on AVX-512
    (32 vector registers: 9 rows of two vectors fit) each thread one 32-column panel of all 9 rows
    (it read the output gradient once between them, 1.35x faster in float32 on Zen 5), the sums
    torch's on this CPU."""
    import torch

    from tilec.ops.sources import conv_source

    src = conv_source((1, 1), ((1, 1), (1, 1)), (1, 1), True, 1, False, False)
    shapes = {"X": (32, 1, 32, 32), "F": (64, 1, 3, 3), "Bias": (64,), "DO": (32, 64, 32, 32)}
    grad = tilec.grad(src, wrt=["F", "Bias"])
    if HOST.cores >= 2:
        templates = tilec.explain(grad.source, shapes, {k: "float32" for k in shapes}, stage="templates",
                                  target=pairs_target)
        line = next(t for t in templates.splitlines() if "DK_" in t and "implicit_gemm" in t)
        assert "mr=9 nr=32" in line, line
    rng = np.random.default_rng(4)
    x, f, bias, dout = (rng.standard_normal(shapes[k]).astype(np.float32) for k in ("X", "F", "Bias", "DO"))
    df, dbias = grad(x, f, bias, dout)
    xt, ft, bt = (torch.from_numpy(a).requires_grad_() for a in (x, f, bias))
    torch.nn.functional.conv2d(xt, ft, bt, padding=1).backward(torch.from_numpy(dout))
    np.testing.assert_allclose(df, ft.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(dbias, bt.grad.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=znver4", "llvm"])
def test_a_convolution_on_a_small_map_reads_a_in_place_and_shares_the_weights(target):
    """A 3x3 512 -> 512 convolution on 2x2 maps of 8 images is a product of 32 rows against 9.4 MB
    of weights: the packed variant would give each thread one row block, for which each would read
    all of the weights; the direct variant's threads share their column panels (Zen 3, both cores:
    4.68 ms packed, 2.49 direct, torch 4.08). With 392 rows (stride 2 from 14x14 maps, 128 -> 512
    channels) each thread has several row blocks and the packed variant stays. The results are
    torch's on this CPU."""
    import torch

    from tilec.ops.sources import conv2d_source

    def chosen(src: str, x: tuple[int, ...], f: tuple[int, ...]) -> str:
        templates = tilec.explain(src, {"X": x, "F": f}, stage="templates", target=target)
        return next(t for t in templates.splitlines() if "implicit_gemm" in t)

    same, halving = conv2d_source((1, 1), (1, 1), (1, 1), False), conv2d_source((2, 2), (1, 1), (1, 1), False)
    if HOST.cores >= 2:
        assert "implicit_gemm[direct]" in chosen(same, (8, 512, 2, 2), (512, 512, 3, 3))
        assert "implicit_gemm[packed]" in chosen(halving, (8, 128, 14, 14), (512, 128, 3, 3))
    if target == "llvm":
        x, f = torch.randn(8, 512, 2, 2), torch.randn(512, 512, 3, 3)
        got = torch.as_tensor(np.asarray(tilec.compile(same)(x, f)))
        torch.testing.assert_close(got, torch.nn.functional.conv2d(x, f, padding=1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("tiles, threads", [(256, 2), (171, 2), (170, 3), (16, 16), (1000, 7), (5, 8)])
def test_row_blocks_balance_the_threads(tiles, threads):
    """The busiest thread gets less than one block more than an even share of the MR-row tiles."""
    mr, kc, size = 4, 512, 4
    cpu = CPUS["zen4"]
    mc = row_block(tiles * mr, mr, kc, size, cpu, threads)
    per_block = mc // mr
    assert mc % mr == 0 and per_block * kc * size * mr <= max(cpu.l2_bytes // 4, kc * size * mr)
    blocks = -(-tiles // per_block)
    busiest = min(-(-blocks // threads) * per_block, tiles)
    assert busiest - -(-tiles // threads) < per_block


def test_a_block_that_asks_more_of_l2_than_it_sustains_loses_to_a_narrower_one():
    """Two 256-bit FMA units (AVX2 on Zen 3) finish a 2 x 4-vector block's k step in 4 cycles, in
    which it reads 128 bytes of B from L2: more than Zen 3's 32-byte fill path sustains, so the
    model takes a block of at most 3 vectors (measured: 2 x 4 ran 0.75-0.79x the speed of 4 x 3).
    A 64-byte fill path (Intel's) keeps up; the AVX-512 blocks of 6 rows read at most 22 bytes a
    cycle on either."""
    zen3 = replace(CPUS["avx2"], fma_latency=4, l2_bytes=512 << 10, l3_bytes=32 << 20, cores=2)
    assert kernel_efficiency(2, 4, zen3) == pytest.approx(0.75)
    assert kernel_efficiency(4, 3, zen3) == kernel_efficiency(6, 2, zen3) == 1.0
    for m in (1024, 2048, 4096):
        mr, nr = register_block(m, m, zen3.lanes("float32"), zen3, 2)
        assert nr // zen3.lanes("float32") <= 3 and kernel_efficiency(mr, nr // 8, zen3) == 1.0
    assert kernel_efficiency(2, 4, replace(zen3, l2_fill_bytes=64)) > kernel_efficiency(2, 4, zen3)
    for name in ("spr", "zen4"):
        assert kernel_efficiency(6, 4, CPUS[name]) == 1.0


def test_more_fma_units_or_latency_ask_for_more_accumulators():
    """A block that hides one FMA unit's latency is not enough for two: its efficiency halves. The
    chains need a cycle beyond the latency (knobs.CHAIN_SLACK)."""
    one, two = CPUS["zen4"], CPUS["spr"]  # latency 4: 5 chains (a cycle's slack) per unit
    assert kernel_efficiency(5, 1, one) == 1.0
    assert kernel_efficiency(5, 1, two) == pytest.approx(0.5)
    assert kernel_efficiency(4, 1, one) == pytest.approx(0.8)  # no slack
    slow = replace(one, fma_latency=9)
    assert kernel_efficiency(5, 1, slow) == pytest.approx(0.5)
    mr, nr = register_block(1024, 1024, slow.lanes("float32"), slow)
    assert mr * (nr // slow.lanes("float32")) >= 8


@pytest.mark.parametrize("name", sorted(CPUS))
@pytest.mark.parametrize("shape", [(100, 70, 300), (64, 1024, 96), (193, 130, 257)])
def test_gemms_with_the_derived_knobs_match_numpy(name, shape):
    m, n, k = shape
    target, _, knobs = knobs_for(CPUS[name], m, n, k)
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    fn = tilec.compile(GEMM, target)
    shown = fn.explain({"A": a.shape, "B": b.shape}, stage="templates")
    assert f"mr={knobs.mr} nr={knobs.nr} kc={knobs.kc} mc={knobs.mc}" in shown
    np.testing.assert_allclose(fn(a, b), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name", sorted(CPUS))
def test_bfloat16_gemm_with_the_derived_knobs(name):
    """16-bit operands share the template: the knobs count float32 lanes, the results match a float32 product."""
    m, n, k = 96, 80, 200
    target, plan, knobs = knobs_for(CPUS[name], m, n, k, "bfloat16")
    assert knob_problems(knobs, plan, "bfloat16", target) == []
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    out = tilec.compile(GEMM, target)(a, b)
    np.testing.assert_allclose(np.asarray(out, np.float32), a.astype(np.float32) @ b.astype(np.float32),
                               rtol=2e-2, atol=2e-1)


@pytest.mark.parametrize("rows, packed", [(1024, True), (512, True), (1000, True), (256, False)])
def test_a_read_half_a_page_apart_per_reduction_step_is_packed(rows, packed):
    """A linear layer's weight gradient reads A transposed: with 512 float32 rows (2 KiB) or more, every
    other step of the reduction moves the direct variant's reads to another page, so A is packed; a
    narrower transposed A is read in place. Either way the product is numpy's."""
    k, n = 96, 160  # more column panels than the direct variant takes for few panels alone
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((k, rows)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    fn = tilec.compile("C[i, j: M, N] = +(A[k, i] * B[k, j])")
    shown = fn.explain({"A": a.shape, "B": b.shape}, stage="templates")
    assert (f"pack_a={packed}" in shown) and ("[packed]" in shown) == packed, shown
    np.testing.assert_allclose(fn(a, b), a.T @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("name", sorted(CPUS))
def test_a_block_per_fetched_line_holds_the_most_accumulators_that_fit(name):
    """Where every reduction step fetches A's line again (per_line), the block with the most FMAs per
    line wins: MR x V accumulators, with a B row and a broadcast beside them in the registers."""
    cpu = CPUS[name]
    lanes = cpu.vector_bits // 32
    mr, nr = register_block(1024, 256, lanes, cpu, 2, per_line=True)
    vectors = nr // lanes
    assert mr * vectors + vectors + 1 <= cpu.vector_registers
    best = max(min(16, (cpu.vector_registers - v - 1) // v) * v for v in range(1, 5))
    assert mr * vectors >= best - 1  # the edge tiles' waste may cost a row
    assert mr * vectors > (lambda b: b[0] * b[1] // lanes)(register_block(1024, 256, lanes, cpu, 2))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("rows, tall", [(1024, True), (2048, True), (1000, False), (256, False)])
def test_a_transposed_a_whose_steps_alias_in_l1_takes_a_tall_block(rows, tall, dtype, without_tiles):
    """A transposed A read in place whose reduction steps (pairs of steps for bfloat16 pairs) move by a
    multiple of 4 KiB puts all of a tile's lines in one L1 set, so each line is fetched again for every
    tile: the heuristic then takes the block with the most rows per line. Either way numpy's product."""
    k, n = 96, 64  # few column panels: the direct variant
    rng = np.random.default_rng(rows)
    dt = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    a = rng.standard_normal((k, rows)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    fn = tilec.compile("C[i, j: M, N] = +(A[k, i] * B[k, j])")
    shown = fn.explain({"A": a.shape, "B": b.shape}, {"A": dtype, "B": dtype}, stage="templates")
    default_mr = register_block(rows, n, HOST.vector_bits // 32, HOST, HOST.cores)[0]
    assert "[direct]" in shown and (f"mr={default_mr} " not in shown) == tall, shown
    np.testing.assert_allclose(np.asarray(fn(a, b), np.float32), a.astype(np.float32).T @ b.astype(np.float32),
                               rtol=2e-2 if dtype == "bfloat16" else 1e-4, atol=2e-1 if dtype == "bfloat16" else 1e-3)


@pytest.mark.parametrize("name", ["spr", "zen4"])
def test_a_negligible_edge_waste_does_not_outweigh_fewer_loads_per_fma(name):
    """A 3x3 convolution over 8 x 56 x 56 pixels: a 6-row block pads 0.02% of the 25,088 rows, which must
    not make the 4 x 4-vector block (an exact fit, more loads per FMA) win: within knobs.SCORE_TIE the
    fewest loads per FMA decide (measured on Zen 5: the 4 x 4 block ran the convolution 1.08x slower)."""
    cpu = CPUS[name]
    lanes = cpu.lanes("float32")
    mr, nr = register_block(8 * 56 * 56, 64, lanes, cpu, 2)
    vectors = nr // lanes
    assert kernel_efficiency(mr, vectors, cpu) == 1.0
    assert (mr + vectors) / (mr * vectors) < (4 + 4) / (4 * 4)
