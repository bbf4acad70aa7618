"""Search spaces: named knobs with explicit choice lists, constraints with reasons, and an
integer index over the legal points.

The legal points are enumerated once, in the mixed-radix order of the knobs (the last knob
varies fastest), so `config(i)` and `index(config)` are deterministic for a given task and
target. The heuristic's default config is always a point of the space, even where it breaks
a constraint (the constraints are the tuner's taste; the default is the baseline to beat).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tilec.autotune.task import Config, Task
from tilec.errors import TilecError
from tilec.schedule.cpu import attention
from tilec.schedule.cpu.gemm import direct as direct_gemm
from tilec.schedule.cpu.heuristic import inplace_columns

MAX_RAW_POINTS = 200_000  # knob combinations enumerated before constraints
L1_BYTES = 32 * 1024  # assumed data-cache sizes (the Target does not describe caches yet)
L2_BYTES = 1024 * 1024


class SpaceTooLarge(TilecError):
    """The knobs' choice lists multiply to more points than the cap."""


@dataclass(frozen=True)
class Knob:
    name: str
    choices: tuple[Any, ...]


@dataclass(frozen=True)
class Constraint:
    """`check(config)` is None when the config is legal, else the reason it is not."""

    name: str
    check: Callable[[Config], str | None]


class Space:
    def __init__(self, knobs: tuple[Knob, ...], constraints: tuple[Constraint, ...] = (),
                 default: Config | None = None, max_points: int = MAX_RAW_POINTS) -> None:
        self.knobs = knobs
        self.constraints = constraints
        self.names = tuple(k.name for k in knobs)
        raw = math.prod(len(k.choices) for k in knobs)
        if raw > max_points:
            sizes = ", ".join(f"{k.name}: {len(k.choices)}" for k in knobs)
            raise SpaceTooLarge(f"the search space has {raw} knob combinations ({sizes}), more than the cap of "
                                f"{max_points}; drop choices from the largest knob or raise max_points")
        self.rejections: Counter[str] = Counter()
        points = []
        for values in itertools.product(*(k.choices for k in knobs)):
            config = dict(zip(self.names, values))
            reason = self.reason(config)
            if reason is None or config == default:
                points.append(values)
            else:
                self.rejections[reason.split(":")[0]] += 1
        self._points: list[tuple[Any, ...]] = points
        self._index = {p: i for i, p in enumerate(points)}
        if not points:
            raise TilecError(f"the search space is empty: every point breaks a constraint ({dict(self.rejections)})")

    def __len__(self) -> int:
        return len(self._points)

    def config(self, i: int) -> Config:
        return dict(zip(self.names, self._points[i]))

    def index(self, config: Mapping[str, Any]) -> int | None:
        """The index of a legal config, None for one outside the space."""
        try:
            return self._index.get(tuple(config[n] for n in self.names))
        except KeyError:
            return None

    def reason(self, config: Mapping[str, Any]) -> str | None:
        """Why `config` is illegal ("name: explanation"), or None."""
        for c in self.constraints:
            why = c.check(dict(config))
            if why is not None:
                return f"{c.name}: {why}"
        return None

    def neighbours(self, i: int) -> list[int]:
        """Legal points differing from point i in one knob, by one step of its choice list."""
        point = self._points[i]
        out = []
        for k, knob in enumerate(self.knobs):
            pos = knob.choices.index(point[k])
            for step in (-1, 1):
                if 0 <= pos + step < len(knob.choices):
                    j = self._index.get(point[:k] + (knob.choices[pos + step],) + point[k + 1:])
                    if j is not None:
                        out.append(j)
        return out

    def random_neighbour(self, i: int, rng: Any) -> int:
        """A legal point differing from point i in one knob (any choice), or i if none is."""
        point = self._points[i]
        for _ in range(8):
            k = int(rng.integers(len(self.knobs)))
            value = self.knobs[k].choices[int(rng.integers(len(self.knobs[k].choices)))]
            j = self._index.get(point[:k] + (value,) + point[k + 1:])
            if j is not None and j != i:
                return j
        near = self.neighbours(i)
        return near[int(rng.integers(len(near)))] if near else i


def _with(choices: tuple[Any, ...], *extra: Any) -> tuple[Any, ...]:
    return tuple(sorted(set(choices) | set(extra), key=lambda v: (str(type(v)), v)))


def vector_registers(vector_bits: int) -> int:
    return 32 if vector_bits >= 512 else 16


