"""TileDot (tilec.ir.loop) as AMX-BF16 code, and the process's permission to use the tiles.

Requires: a CPU target with AMX-BF16 (tilec.target.has_tiles); TileDot statements that passed
tilec.ir.verify. Guarantees: `emit_tile_region` configures the eight tiles (16 rows of 64 bytes
each) for its body and releases them after it, so no tile state outlives it and any thread may
run it; `emit_tile_dot` zeroes the accumulator block's 16 x 16 tiles or loads them from its
window (`fresh`), runs over the pairs in steps of 16 (a column of A tiles and a row of B tiles
loaded, every accumulator updated by one `tdpbf16ps`) and stores the accumulators back.
`TILE_CONFIG` is the configuration (the peak probe loads it too). Linux hands a process the AMX
state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`): `enable_tiles` asks
once before code that uses it is loaded; a kernel without that permission would die of SIGILL.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import llvmlite.ir as ir

from tilec.codegen.llvm.types import I64, PTR, value_name
from tilec.errors import TargetError
from tilec.ir import loop as L

I8 = ir.IntType(8)
_TILE_BYTES = 64  # a tile row
_CONFIG = "tilec.amx_config"


def _tile_config() -> bytes:
    """ldtilecfg's 64 bytes: palette 1, every one of the eight tiles 16 rows of 64 bytes."""
    data = bytearray(64)
    data[0] = 1  # palette 1
    for t in range(L.AMX_TILES):
        data[16 + 2 * t] = _TILE_BYTES  # bytes per row (16-bit little-endian)
        data[48 + t] = L.TILE_ROWS
    return bytes(data)


TILE_CONFIG = _tile_config()


def _intrinsic(module: ir.Module, name: str, args: list[ir.Type]) -> ir.Function:
    full = f"llvm.x86.{name}"
    fn = module.globals.get(full)
    return fn if fn is not None else ir.Function(module, ir.FunctionType(ir.VoidType(), args), full)


def _config(module: ir.Module) -> ir.GlobalVariable:
    """TILE_CONFIG as a constant of `module`."""
    existing = module.globals.get(_CONFIG)
    if existing is not None:
        return existing
    ty = ir.ArrayType(I8, len(TILE_CONFIG))
    g = ir.GlobalVariable(module, ty, _CONFIG)
    g.global_constant = True
    g.linkage = "internal"
    g.initializer = ir.Constant(ty, bytearray(TILE_CONFIG))
    g.align = 64
    return g


