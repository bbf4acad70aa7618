"""Schedule primitives as data: small frozen records, JSON round-trippable.

**Naming loops.** A loop is named by its variable name (as ``tilec explain --stage loop``
prints it) and by ``nest``: the index of the top-level loop nest it lives in, counting
the statements of the PrimFunc body from 0 (a single-statement program has one nest, 0;
a contraction in scatter form lowers to several nests: initialisation, update, fix-up).
Within one nest loop names are unique. Primitives make new loops whose names contain a
dot, so they never clash with Tile index names: ``Split("i", 8)`` makes ``i.o`` and
``i.i``; ``Fuse("i", "j")`` makes ``i.j.f``. No primitive adds or removes nests, so
``nest`` numbers stay valid through a whole schedule.

A :class:`Schedule` is an ordered sequence of primitives, applied in order by
:func:`tilec.schedule.primitives.apply.apply_schedule`. Its builder methods append a primitive and
return the names of the loops it creates::

    s = tilec.Schedule()
    i_o, i_i = s.split("i", 8)
    s.parallel(i_o)
    s.vectorize("j")
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Union

from tilec.errors import ScheduleError

UNROLL_LIMIT = 64  # the largest constant extent `Unroll` accepts


class _Record:
    def to_json(self) -> dict[str, Any]:
        return primitive_to_json(self)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Split(_Record):
    """``for loop`` -> ``for loop.o: for loop.i`` with ``loop.i`` running over at most `factor` values."""

    loop: str
    factor: int
    nest: int = 0

    @property
    def outputs(self) -> tuple[str, str]:
        return f"{self.loop}.o", f"{self.loop}.i"


@dataclass(frozen=True)
class Reorder(_Record):
    """Permute a perfectly nested band of loops into the given order (outermost first)."""

    loops: tuple[str, ...]
    nest: int = 0


@dataclass(frozen=True)
class Fuse(_Record):
    """``for outer: for inner`` (directly nested) -> one loop ``outer.inner.f``."""

    outer: str
    inner: str
    nest: int = 0

    @property
    def output(self) -> str:
        return f"{self.outer}.{self.inner}.f"


@dataclass(frozen=True)
class Unroll(_Record):
    """Emit the body once per iteration (constant extent of at most UNROLL_LIMIT)."""

    loop: str
    nest: int = 0


@dataclass(frozen=True)
class Vectorize(_Record):
    """Ask the backend to vectorise the loop (constant extent)."""

    loop: str
    nest: int = 0


@dataclass(frozen=True)
class Parallel(_Record):
    """Run the iterations on all cores (iterations must write disjoint elements)."""

    loop: str
    nest: int = 0


@dataclass(frozen=True)
class CacheWrite(_Record):
    """Accumulate what the loops inside `loop` write in a local buffer, written back once after them."""

    loop: str
    nest: int = 0


@dataclass(frozen=True)
class CacheRead(_Record):
    """Copy the part of input `tensor` the loops inside `loop` read into a contiguous local buffer first.

    scope "shared" (GPU targets only): `loop` lies inside the thread loops; the part the whole
    block reads in one iteration of `loop` is loaded cooperatively by the block's threads into a
    buffer per block, between Barriers (see tilec.schedule.primitives.shared)."""

    tensor: str
    loop: str
    nest: int = 0
    scope: str = "local"


@dataclass(frozen=True)
class Bind(_Record):
    """Run the iterations of `loop` as the blocks or threads of a GPU axis (GPU targets only):
    `axis` is one of tilec.ir.loop.GPU_AXES ("blockIdx.x", ..., "threadIdx.z")."""

    loop: str
    axis: str
    nest: int = 0


@dataclass(frozen=True)
class ComputeAt(_Record):
    """Compute the elementwise statement of nest `nest` inside loop `loop` of its consumer (nest
    `consumer`), for the cells one iteration of that loop reads, and drop the statement."""

    nest: int = 0
    loop: str = ""
    consumer: int = 1


@dataclass(frozen=True)
class ComputeInline(_Record):
    """Substitute the elementwise statement of nest `nest` into its single consumer and drop it.

    The dropped nest becomes an empty statement, so nest numbers stay valid."""

    nest: int = 0


@dataclass(frozen=True)
class Partition(_Record):
    """Split `loop` into prologue, guard-free interior and epilogue where the max/min bounds
    and conditions inside it are decided. The interior keeps the loop names; the prologue's and
    epilogue's copies of `loop` are ``loop.pro`` and ``loop.epi`` (a loop ``i`` inside them is
    ``i.loop.pro`` / ``i.loop.epi``)."""

    loop: str
    nest: int = 0

    @property
    def outputs(self) -> tuple[str, str, str]:
        return f"{self.loop}.pro", self.loop, f"{self.loop}.epi"


@dataclass(frozen=True)
class Tensorize(_Record):
    """Mark the register block ``[k:] ii: jj: acc[ii, jj] += a(ii) * b(jj)`` starting at `loop`
    as a CPU micro-kernel: ii unrolled, jj vectorized (broadcast-FMA outer products)."""

    loop: str
    nest: int = 0
    intrinsic: str = "outer_product"


Primitive = Union[Split, Reorder, Fuse, Unroll, Vectorize, Parallel, CacheWrite, CacheRead, ComputeAt, ComputeInline,
                  Partition, Tensorize, Bind]
PRIMITIVES: dict[str, type] = {cls.__name__.lower(): cls for cls in (
    Split, Reorder, Fuse, Unroll, Vectorize, Parallel, CacheWrite, CacheRead, ComputeAt, ComputeInline, Partition,
    Tensorize, Bind)}


def is_gpu_only(p: Primitive) -> bool:
    """Whether `p` only makes sense on a GPU target (Bind, a shared CacheRead)."""
    return isinstance(p, Bind) or (isinstance(p, CacheRead) and p.scope == "shared")


def primitive_to_json(p: Primitive) -> dict[str, Any]:
    d = asdict(p)
    if isinstance(p, Reorder):
        d["loops"] = list(p.loops)
    if isinstance(p, CacheRead) and p.scope == "local":
        del d["scope"]  # the default: keeps the keys of CPU schedules as they were
    return {"kind": type(p).__name__.lower(), **d}


def primitive_from_json(d: dict[str, Any]) -> Primitive:
    """The primitive a :func:`primitive_to_json` dict describes; ScheduleError if it describes none."""
    kind = d.get("kind")
    cls = PRIMITIVES.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ScheduleError(f"unknown schedule primitive kind {kind!r}; kinds are {', '.join(PRIMITIVES)}")
    names = {f.name for f in fields(cls)}
    args = {k: v for k, v in d.items() if k != "kind"}
    unknown = set(args) - names
    if unknown:
        raise ScheduleError(f"{kind}: unknown field(s) {', '.join(sorted(unknown))}; fields are {', '.join(sorted(names))}")
    if cls is Reorder and "loops" in args:
        args["loops"] = tuple(args["loops"])
    try:
        return cls(**args)  # type: ignore[no-any-return]
    except TypeError as err:
        raise ScheduleError(f"{kind}: {err}") from None


class Schedule:
    """An ordered sequence of primitives, with builder methods that append to it."""

    def __init__(self, primitives: Iterable[Primitive] = ()) -> None:
        self.primitives: tuple[Primitive, ...] = tuple(primitives)

    def __repr__(self) -> str:
        return f"Schedule({list(self.primitives)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schedule) and other.primitives == self.primitives

    def __hash__(self) -> int:
        return hash(self.primitives)

    def __len__(self) -> int:
        return len(self.primitives)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.primitives)

    # ------------------------------------------------------------ serialisation

    def to_json(self) -> list[dict[str, Any]]:
        return [primitive_to_json(p) for p in self.primitives]

    @classmethod
    def from_json(cls, data: "list[dict[str, Any]] | str") -> "Schedule":
        if isinstance(data, str):
            data = json.loads(data)
        if not isinstance(data, list):
            raise ScheduleError(f"a schedule is a JSON list of primitives, got {type(data).__name__}")
        return cls(primitive_from_json(d) for d in data)

    def key(self) -> str:
        """A stable string for the schedule. Even an empty Schedule is not the default: it keeps
        every statement's plain default nest, where the default picks templates."""
        return "schedule:" + json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    # ------------------------------------------------------------ builder

    def append(self, p: Primitive) -> "Schedule":
        self.primitives = self.primitives + (p,)
        return self

    def split(self, loop: str, factor: int, nest: int = 0) -> tuple[str, str]:
        p = Split(loop, int(factor), nest)
        self.append(p)
        return p.outputs

    def reorder(self, *loops: str, nest: int = 0) -> None:
        if len(loops) == 1 and isinstance(loops[0], (tuple, list)):
            loops = tuple(loops[0])
        self.append(Reorder(tuple(loops), nest))

    def fuse(self, outer: str, inner: str, nest: int = 0) -> str:
        p = Fuse(outer, inner, nest)
        self.append(p)
        return p.output

    def unroll(self, loop: str, nest: int = 0) -> None:
        self.append(Unroll(loop, nest))

    def vectorize(self, loop: str, nest: int = 0) -> None:
        self.append(Vectorize(loop, nest))

    def parallel(self, loop: str, nest: int = 0) -> None:
        self.append(Parallel(loop, nest))

    def cache_write(self, loop: str, nest: int = 0) -> None:
        self.append(CacheWrite(loop, nest))

    def cache_read(self, tensor: str, loop: str, nest: int = 0, scope: str = "local") -> None:
        self.append(CacheRead(tensor, loop, nest, scope))

    def bind(self, loop: str, axis: str, nest: int = 0) -> None:
        """Bind `loop` to a GPU axis ("blockIdx.x", ..., "threadIdx.z"); GPU targets only."""
        self.append(Bind(loop, axis, nest))

    def compute_inline(self, nest: int) -> None:
        self.append(ComputeInline(nest))

    def compute_at(self, nest: int, loop: str, consumer: int) -> None:
        self.append(ComputeAt(nest, loop, consumer))

    def partition(self, loop: str, nest: int = 0) -> tuple[str, str, str]:
        """Returns the names of the prologue, interior and epilogue loops."""
        p = Partition(loop, nest)
        self.append(p)
        return p.outputs

    def tensorize(self, loop: str, nest: int = 0, intrinsic: str = "outer_product") -> None:
        self.append(Tensorize(loop, nest, intrinsic))


__all__ = ["Bind", "is_gpu_only", "Split", "Reorder", "Fuse", "Unroll", "Vectorize", "Parallel", "CacheWrite", "CacheRead", "ComputeAt",
           "ComputeInline",
           "Partition", "Tensorize", "Primitive", "Schedule",
           "primitive_from_json", "primitive_to_json", "UNROLL_LIMIT"]
