"""GPU lowering (tilec.schedule.gpu.launch), `bind`, shared `cache_read`, and the cuda/cuda-sim targets."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilec
from tilec.pipeline import Signature, lower_program
from tilec.errors import ScheduleError, TilecError
from tilec.ir import loop as L
from tilec.schedule.primitives.records import Bind, CacheRead, Schedule, Split
from tilec.ir.visitor import walk
from tilec.pipeline import resolve_target

from reference import MATMUL, assert_matches, randn, rng

SCATTER = "function (A[N], B[M]) -> (O) { O[i + j: N + M - 1] = +(A[i] * B[j]); }"


def gpu_func(source: str, shapes: dict[str, tuple[int, ...]], schedule: Schedule | None = None) -> L.PrimFunc:
    fn = tilec.compile(source, target="cuda-sim")
    sig = Signature(tuple((n, shapes[n]) for n in fn.inputs), tuple((n, "float32") for n in fn.inputs), ())
    return lower_program(fn.program, sig, schedule, fn.target)[1]


def launches(func: L.PrimFunc) -> tuple[L.Stmt, ...]:
    return func.body.stmts if isinstance(func.body, L.Seq) else (func.body,)


def test_default_binding_is_blocks_of_threads_with_a_guard_only_when_needed() -> None:
    even = gpu_func(MATMUL, {"A": (64, 8), "B": (8, 32)})  # 2048 cells: 8 blocks of 256
    odd = gpu_func(MATMUL, {"A": (33, 8), "B": (8, 45)})
    for func in (even, odd):
        (nest,) = launches(func)
        assert isinstance(nest, L.For) and nest.kind == "blockIdx.x"
        assert isinstance(nest.body, L.For) and nest.body.kind == "threadIdx.x"
    assert (even.body.end, even.body.body.end) == (L.const(8), L.const(256))  # type: ignore[union-attr]
    assert not any(isinstance(n, L.If) for n in walk(even.body))
    assert isinstance(odd.body.body.body, L.If)  # type: ignore[union-attr]


def test_scatter_nest_with_possible_conflicts_runs_in_one_thread() -> None:
    func = gpu_func(SCATTER, {"A": (7,), "B": (5,)})
    init, update = launches(func)
    assert isinstance(update, L.For) and update.end == L.const(1) and update.body.end == L.const(1)  # type: ignore[union-attr]
    r = rng(0)
    a, b = randn(r, 7), randn(r, 5)
    assert_matches(tilec.compile(SCATTER, target="cuda-sim")(a, b), np.convolve(a, b))


def tiled_matmul(tile: int = 8, kt: int = 4, shared: tuple[str, ...] = ("A", "B")) -> Schedule:
    s = Schedule()
    io, ii = s.split("i", tile)
    jo, ji = s.split("j", tile)
    s.reorder(io, jo, ii, ji)
    s.bind(io, "blockIdx.y")
    s.bind(jo, "blockIdx.x")
    s.bind(ii, "threadIdx.y")
    s.bind(ji, "threadIdx.x")
    ko, _ = s.split("k", kt)
    for t in shared:
        s.cache_read(t, ko, scope="shared")
    return s


@pytest.mark.parametrize("m,k,n,tile,kt,shared", [(32, 24, 40, 8, 4, ("A", "B")), (16, 12, 16, 4, 3, ("A",)),
                                                   (16, 8, 32, 16, 8, ("B",))])
def test_shared_memory_tiled_matmul(m: int, k: int, n: int, tile: int, kt: int, shared: tuple[str, ...]) -> None:
    s = tiled_matmul(tile, kt, shared)
    func = gpu_func(MATMUL, {"A": (m, k), "B": (k, n)}, s)
    bufs = [n_.buffer for n_ in walk(func.body) if isinstance(n_, L.Allocate)]
    assert {b.name for b in bufs if b.scope == "shared"} == {f"{t}.shared" for t in shared}
    assert sum(isinstance(x, L.Barrier) for x in walk(func.body)) == 2  # one pair, shared by both tiles
    r = rng(1)
    a, b = randn(r, m, k), randn(r, k, n)
    assert_matches(tilec.compile(MATMUL, target="cuda-sim").with_schedule(s)(a, b), a @ b)


def test_threads_only_binding_runs_in_one_block() -> None:
    s = Schedule()
    s.bind("i", "threadIdx.y")
    s.bind("j", "threadIdx.x")
    func = gpu_func(MATMUL, {"A": (6, 5), "B": (5, 7)}, s)
    (nest,) = launches(func)
    assert isinstance(nest, L.For) and nest.kind == "blockIdx.x" and nest.end == L.const(1)
    r = rng(2)
    a, b = randn(r, 6, 5), randn(r, 5, 7)
    assert_matches(tilec.compile(MATMUL, target="cuda-sim").with_schedule(s)(a, b), a @ b)


@pytest.mark.parametrize("prims,match", [
    ([Bind("k", "threadIdx.x")], "reduction loop"),
    ([Bind("i", "warp.x")], "unknown GPU axis"),
    ([Bind("i", "threadIdx.x"), Bind("j", "threadIdx.x")], "already bound to threadIdx.x"),
    ([Bind("j", "blockIdx.x"), Bind("i", "blockIdx.x")], "already bound to blockIdx.x"),
    ([Bind("i", "threadIdx.x"), Bind("j", "blockIdx.x")], "block loops must be outside thread loops"),
    ([Bind("j", "blockIdx.x"), Bind("i", "threadIdx.x")], "block loops must be outside thread loops"),
    ([Bind("i", "threadIdx.x"), Bind("i", "threadIdx.y")], "already bound"),
    ([Bind("j", "threadIdx.x")], "encloses the bound loops"),
    ([Bind("j", "threadIdx.x"), Split("j", 2)], "split, fuse and reorder loops before binding"),
    ([CacheRead("A", "k", scope="shared")], "not inside a thread loop"),
    ([Bind("i", "threadIdx.x"), CacheRead("A", "k", scope="shared")], "no block loop"),
    ([CacheRead("A", "k", scope="texture")], "unknown scope"),
])
def test_bind_and_shared_cache_read_refusals(prims: list, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        gpu_func(MATMUL, {"A": (8, 4), "B": (4, 8)}, Schedule(prims))


def test_bind_of_a_triangular_loop_runs_to_its_bound_with_a_guard() -> None:
    source = "function (A[N, N]) -> (O) { O[i, j: N, N + 1] = +(A[i, j]), i - j < N; }"
    s = Schedule([Bind("i", "blockIdx.x", nest=1), Bind("j", "threadIdx.x", nest=1)])
    func = gpu_func(source, {"A": (6, 6)}, s)
    update = launches(func)[1]
    assert isinstance(update, L.For) and update.body.end == L.const(6)  # type: ignore[union-attr]
    assert isinstance(update.body.body, L.If)  # type: ignore[union-attr]
    a = randn(rng(4), 6, 6)
    assert_matches(tilec.compile(source, target="cuda-sim").with_schedule(s)(a), np.pad(np.tril(a), ((0, 0), (0, 1))))


def test_shared_tile_under_a_guard_is_refused() -> None:
    s = tiled_matmul(8, 4, ())
    s.cache_read("A", "k.o", scope="shared")
    with pytest.raises(ScheduleError, match="under a condition"):
        gpu_func(MATMUL, {"A": (30, 8), "B": (8, 30)}, s)  # 30 % 8: the split adds min() bounds, not ifs


def test_gpu_primitives_are_refused_on_the_cpu() -> None:
    a = randn(rng(3), 4, 4)
    for prim in (Bind("i", "threadIdx.x"), CacheRead("A", "k", scope="shared")):
        fn = tilec.compile(MATMUL).with_schedule(Schedule([prim]))
        with pytest.raises(ScheduleError, match="GPU-only primitive"):
            fn(a, a)


def test_gpu_primitives_round_trip_through_json() -> None:
    s = tiled_matmul()
    again = Schedule.from_json(s.to_json())
    assert again == s and again.key() == s.key()
    assert "scope" not in Schedule([CacheRead("A", "k")]).to_json()[0]  # CPU schedules keep their keys


def test_targets_build_without_a_gpu() -> None:
    cuda = resolve_target("cuda")
    assert cuda.name == "cuda" and cuda.gpu is not None and cuda.gpu.arch.startswith("sm_") and cuda.is_gpu
    sim = resolve_target("cuda-sim")
    assert sim.is_gpu and sim.key != resolve_target("llvm").key
    with pytest.raises(TilecError, match="known targets"):
        resolve_target("opencl")


def test_explain_gpu_stage_and_cuda_without_its_backend() -> None:
    text = tilec.explain(MATMUL, {"A": (8, 4), "B": (4, 8)}, target="cuda-sim", stage="gpu")
    assert "blockIdx.x" in text and "threadIdx.x" in text
    whole = tilec.explain(MATMUL, {"A": (8, 4), "B": (4, 8)}, target="cuda-sim")
    assert ";; ---- gpu ----" in whole and ";; ---- llvm ----" in whole
    with pytest.raises(TilecError, match="needs a GPU target"):
        tilec.explain(MATMUL, {"A": (8, 4), "B": (4, 8)}, stage="gpu")
    if importlib.util.find_spec("tilec.codegen.cuda.source") is None:
        with pytest.raises(TilecError, match="cuda-sim"):
            tilec.explain(MATMUL, {"A": (8, 4), "B": (4, 8)}, target="cuda", stage="cuda")
        with pytest.raises(TilecError, match="cuda-sim"):
            tilec.compile(MATMUL, target="cuda")(np.ones((2, 2), "float32"), np.ones((2, 2), "float32"))


def test_cli_explain_cuda_sim(capsys: pytest.CaptureFixture[str]) -> None:
    from tilec.cli import main

    assert main(["explain", MATMUL, "--shape", "A=4x3", "--shape", "B=3x5", "--target", "cuda-sim",
                 "--stage", "gpu"]) == 0
    assert "threadIdx.x" in capsys.readouterr().out


# ------------------------------------------------------------------ random legal bind schedules

PROGRAMS = [
    (MATMUL, {"A": (6, 5), "B": (5, 8)}, lambda a, b: a @ b),
    ("function (X[N, C], Y[C]) -> (O) { O = X + Y; }", {"X": (7, 4), "Y": (4,)}, lambda x, y: x + y),
    ("O[n, c: N, C] = >(X[n, c, k])", {"X": (3, 4, 6)}, lambda x: x.max(axis=2)),
]
AXES = ["blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y", "threadIdx.z"]


@st.composite
def gpu_schedules(draw: st.DrawFn) -> tuple[int, list]:
    k = draw(st.integers(0, len(PROGRAMS) - 1))
    loops = ["i", "j", "k", "n", "c", "i0", "i1"]
    prims: list = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["split", "bind", "bind", "fuse"]))
        loop = draw(st.sampled_from(loops))
        if kind == "split":
            prims.append(("split", loop, draw(st.integers(1, 4))))
            loops += [f"{loop}.o", f"{loop}.i"]
        elif kind == "fuse":
            inner = draw(st.sampled_from(loops))
            prims.append(("fuse", loop, inner))
            loops.append(f"{loop}.{inner}.f")
        else:
            prims.append(("bind", loop, draw(st.sampled_from(AXES))))
    return k, prims


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpu_schedules(), st.integers(0, 2**32 - 1))
def test_random_legal_bind_schedules_compute_the_default(case: tuple[int, list], seed: int) -> None:
    index, wanted = case
    source, shapes, ref = PROGRAMS[index]
    s = Schedule()
    for kind, a, b in wanted:  # keep what is legal, primitive by primitive
        trial = Schedule(s.primitives)
        getattr(trial, kind)(a, b)
        try:
            gpu_func(source, shapes, trial)
        except ScheduleError:
            continue
        s = trial
    r = rng(seed)
    arrays = [randn(r, *shapes[n]) for n in shapes]
    out = tilec.compile(source, target="cuda-sim").with_schedule(s)(*arrays)
    assert_matches(out, ref(*arrays))


@pytest.mark.parametrize("m,k,n,tiled", [(32, 48, 64, True), (16, 16, 16, True), (32, 20, 64, True),  # ragged: gpu_gemm template
                                         (30, 16, 32, False)])
def test_default_matmul_uses_shared_tiles_where_they_divide(m: int, k: int, n: int, tiled: bool) -> None:
    func = gpu_func(MATMUL, {"A": (m, k), "B": (k, n)})
    scopes = {x.buffer.scope for x in walk(func.body) if isinstance(x, L.Allocate)}
    assert ("shared" in scopes) == tiled
    r = rng(5)
    a, b = randn(r, m, k), randn(r, k, n)
    assert_matches(tilec.compile(MATMUL, target="cuda-sim")(a, b), a @ b)