def emit_tile_dot(em: Any, s: L.TileDot) -> None:  # em: the tilec.codegen.llvm.body.BodyEmitter
    b, module = em.b, em.module
    load = _intrinsic(module, "tileloadd64", [I8, PTR, I64])
    store = _intrinsic(module, "tilestored64", [I8, PTR, I64])
    dot = _intrinsic(module, "tdpbf16ps", [I8, I8, I8])
    acc_buf, a_buf, b_buf = em.buffers[s.acc], em.buffers[s.a], em.buffers[s.b]
    mt, nt = s.m // L.TILE_ROWS, s.n // L.TILE_ROWS
    c_tiles = [[ir.Constant(I8, i * nt + j) for j in range(nt)] for i in range(mt)]
    a_tiles = [ir.Constant(I8, mt * nt + i) for i in range(mt)]
    b_tiles = [ir.Constant(I8, mt * nt + mt + j) for j in range(nt)]

    def byte_at(ptr: ir.Value, offset: ir.Value | int) -> ir.Value:
        off = offset if isinstance(offset, ir.Value) else ir.Constant(I64, offset)
        return b.gep(ptr, [off], inbounds=True, source_etype=I8)

    acc_row = acc_buf.shape[-1] * 4  # bytes between the accumulator's rows
    a_row = a_buf.shape[-1] * 2  # between A's rows (a tile row)
    a_step_bytes = a_buf.shape[-2] * a_row  # between A's tile steps
    b_row = b_buf.shape[-2] * b_buf.shape[-1] * 2  # between B's pair rows
    acc_ptr = em.address(acc_buf, s.acc_origin)
    a_ptr, b_ptr = em.address(a_buf, s.a_origin), em.address(b_buf, s.b_origin)

    def acc_tile(i: int, j: int) -> ir.Value:
        return byte_at(acc_ptr, i * L.TILE_ROWS * acc_row + j * L.TILE_ROWS * 4)

    zero = _intrinsic(module, "tilezero", [I8])
    with b.if_else(em.expr(s.fresh)) as (fresh, carried):
        with fresh:
            for row in c_tiles:
                for tile in row:
                    b.call(zero, [tile])
        with carried:
            for i in range(mt):
                for j in range(nt):
                    b.call(load, [c_tiles[i][j], acc_tile(i, j), ir.Constant(I64, acc_row)])
    # for step in [0, pairs / 16): the step's A and B tiles, then every accumulator's product
    steps = b.sdiv(em.expr(s.pairs), ir.Constant(I64, L.TILE_PAIRS))
    pre = b.block
    k = next(em.ids)
    header, body, done = (em.fn.append_basic_block(f"tile_dot{k}_{x}") for x in ("head", "body", "end"))
    b.branch(header)
    b.position_at_end(header)
    step = b.phi(I64, name=value_name(f"{s.acc}.tile_step"))
    step.add_incoming(ir.Constant(I64, 0), pre)
    b.cbranch(b.icmp_signed("<", step, steps), body, done)
    b.position_at_end(body)
    a_step = b.mul(step, ir.Constant(I64, a_step_bytes), flags=("nsw",))
    b_step = b.mul(step, ir.Constant(I64, L.TILE_PAIRS * b_row), flags=("nsw",))
    for i in range(mt):
        a_at = b.add(a_step, ir.Constant(I64, i * L.TILE_ROWS * a_row), flags=("nsw",))
        b.call(load, [a_tiles[i], byte_at(a_ptr, a_at), ir.Constant(I64, a_row)])
    for j in range(nt):
        b_at = b.add(b_step, ir.Constant(I64, j * L.TILE_ROWS * 4), flags=("nsw",))
        b.call(load, [b_tiles[j], byte_at(b_ptr, b_at), ir.Constant(I64, b_row)])
    for i in range(mt):
        for j in range(nt):
            b.call(dot, [c_tiles[i][j], a_tiles[i], b_tiles[j]])
    step.add_incoming(b.add(step, ir.Constant(I64, 1), flags=("nsw",)), b.block)
    b.branch(header)
    b.position_at_end(done)
    for i in range(mt):
        for j in range(nt):
            b.call(store, [c_tiles[i][j], acc_tile(i, j), ir.Constant(I64, acc_row)])


def emit_tile_region(em: Any, s: L.TileRegion) -> None:  # em: as for emit_tile_dot
    """The tiles configured (ldtilecfg: every tile 16 rows of 64 bytes), the body, the tiles released."""
    em.b.call(_intrinsic(em.module, "ldtilecfg", [PTR]), [_config(em.module)])
    em.stmt(s.body)
    em.b.call(_intrinsic(em.module, "tilerelease", []), [])


_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
_SYS_ARCH_PRCTL = 158  # x86-64


@functools.cache
def enable_tiles() -> None:
    """Ask Linux for the AMX tile state for this process (once; a no-op where it is granted)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) != 0:
        err = ctypes.get_errno()
        raise TargetError(f"Linux refused this process the AMX tile state (arch_prctl errno {err}); kernels for a "
                          f"CPU with AMX-BF16 need it. Compile without the tiles (-mattr=-amx-bf16) or run on a "
                          f"kernel of Linux 5.16 or later")


__all__ = ["TILE_CONFIG", "emit_tile_dot", "emit_tile_region", "enable_tiles"]