def gemm_space(task: Task, max_points: int = MAX_RAW_POINTS) -> Space:
    plan, target = task.plan, task.target
    default = task.default_config()
    itemsize = 4 if task.dtype == "float32" else 8
    lanes = target.lanes(task.dtype)
    regs = vector_registers(target.vector_bits)
    m, n, k = plan.m, plan.n, plan.k
    mrs = _with((1, 2, 3, 4, 6, 8, 10, 12, 14), default["mr"])
    nrs = _with(tuple(lanes * v for v in (1, 2, 3, 4) if lanes * v <= max(lanes, -(-n // lanes) * lanes)),
                default["nr"])
    kcs = _with(tuple(c for c in (16, 32, 64, 128, 256, 512) if c < k) + (min(k, 512),), default["kc"])
    m_up = max(mrs) * -(-m // max(mrs))
    mcs = _with(tuple(sorted({mr * j for mr in mrs for j in (1, 2, 4, 8, 12, 16, 24, 32) if mr * j <= m_up})),
                default["mc"])
    pack_as = (True, False) if direct_gemm.applicable(plan, task.bound) else (True,)
    inplace_ns = inplace_columns(task.stmt, task.bound, target)
    pack_bs = (True, False) if inplace_ns else (True,)
    knobs = (Knob("mr", mrs), Knob("nr", nrs), Knob("kc", kcs), Knob("mc", mcs),
             Knob("threads", (default["threads"],)), Knob("pack_a", _with(pack_as, default["pack_a"])),
             Knob("pack_b", _with(pack_bs, default["pack_b"])))

    def registers(c: Config) -> str | None:
        used = c["mr"] * c["nr"] // lanes + c["nr"] // lanes + 1
        return None if used <= regs else (f"the {c['mr']}x{c['nr']} block needs {used} vector registers "
                                          f"(accumulators, a B row, an A broadcast), more than the {regs} there are")

    def mc_multiple(c: Config) -> str | None:
        return None if c["mc"] % c["mr"] == 0 else f"mc ({c['mc']}) must be a multiple of mr ({c['mr']})"

    def mc_rows(c: Config) -> str | None:
        limit = c["mr"] * -(-m // c["mr"])
        return None if c["mc"] <= limit else f"mc ({c['mc']}) exceeds the {m} rows rounded up to mr ({limit})"

    def b_panel(c: Config) -> str | None:
        size = min(c["kc"], k) * c["nr"] * itemsize
        return None if size <= L2_BYTES // 2 else f"the B micro-panel (kc x nr, {size} bytes) overflows half of L2"

    def a_block(c: Config) -> str | None:
        size = c["mc"] * min(c["kc"], k) * itemsize
        return None if size <= L2_BYTES else f"the packed A block (mc x kc, {size} bytes) overflows L2"

    def direct_canonical(c: Config) -> str | None:
        if c["pack_a"] or (c["kc"] == kcs[0] and c["mc"] == c["mr"]):
            return None
        return "pack_a=False ignores kc and mc: only kc=first choice, mc=mr are kept"

    def inplace(c: Config) -> str | None:
        if c["pack_b"]:
            return None
        if c["pack_a"]:
            return "pack_b=False reads A in place too: it needs pack_a=False"
        if any(w % c["nr"] == 0 for w in inplace_ns):
            return None
        return f"pack_b=False needs nr ({c['nr']}) to divide the columns ({', '.join(map(str, inplace_ns))})"

    def direct_legal(c: Config) -> str | None:
        if c["pack_a"] or False in pack_as:
            return None
        return "pack_a=False needs A's only guards to be its own bounds (direct_gemm.applicable)"

    constraints = (Constraint("registers", registers), Constraint("mc_multiple", mc_multiple),
                   Constraint("mc_rows", mc_rows), Constraint("b_panel", b_panel), Constraint("a_block", a_block),
                   Constraint("direct_canonical", direct_canonical), Constraint("direct_legal", direct_legal),
                   Constraint("inplace", inplace))
    return Space(knobs, constraints, default, max_points)


def attention_space(task: Task, max_points: int = MAX_RAW_POINTS) -> Space:
    plan, default = task.plan, task.default_config()
    regs = vector_registers(task.target.vector_bits)
    lanes = task.target.vector_bits // 32
    t_up = attention.LANES * -(-plan.t // attention.LANES)
    knobs = (Knob("bq", _with((1, 2, 3, 4, 6, 8, 10, 12, 16), default["bq"])),
             Knob("bk", _with(tuple(b for b in (16, 32, 48, 64, 96, 128, 192, 256) if b <= max(16, t_up)),
                              default["bk"])))

    def multiple(c: Config) -> str | None:
        return None if c["bk"] % attention.LANES == 0 else f"bk ({c['bk']}) must be a multiple of {attention.LANES}"

    def registers(c: Config) -> str | None:
        used = c["bq"] * -(-c["bk"] // lanes) + -(-c["bk"] // lanes) + 1
        return None if used <= regs else f"the {c['bq']}x{c['bk']} score block needs {used} vector registers, " \
                                         f"more than the {regs} there are"

    def rows(c: Config) -> str | None:
        return None if c["bq"] <= plan.s else f"bq ({c['bq']}) exceeds the {plan.s} query rows"

    return Space(knobs, (Constraint("bk_multiple", multiple), Constraint("registers", registers),
                         Constraint("rows", rows)), default, max_points)


def space_for(task: Task, max_points: int = MAX_RAW_POINTS) -> Space:
    from tilec.autotune import gpu  # (imports this module)

    if task.template in gpu.GPU_TUNABLE:
        return gpu.gpu_space(task)  # type: ignore[arg-type]
    return attention_space(task, max_points) if task.template == "attention" else gemm_space(task, max_points)
