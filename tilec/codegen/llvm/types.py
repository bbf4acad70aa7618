"""LLVM types of loop-IR dtypes, and the intrinsic declarations every LLVM emitter shares.

Requires: llvmlite.ir. Guarantees: `value_type` is the type a dtype's values have in registers
(bool is i1) and `storage_type` the one they have in a buffer's memory (bool is one byte, as numpy stores
it; the 16-bit floats are float in registers, bfloat16 is i16 in buffers (tilec.codegen.llvm.bfloat
converts) and float16 half; a local 16-bit buffer, an accumulator, holds float); a dtype the backend
does not support is a
CodegenError. `declare_intrinsic` and
`declare_masked` declare an LLVM intrinsic once per module, named after the (scalar or vector)
type it works on.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import llvmlite.ir as ir

from tilec.errors import CodegenError

if TYPE_CHECKING:
    from tilec.ir import loop as L

I64 = ir.IntType(64)
PTR = ir.PointerType()
VALUE_TYPES: dict[str, ir.Type] = {
    "bool": ir.IntType(1), "int8": ir.IntType(8), "int16": ir.IntType(16), "int32": ir.IntType(32),
    "int64": ir.IntType(64), "uint8": ir.IntType(8), "uint16": ir.IntType(16), "uint32": ir.IntType(32),
    "uint64": ir.IntType(64), "float32": ir.FloatType(), "float64": ir.DoubleType(),
    # computed in float32 (tilec.ir.dtypes: the 16-bit floats are storage types)
    "float16": ir.FloatType(), "bfloat16": ir.FloatType(),
}
# numpy stores a bool in one byte; bfloat16 is the upper half of a float32's bits
MEMORY_TYPES: dict[str, ir.Type] = dict(VALUE_TYPES, bool=ir.IntType(8), bfloat16=ir.IntType(16), float16=ir.HalfType())
_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64, "int8": 8, "int16": 16, "int32": 32, "int64": 64,
         "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
_ALIGNMENT = {name: bits // 8 for name, bits in _BITS.items()}


def value_name(name: str) -> str:
    """A readable LLVM value or block name for an IR name: dots become underscores, and a long name
    (Tile identifiers have no length limit, LLVM's textual IR and llvmlite's name scopes do) keeps
    its first characters plus a hash of the whole, so distinct names stay distinct."""
    name = name.replace(".", "_")
    if len(name) <= 48:
        return name
    return f"{name[:24]}_{hashlib.sha1(name.encode()).hexdigest()[:16]}"


def value_type(dtype: str) -> ir.Type:
    try:
        return VALUE_TYPES[dtype]
    except KeyError:
        raise CodegenError(f"the LLVM backend does not support dtype {dtype}") from None


def packed_bfloat16(buf: "L.Buffer") -> bool:
    """Whether `buf` holds bfloat16 bits (loads widen them, stores round: tilec.codegen.llvm.bfloat)."""
    return buf.dtype == "bfloat16" and buf.scope != "local"


_HELD_AS_FLOAT = ("bfloat16", "float16")  # 16-bit floats: float in registers and in local buffers


def packed_16bit(buf: "L.Buffer") -> bool:
    """Whether `buf` holds 16-bit floats whose values registers hold as float (loads widen them,
    stores round them)."""
    return buf.dtype in _HELD_AS_FLOAT and buf.scope != "local"


def storage_type(buf: "L.Buffer") -> ir.Type:
    """The element type of `buf`'s memory: a local 16-bit float buffer (an accumulator, a register
    tile) keeps float32 values, every other buffer its dtype's memory type."""
    if buf.dtype in _HELD_AS_FLOAT and not packed_16bit(buf):
        return ir.FloatType()
    return MEMORY_TYPES[buf.dtype]


def bits(dtype: str) -> int:
    """The width of a numeric dtype's values."""
    return _BITS[dtype]


def alignment(dtype: str) -> int:
    """The alignment (bytes) of one element of a buffer of `dtype`."""
    return _ALIGNMENT.get(dtype, 1)


def like(v: ir.Value, scalar: ir.Type) -> ir.Type:
    """`scalar`, or a vector of it as long as `v` where `v` is a vector (conversions keep the lane count)."""
    return ir.VectorType(scalar, v.type.count) if isinstance(v.type, ir.VectorType) else scalar


def i32(value: int) -> ir.Constant:
    return ir.Constant(ir.IntType(32), value)


def type_suffix(t: ir.Type) -> str:
    """How LLVM's intrinsic names spell a type: ``f32``, ``i64``, ``v8f32``."""
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{type_suffix(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(t)]


def declare_intrinsic(module: ir.Module, name: str, t: ir.Type, nargs: int) -> ir.Function:
    """``name.<suffix of t>`` taking `nargs` values of type `t` (scalar or vector) and returning one."""
    full = f"{name}.{type_suffix(t)}"
    existing = module.globals.get(full)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(t, [t] * nargs), full)


def declare_masked(module: ir.Module, kind: str, vt: ir.VectorType) -> ir.Function:
    """llvm.masked.load / llvm.masked.store for vectors of type `vt`."""
    name = f"llvm.masked.{kind}.{type_suffix(vt)}.p0"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    mask_t = ir.VectorType(ir.IntType(1), vt.count)
    if kind == "load":
        fnty = ir.FunctionType(vt, [ir.PointerType(vt), ir.IntType(32), mask_t, vt])
    else:
        fnty = ir.FunctionType(ir.VoidType(), [vt, ir.PointerType(vt), ir.IntType(32), mask_t])
    return ir.Function(module, fnty, name)


__all__ = ["I64", "MEMORY_TYPES", "PTR", "VALUE_TYPES", "alignment", "bits", "declare_intrinsic", "declare_masked",
           "i32", "like", "packed_16bit", "packed_bfloat16", "storage_type", "type_suffix", "value_type"]
