"""Features of a candidate: a fixed-length float vector for the cost model.

Two parts: (1) analytic features of the template's loop nest, derived from the knobs and the
plan's extents (register-block size and pressure, bytes each buffer touches per innermost
iteration, packed-buffer sizes against L1/L2, padding waste at the edges, load balance of the
parallel loop); (2) optionally, totals read off the lowered loop IR (loops of each kind,
nesting depth, vector width, parallel extent, workspace and register-buffer bytes).

Part (1) costs microseconds per candidate and is all the search needs; part (2) lowers the
candidate (about a millisecond), so the Featurizer leaves it off unless asked. Features are
ratios and logarithms rather than raw sizes where possible, so that a model trained on one
shape of a template transfers to other shapes of it.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from tilec.autotune.space import L1_BYTES, L2_BYTES, vector_registers
from tilec.autotune.task import Task
from tilec.ir import loop as L

GEMM_NAMES = ("log_mr", "log_nr", "vectors", "log_kc", "log_mc", "pack_a", "pack_b", "threads", "reg_use", "log_block",
              "intensity", "bytes_per_flop", "b_panel_l1", "a_block_l2", "b_all_l2", "m_waste", "n_waste",
              "mc_waste", "k_waste", "edge_tiles", "imbalance", "k_blocks", "row_blocks", "log_m", "log_n",
              "log_k", "a_reads_per_elem", "a_panel_l1", "kernel_l1", "a_block_l1", "log_mc_tiles", "acc_regs",
              "b_all_l1", "n_tiles", "k_tail", "m_tail")
ATTENTION_NAMES = ("log_bq", "log_bk", "reg_use", "log_block", "intensity", "q_waste", "t_waste", "imbalance",
                   "log_s", "log_t", "log_d", "causal", "kt_tile_l1")
IR_NAMES = ("loops", "serial", "parallel", "vectorized", "unrolled", "depth", "vector_width", "parallel_extent",
            "log_workspace_bytes", "local_bytes")


def _log(x: float) -> float:
    return math.log2(max(x, 1e-9))


def _up(x: int, m: int) -> int:
    return -(-x // m) * m


def gemm_features(task: Task, c: Mapping[str, Any]) -> list[float]:
    p, t = task.plan, task.target
    itemsize = 4 if task.dtype == "float32" else 8
    lanes = t.lanes(task.dtype)
    m, n, k = p.m, p.n, p.k
    mr, nr, mc, pack = c["mr"], c["nr"], c["mc"], bool(c["pack_a"])
    kc = min(c["kc"], k) if pack else k
    threads = max(1, c["threads"] or t.cores)
    vectors = -(-nr // lanes)
    regs = (mr * vectors + vectors + 1) / vector_registers(t.vector_bits)
    row_units = -(-m // mc) if pack else -(-m // mr)
    per_thread = -(-row_units // threads)
    imbalance = per_thread * min(threads, row_units) / row_units
    tiles_m, tiles_n = -(-m // mr), -(-n // nr)
    edge = ((m % mr != 0) * tiles_n + (n % nr != 0) * tiles_m) / (tiles_m * tiles_n)
    return [_log(mr), _log(nr), vectors, _log(kc), _log(mc if pack else mr), float(pack), float(c.get("pack_b", True)),
            threads, regs,
            _log(mr * nr), mr * nr / (mr + nr), (mr + nr) * itemsize / (2 * mr * nr),
            kc * nr * itemsize / L1_BYTES, (mc if pack else mr) * kc * itemsize / L2_BYTES,
            kc * _up(n, nr) * itemsize / L2_BYTES, _up(m, mr) / m, _up(n, nr) / n,
            _up(m, mc) / m if pack else 1.0, _up(k, kc) / k, edge, imbalance, _log(-(-k // kc)), _log(row_units),
            _log(m), _log(n), _log(k), tiles_n if not pack else 1.0,
            # the micro-kernel's working set against L1: the A micro-panel (mr x kc), with the B
            # micro-panel (kc x nr), the packed A block (mc x kc) that every column panel re-reads
            mr * kc * itemsize / L1_BYTES, (mr + nr) * kc * itemsize / L1_BYTES,
            (mc if pack else mr) * kc * itemsize / L1_BYTES,
            _log((mc if pack else mr) / mr),  # micro-tiles per packed A block (B micro-panel reuse)
            mr * vectors,  # accumulator registers
            kc * _up(n, nr) * itemsize / L1_BYTES, _log(tiles_n),
            (k % kc) / kc, (m % (mc if pack else mr)) / (mc if pack else mr)]  # partial last blocks


def attention_features(task: Task, c: Mapping[str, Any]) -> list[float]:
    p, t = task.plan, task.target
    lanes = t.vector_bits // 32
    bq, bk = c["bq"], c["bk"]
    vectors = -(-bk // lanes)
    regs = (bq * vectors + vectors + 1) / vector_registers(t.vector_bits)
    batch = math.prod(hi - lo + 1 for _, lo, hi in p.batch)
    units = batch * -(-p.s // bq)
    per = -(-units // t.cores)
    return [_log(bq), _log(bk), regs, _log(bq * bk), bq * bk / (bq + bk), _up(p.s, bq) / p.s, _up(p.t, bk) / p.t,
            per * min(t.cores, units) / units, _log(p.s), _log(p.t), _log(p.d), float(p.causal),
            p.d * bk * 4 / L1_BYTES]


def loop_totals(func: L.PrimFunc) -> list[float]:
    """Totals of the loop IR: loops of each kind, depth, vector width, parallel extent, bytes."""
    kinds = {"serial": 0, "parallel": 0, "vectorized": 0, "unrolled": 0}
    depth = width = par = local = 0

    def extent(f: L.For) -> int:
        if isinstance(f.begin, L.Const) and isinstance(f.end, L.Const):
            return int(f.end.value) - int(f.begin.value)
        return 0

    def walk(s: L.Stmt | None, d: int) -> None:
        nonlocal depth, width, par, local
        if s is None:
            return
        if isinstance(s, L.For):
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
            depth = max(depth, d + 1)
            if s.kind == "vectorized":
                width = max(width, extent(s))
            if s.kind == "parallel":
                par = max(par, extent(s))
            walk(s.body, d + 1)
        elif isinstance(s, L.Seq):
            for x in s.stmts:
                walk(x, d)
        elif isinstance(s, L.If):
            walk(s.then, d)
            walk(s.orelse, d)
        elif isinstance(s, L.Allocate):
            local += s.buffer.size * (8 if s.buffer.dtype.endswith("64") else 4)
            walk(s.body, d)

    walk(func.body, 0)
    workspace = sum(b.size * 4 for b in func.params if "." in b.name)
    return [float(sum(kinds.values())), kinds["serial"], kinds["parallel"], kinds["vectorized"], kinds["unrolled"],
            depth, width, par, _log(workspace + 1), local / 1024]


class Featurizer:
    """Feature vectors of a task's candidates, memoised per config."""

    def __init__(self, task: Task, with_ir: bool = False) -> None:
        self.task = task
        self.with_ir = with_ir
        self._analytic = attention_features if task.template == "attention" else gemm_features
        base: tuple[str, ...] = ATTENTION_NAMES if task.template == "attention" else GEMM_NAMES
        from tilec.autotune import gpu

        if task.template in gpu.GPU_TUNABLE:  # knobs and GPU loop-IR counts (tilec.autotune.gpu)
            self._analytic = gpu.gpu_features  # type: ignore[assignment]
            base = tuple(sorted(task.default_config())) + gpu.GPU_IR_NAMES + ("log_flops_per_thread",)
            with_ir = self.with_ir = False  # the GPU features already hold the kernel's IR counts
        self.names: tuple[str, ...] = base + (IR_NAMES if with_ir else ())
        self._memo: dict[tuple, np.ndarray] = {}

    def __call__(self, config: Mapping[str, Any]) -> np.ndarray:
        key = tuple(sorted(config.items()))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        values = self._analytic(self.task, config)
        if self.with_ir:
            try:
                values += loop_totals(self.task.lower(config))
            except Exception:  # an illegal candidate: the measurement will say why
                values += [0.0] * len(IR_NAMES)
        vec = np.asarray(values, dtype=np.float32)
        self._memo[key] = vec
        return vec

    def matrix(self, configs: list[Mapping[str, Any]]) -> np.ndarray:
        if not configs:
            return np.zeros((0, len(self.names)), np.float32)
        return np.stack([self(c) for c in configs])
