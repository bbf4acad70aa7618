"""Loop IR: a small imperative IR that schedules transform and backends compile.

Expressions carry their dtype (a numpy dtype name, or "bool"). Index arithmetic is
int64. Buffers are row-major; `Load`/`Store` take one index per dimension. Nodes
are frozen dataclasses with tuple children; `str(node)` prints readable pseudo-code
(:mod:`tilec.ir.printer`).
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Callable, Union

INDEX = "int64"

# GPU kernels (targets cuda and cuda-sim) use the same IR with these conventions:
# * A `For` whose kind is a GPU axis runs its iterations as the blocks or threads of that axis
#   (begin 0, a constant end: the launch extent along the axis).
# * The PrimFunc's body is a sequence of launches: each top-level statement is one kernel, a
#   nest of block-bound loops around thread-bound loops, and launches run one after another
#   (a global synchronisation between them).
# * `Allocate` with scope "shared" inside the block loops is one buffer per block; scope "local"
#   inside the thread loops is private to each thread. `Barrier` synchronises the threads of a
#   block and must be reached by all of them (never under a thread-dependent condition).
GPU_BLOCK_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
GPU_THREAD_AXES = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
GPU_AXES = GPU_BLOCK_AXES + GPU_THREAD_AXES


@dataclass(frozen=True)
class Buffer:
    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: str = "global"  # global (a kernel argument) | local (stack/registers) | shared (GPU)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Const:
    value: Union[int, float, bool]
    dtype: str


@dataclass(frozen=True)
class Var:
    name: str
    dtype: str = INDEX


@dataclass(frozen=True)
class Bin:
    """Arithmetic on operands of one dtype.

    ops: add sub mul div (true division; floor division on integers, x // 0 == 0),
    mod (floor modulo), min, max (NaN-propagating on floats), and, or, xor (logical on
    bools, bitwise on integers), shl, shr (numpy's shifts: arithmetic right shift on signed
    types, a count outside [0, width) shifts every bit out). Unsigned dtypes divide, compare
    and take min/max as unsigned; integer division by 0 gives 0.
    """

    op: str
    a: "Expr"
    b: "Expr"

    @property
    def dtype(self) -> str:
        return self.a.dtype


@dataclass(frozen=True)
class Cmp:
    op: str  # lt le gt ge eq ne
    a: "Expr"
    b: "Expr"
    dtype: str = "bool"


@dataclass(frozen=True)
class Not:
    a: "Expr"
    dtype: str = "bool"


@dataclass(frozen=True)
class Select:
    cond: "Expr"
    a: "Expr"
    b: "Expr"

    @property
    def dtype(self) -> str:
        return self.a.dtype


@dataclass(frozen=True)
class Cast:
    dtype: str
    a: "Expr"


# Call(DOT2_BF16, (acc, a0, a1, b0, b1), "float32"): acc + a0 * b0 + a1 * b1 on bfloat16 operands,
# accumulated in float32 (products exact; the order of the two additions, and whether subnormals
# flush to zero, unspecified): one lane of AVX512-BF16's vdpbf16ps, which the LLVM vector emitter
# uses where the b pairs are contiguous across lanes and the a pair is the same for all of them.
DOT2_BF16 = "dot2_bf16"
TRANSPOSE_MAX_SIDE = 64  # the longest side of an `unrolled` x `vectorized` tile the backends transpose in registers


@dataclass(frozen=True)
class Call:
    """A math builtin (see tilec.ir.builtins) on float operands of `dtype`, abs/relu on ints, or DOT2_BF16."""

    func: str
    args: tuple["Expr", ...]
    dtype: str


@dataclass(frozen=True)
class Load:
    buffer: str
    indices: tuple["Expr", ...]
    dtype: str


Expr = Union[Const, Var, Bin, Cmp, Not, Select, Cast, Call, Load]

# ---------------------------------------------------------------- statements


@dataclass(frozen=True)
class Store:
    buffer: str
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True)
class For:
    """``for var in [begin, end)``; kind: serial | parallel | vectorized | unrolled | a GPU axis."""

    var: str
    begin: Expr
    end: Expr
    body: "Stmt"
    kind: str = "serial"


@dataclass(frozen=True)
class If:
    cond: Expr
    then: "Stmt"
    orelse: "Stmt | None" = None


@dataclass(frozen=True)
class Seq:
    stmts: tuple["Stmt", ...]


@dataclass(frozen=True)
class Allocate:
    """A buffer that lives for `body` (scope local: stack / registers)."""

    buffer: Buffer
    body: "Stmt"


@dataclass(frozen=True)
class Barrier:
    """All threads of a GPU block wait here (no-op on the CPU)."""


Stmt = Union[Store, For, If, Seq, Allocate, Barrier,
             "WmmaFill", "WmmaLoad", "WmmaMma", "WmmaStore",  # tensor cores: see the end of this file
             "TileRegion", "TileDot"]  # AMX tiles (CPU): the end of this file


@dataclass(frozen=True)
class PrimFunc:
    """A kernel: `params` are global buffers (inputs, outputs, workspaces, in that order)."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt

    def __str__(self) -> str:
        return FORMATTER[0](self) if FORMATTER else repr(self)


# The readable pseudo-code of str(PrimFunc): tilec.ir.printer puts its formatter here when it is
# imported, which importing the package tilec.ir always does (the printer builds on this module,
# so this module cannot import it).
FORMATTER: "list[Callable[[PrimFunc], str]]" = []


# ---------------------------------------------------------------- constructors


def const(value: Union[int, float, bool], dtype: str = INDEX) -> Const:
    return Const(value, dtype)


def seq(*stmts: "Stmt | None") -> Stmt:
    """A sequence, flattening nested sequences and dropping Nones."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        else:
            flat.append(s)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def cast(dtype: str, e: Expr) -> Expr:
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        if dtype == "bool":
            return Const(bool(e.value), dtype)
        return Const(float(e.value) if "float" in dtype else int(e.value), dtype)
    return Cast(dtype, e)


def add(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 0:
        return a
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value + b.value, a.dtype)
    return Bin("add", a, b)


def sub(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Const) and b.value == 0:
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value - b.value, a.dtype)
    if isinstance(a, Const) and a.value == 0 and isinstance(b, Bin) and b.op == "sub" \
            and isinstance(b.a, Const) and b.a.value == 0:
        return b.b  # 0 - (0 - x) == x
    return Bin("sub", a, b)


def neg(a: Expr) -> Expr:
    return sub(Const(0, a.dtype), a)


def mul(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(a.value * b.value, a.dtype)
    if isinstance(b, Const) and b.value == 1:
        return a
    if isinstance(a, Const) and a.value == 1:
        return b
    return Bin("mul", a, b)


def logical_and(conds: list[Expr]) -> Expr | None:
    out: Expr | None = None
    for c in conds:
        out = c if out is None else Bin("and", out, c)
    return out


# ---------------------------------------------------------------- tensor cores (WMMA)
#
# Warp-level matrix multiply-accumulate on 16x16x16 tiles: float16 operands, float32
# accumulation (CUDA's nvcuda::wmma, sm_70 and later). Conventions:
# * A fragment is a buffer Allocated inside the thread loops with one of the FRAGMENT_SCOPES;
#   its shape is (*lead, 16, 16): an array of 16x16 fragments, addressed by `index` (one
#   expression per lead dimension). Scope wmma.matrix_a / wmma.matrix_b hold float16,
#   wmma.accumulator float32. Fragments are read and written only by the statements below.
# * The statements are warp-collective: the 32 lanes of a warp run each of them together and
#   own the warp's fragments jointly. They must be reached by every thread of the block (like
#   Barrier: never under a thread-dependent condition), blocks must hold whole warps, and all
#   their operands (indices, window origins, the fill value) must be the same on every lane
#   of a warp (they may depend on the warp, e.g. on ``threadIdx.x // 32``).
# * A window is a 16x16 block of a row-major buffer: ``buf[*origin[:-2], origin[-2] + i,
#   origin[-1] + j]`` for i, j in [0, 16). Its first element must be 32-byte aligned and the
#   buffer's last dimension a multiple of 16 bytes (CUDA's load/store_matrix_sync rules).
# * Memory written by WmmaStore is visible to other threads after a Barrier, as for Store.
# Their CPU meaning (for the GPU emulator) is tilec.passes.lower_wmma.lower_wmma.
WMMA_SHAPE = (16, 16, 16)
FRAGMENT_SCOPES = ("wmma.matrix_a", "wmma.matrix_b", "wmma.accumulator")


@dataclass(frozen=True)
class WmmaFill:
    """``frag[*index, i, j] = value`` for i, j in [0, 16): value is float32, frag an accumulator."""

    frag: str
    index: tuple[Expr, ...]
    value: Expr

    def buffer_refs(self) -> tuple[tuple[str, bool], ...]:
        return ()


@dataclass(frozen=True)
class WmmaLoad:
    """``frag[*index, i, j] = buffer[window origin + (i, j)]``: a 16x16 window into a fragment."""

    frag: str
    index: tuple[Expr, ...]
    buffer: str
    origin: tuple[Expr, ...]

    def buffer_refs(self) -> tuple[tuple[str, bool], ...]:
        return ((self.buffer, False),)


@dataclass(frozen=True)
class WmmaMma:
    """``acc[*acc_index, i, j] += sum_k float32(a[*a_index, i, k]) * float32(b[*b_index, k, j])``.

    Products of float16 values are exact in float32; the order of the 16 additions is unspecified.
    """

    acc: str
    acc_index: tuple[Expr, ...]
    a: str
    a_index: tuple[Expr, ...]
    b: str
    b_index: tuple[Expr, ...]

    def buffer_refs(self) -> tuple[tuple[str, bool], ...]:
        return ()


@dataclass(frozen=True)
class WmmaStore:
    """``buffer[window origin + (i, j)] = frag[*index, i, j]``: an accumulator into a float32 window."""

    buffer: str
    origin: tuple[Expr, ...]
    frag: str
    index: tuple[Expr, ...]

    def buffer_refs(self) -> tuple[tuple[str, bool], ...]:
        return ((self.buffer, True),)


WMMA_STMTS = (WmmaFill, WmmaLoad, WmmaMma, WmmaStore)


# ---------------------------------------------------------------- AMX tiles (CPU)
# TileDot is a block of a bfloat16 GEMM on Intel AMX's tiles (AMX-BF16: eight tiles of 16 rows x 64
# bytes; `tdpbf16ps` adds a 16 x 32 by 32 x 16 bfloat16 product into a 16 x 16 float32 tile), on windows
# of row-major buffers laid out as the instruction reads them:
# * acc, float32: cell (i, j) at ``acc[*acc_origin[:-2], acc_origin[-2] + i, acc_origin[-1] + j]``;
# * a, bfloat16 in tile steps: A(i, 32 s + q) at ``a[*a_origin[:-3], a_origin[-3] + s, a_origin[-2] + i, q]``
#   (q < 32, a's last dimension: a step's rows are one run), its last two origin indices 0;
# * b, bfloat16 pairs: ``b[*b_origin[:-3], b_origin[-3] + r, b_origin[-2] + j, e]`` holds reduction row
#   2 r + e of column j (the VNNI layout), b's last dimension 2, its last origin index 0.
# m and n are multiples of TILE_ROWS, `pairs` one of TILE_PAIRS at run time, and (m / 16) (n / 16) +
# m / 16 + n / 16 <= AMX_TILES. Where `fresh` holds, the block starts from 0. A TileDot runs inside a
# TileRegion, which configures the tiles for its body (on the thread running it) and releases them
# after. The LLVM backend emits tile loads and `tdpbf16ps` where the CPU has AMX-BF16, else the loops
# of tilec.codegen.llvm.tile_loops.
TILE_ROWS = 16  # rows of a tile (of A and of the accumulator; B's rows are pairs of reduction rows)
TILE_PAIRS = 16  # bfloat16 pairs in a tile's 64-byte row
AMX_TILES = 8  # tile registers


@dataclass(frozen=True)
class TileRegion:
    body: "Stmt"  # run with the tiles configured for its TileDots (on a CPU without AMX: as is)


@dataclass(frozen=True)
class TileDot:
    """``acc[i, j] = (0 if fresh else acc[i, j]) + sum over r < pairs, e < 2 of A(i, 2 r + e) * b[r, j, e]``
    for i < m, j < n (the windows above), products exact in float32, the order of the additions unspecified."""

    acc: str
    acc_origin: tuple[Expr, ...]
    a: str
    a_origin: tuple[Expr, ...]
    b: str
    b_origin: tuple[Expr, ...]
    pairs: Expr
    fresh: Expr
    m: int
    n: int

    def tiles(self) -> int:  # the registers it holds: accumulators, a column of A tiles, a row of B's
        return (self.m // TILE_ROWS + 1) * (self.n // TILE_ROWS + 1) - 1
