"""bfloat16 in the CPU backend: float32 in registers, the upper 16 bits of a float32 in memory.

A bfloat16 value is a float32 whose lower 16 mantissa bits are zero, so widening is exact (a shift)
and every operation runs on float32 (tilec.ir.dtypes: expressions on the 16-bit floats are computed
in float32 and rounded where they are stored). Rounding is done here with integer operations,
round to nearest even, NaN kept quiet: LLVM would lower ``fptrunc float to bfloat`` to a call of
``__truncsfbf2`` on CPUs without AVX512-BF16, which the JIT does not link, and the integer form
vectorises on every x86-64 CPU.

Requires: llvmlite.ir; values are scalars or vectors of float (i16 for `widen`). Guarantees:
`widen(bits)` is the float of bfloat16 bits; `narrow(x)` the bits of `x` rounded to bfloat16;
`round_float(x)` `x` rounded to bfloat16, as a float; `constant(value)` a Python float rounded so;
`dot2_lanes(acc, a_pair, b_pairs)` AVX512-BF16's pair dot product on 16 float32 lanes, `dot2_float`
the same sum without it.
"""

from __future__ import annotations

import llvmlite.ir as ir
import numpy as np

from tilec.codegen.llvm.types import like

_I32, _I16 = ir.IntType(32), ir.IntType(16)


def _c(v: ir.Value, t: ir.Type, value: int) -> ir.Constant:
    ty = like(v, t)
    return ir.Constant(ty, [value] * ty.count) if isinstance(ty, ir.VectorType) else ir.Constant(ty, value)


def widen(b: ir.IRBuilder, bits: ir.Value) -> ir.Value:
    """bfloat16 bits (i16) as the float32 they stand for."""
    wide = b.zext(bits, like(bits, _I32))
    return b.bitcast(b.shl(wide, _c(bits, _I32, 16)), like(bits, ir.FloatType()))


def _rounded_word(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The float32 bits of `x` with bfloat16's rounding applied in the upper half (lower half garbage
    for numbers; a quiet NaN's upper half for NaN)."""
    word = b.bitcast(x, like(x, _I32))
    odd = b.and_(b.lshr(word, _c(x, _I32, 16)), _c(x, _I32, 1))
    rounded = b.add(word, b.add(odd, _c(x, _I32, 0x7FFF)))
    quiet = b.or_(word, _c(x, _I32, 0x00400000))
    return b.select(b.fcmp_unordered("uno", x, x), quiet, rounded)


def narrow(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """The bfloat16 bits (i16) nearest to float32 `x` (ties to even)."""
    return b.trunc(b.lshr(_rounded_word(b, x), _c(x, _I32, 16)), like(x, _I16))


def round_float(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """float32 `x` rounded to the nearest bfloat16, kept as a float32."""
    word = b.and_(_rounded_word(b, x), _c(x, _I32, -0x10000))
    return b.bitcast(word, x.type)


class _BFloat(ir.types.Type):
    """LLVM's bfloat type, which llvmlite.ir lacks (only the pair dot product's operands use it)."""

    def _to_string(self) -> str:
        return "bfloat"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _BFloat)

    def __hash__(self) -> int:
        return hash("bfloat")


DOT2_LANES = 16  # float32 accumulators of one vdpbf16ps on 512-bit registers
_PAIRS = ir.VectorType(_BFloat(), 2 * DOT2_LANES)
_ACC = ir.VectorType(ir.FloatType(), DOT2_LANES)
_DOT2 = "llvm.x86.avx512bf16.dpbf16ps.512"


def dot2_float(b: ir.IRBuilder, acc: ir.Value, a0: ir.Value, a1: ir.Value, b0: ir.Value, b1: ir.Value) -> ir.Value:
    """acc + a0 * b0 + a1 * b1 in float32 (scalars or vectors; bfloat16 values are float32 in
    registers): DOT2_BF16 where vdpbf16ps cannot serve."""
    return b.fadd(b.fadd(acc, b.fmul(a0, b0)), b.fmul(a1, b1))


def dot2_lanes(b: ir.IRBuilder, module: ir.Module, acc: ir.Value, a_pair: ir.Value, b_pairs: ir.Value) -> ir.Value:
    """acc[l] + a[0] * b[2l] + a[1] * b[2l + 1] for the 16 lanes l: `a_pair` the i32 word holding
    the a pair's bits, `b_pairs` the <32 x i16> bits of the lanes' b pairs (vdpbf16ps)."""
    fn = module.globals.get(_DOT2)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(_ACC, [_ACC, _PAIRS, _PAIRS]), _DOT2)
    words = ir.VectorType(_I32, DOT2_LANES)
    splat = b.insert_element(ir.Constant(words, None), a_pair, ir.Constant(_I32, 0))
    splat = b.shuffle_vector(splat, ir.Constant(words, None), ir.Constant(words, [0] * DOT2_LANES))
    return b.call(fn, [acc, b.bitcast(splat, _PAIRS), b.bitcast(b_pairs, _PAIRS)])


def constant(value: float) -> float:
    """A bfloat16 constant's value in registers: the float32 nearest `value` (bfloat16 operations run
    in float32 and take a literal at that precision; an explicit conversion has rounded it already)."""
    with np.errstate(all="ignore"):
        return float(np.float32(value))


__all__ = ["DOT2_LANES", "constant", "dot2_float", "dot2_lanes", "narrow", "round_float", "widen"]
