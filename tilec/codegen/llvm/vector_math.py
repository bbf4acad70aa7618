"""Math functions on float32 vectors without libm (LLVM would call expf, erff or tanhf once per lane).

Requires: llvmlite.ir values of type <N x float>. Guarantees: `exp_f32`, `erf_f32`, `tanh_f32` and
`sigmoid_f32` return a vector of the same type, to about 1, 2, 2 and 2 ulp (their docstrings say
how); FLOAT32 maps the loop IR's call names onto them.
"""

from __future__ import annotations

import llvmlite.ir as ir

from tilec.codegen.llvm.types import declare_intrinsic

# erf(x) / x as a polynomial in x^2 on [0, 1], and erfc(a) e^(a^2) / t as one in t = 1 / (1 + a/2) on [1, 4]
_ERF_SMALL = (1.1283791659888347, -0.3761262771950353, 0.1128360747074919, -0.026854774262668385,
              0.005190202704224378, -0.0008027023985713588, 7.91047898367897e-05)
_ERF_TAIL = (0.28262213428321226, 0.2741356192705947, 0.29763179332491946, -2.325149435374041e-05,
             0.4360836851755207, -0.3852051177469496, 0.09464298712239096)


_MAGIC = 12582912.0  # 1.5 x 2^23: adding it rounds a float below 2^22 to an integer, read in the low bits
_LOWEST = -87.33654022216797  # e^x below it is under FLT_MIN: 0 (no subnormal results, which stall some cores)
_HIGHEST = 89.0  # e^x overflows to inf past 88.72; up to here 2^n stays within two normal factors


def exp_f32(b: ir.IRBuilder, module: ir.Module, x: ir.Value, ceiling: float | None = None) -> ir.Value:
    """e^x on a float32 vector without libm (LLVM would call expf once per lane): the
    Cephes recipe, x = n ln2 + r with |r| <= ln2 / 2, a degree-6 polynomial for e^r (its steps
    fused multiply-adds where the target has FMA: softmax's exponentials took as many
    instructions as attention's two products' loads), and 2^n built in the exponent bits. About
    1 ulp; inputs below -87.3 give 0, above 88.7 inf, NaN NaN. With a `ceiling`, e^min(x, ceiling)
    (softmax's e^(s - max) has ceiling 0): 2^n is then one factor where the ceiling allows.

    Every step keeps a NaN lane NaN, so no select puts it back: the clamps are selects whose
    comparison fails for NaN (an x86 min or max with x second), and n's integer comes from the
    bits of n + 1.5 x 2^23 (defined for any input, where a float-to-integer conversion of NaN is
    poison in LLVM)."""
    lanes = x.type.count
    vt = x.type
    i32v = ir.VectorType(ir.IntType(32), lanes)

    def c(value: float) -> ir.Constant:
        return ir.Constant(vt, [value] * lanes)

    def ints(value: int) -> ir.Constant:
        return ir.Constant(i32v, [value] * lanes)

    highest = _HIGHEST if ceiling is None else min(ceiling, _HIGHEST)
    under = b.fcmp_ordered("<", x, c(_LOWEST))
    clamped = b.select(under, c(_LOWEST), x)
    clamped = b.select(b.fcmp_ordered(">", clamped, c(highest)), c(highest), clamped)
    fmuladd = declare_intrinsic(module, "llvm.fmuladd", vt, 3)  # one FMA where the target has them

    def mul_add(u: ir.Value, v: ir.Value, w: ir.Value) -> ir.Value:
        return b.call(fmuladd, [u, v, w])

    rounded = mul_add(clamped, c(1.4426950408889634), c(_MAGIC))  # n + 1.5 x 2^23, n = nearest x / ln2
    n = b.fsub(rounded, c(_MAGIC))
    r = mul_add(n, c(2.12194440e-4), mul_add(n, c(-0.693359375), clamped))  # x - n ln2, ln2 in two parts
    p = c(1.9875691500e-4)
    for coeff in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = mul_add(p, r, c(coeff))
    y = b.fadd(mul_add(b.fmul(p, r), r, r), c(1.0))
    magic_bits = 0x4B400000  # _MAGIC's bits: n's integer is the difference

    def power_of_two(biased_k: ir.Value) -> ir.Value:  # 2^k for -126 <= k <= 127, from k + 127
        return b.bitcast(b.shl(biased_k, ints(23)), vt)

    if highest * 1.4426950408889634 <= 127.0:  # n <= 127: 2^n is one normal factor
        result = b.fmul(y, power_of_two(b.add(b.bitcast(rounded, i32v), ints(127 - magic_bits))))
    else:  # n up to 128: 2^n as two factors keeps both representable
        k = b.sub(b.bitcast(rounded, i32v), ints(magic_bits))
        half = b.ashr(k, ints(1))
        result = b.fmul(b.fmul(y, power_of_two(b.add(half, ints(127)))), power_of_two(b.add(b.sub(k, half), ints(127))))
    return b.select(under, c(0.0), result)


def erf_f32(b: ir.IRBuilder, module: ir.Module, x: ir.Value) -> ir.Value:
    """erf on a float32 vector without libm (erff is a call per lane, and GELU's forward and
    gradient are mostly erf): below |x| = 1 an odd polynomial x P(x^2), above it
    sign(x) (1 - e^(-x^2) t Q(t)) with t = 1 / (1 + |x| / 2); both least-squares fits to
    math.erf in float64 (relative error 2e-9 and absolute 2e-9 before float32 rounding), so
    about 1 ulp below 1 and 2 ulp above (e^(-x^2) inherits x^2's rounding)."""
    lanes = x.type.count
    vt = x.type

    def c(value: float) -> ir.Constant:
        return ir.Constant(vt, [value] * lanes)

    fmuladd = declare_intrinsic(module, "llvm.fmuladd", vt, 3)  # one FMA per step where the target has them

    def horner(coeffs: tuple[float, ...], v: ir.Value) -> ir.Value:
        acc = c(coeffs[-1])
        for coeff in reversed(coeffs[:-1]):
            acc = b.call(fmuladd, [acc, v, c(coeff)])
        return acc

    x2 = b.fmul(x, x)
    small = b.fmul(x, horner(_ERF_SMALL, x2))
    magnitude = b.call(declare_intrinsic(module, "llvm.fabs", vt, 1), [x])
    t = b.fdiv(c(1.0), b.fadd(c(1.0), b.fmul(magnitude, c(0.5))))
    tail = b.fmul(b.fmul(horner(_ERF_TAIL, t), t), exp_f32(b, module, b.fneg(x2), ceiling=0.0))  # (-x^2 <= 0)
    large = b.call(declare_intrinsic(module, "llvm.copysign", vt, 2), [b.fsub(c(1.0), tail), x])
    return b.select(b.fcmp_ordered("<", magnitude, c(1.0)), small, large)


# (tanh(x) - x) / x^3 as a polynomial in x^2 on [0, 0.625]: a least-squares fit to tanh in float64,
# relative error 2e-9
_TANH_SMALL = (-0.3333333322200636, 0.13333310872602683, -0.053960935811730885, 0.02178215449125717,
               -0.008386106554840664, 0.0023393166256832345)


def tanh_f32(b: ir.IRBuilder, module: ir.Module, x: ir.Value) -> ir.Value:
    """tanh on a float32 vector without libm (tanhf is a call per lane, and GPT-2's GELU is mostly
    tanh): below |x| = 0.625 the odd polynomial x (1 + x^2 P(x^2)), above it
    sign(x) (1 - 2 / (e^(2|x|) + 1)), which has no cancellation there (the quotient is below 0.45);
    about 1 ulp below 0.625, 2 above (e^(2|x|)'s ulp); +-1 beyond |x| = 44 (e^(2|x|) is inf); NaN stays NaN."""
    lanes = x.type.count
    vt = x.type

    def c(value: float) -> ir.Constant:
        return ir.Constant(vt, [value] * lanes)

    x2 = b.fmul(x, x)
    fmuladd = declare_intrinsic(module, "llvm.fmuladd", vt, 3)
    p = c(_TANH_SMALL[-1])
    for coeff in reversed(_TANH_SMALL[:-1]):
        p = b.call(fmuladd, [p, x2, c(coeff)])
    small = b.fmul(x, b.fadd(c(1.0), b.fmul(x2, p)))  # x (1 + x^2 P): -0.0 stays -0.0
    magnitude = b.call(declare_intrinsic(module, "llvm.fabs", vt, 1), [x])
    e = exp_f32(b, module, b.fmul(magnitude, c(2.0)))
    large = b.call(declare_intrinsic(module, "llvm.copysign", vt, 2),
                   [b.fsub(c(1.0), b.fdiv(c(2.0), b.fadd(e, c(1.0)))), x])
    return b.select(b.fcmp_unordered("<", magnitude, c(0.625)), small, large)


def sigmoid_f32(b: ir.IRBuilder, module: ir.Module, x: ir.Value) -> ir.Value:
    """1 / (1 + e^-x) on a float32 vector with `exp_f32` (a vector llvm.exp is a call to expf per
    lane: SiLU, LLaMA's activation, ran 3-4x slower than torch's on Zen 3). About 2 ulp; 0 below
    x = -88.7 (e^-x is inf there; the true values are subnormal), 1 above 17, NaN NaN."""
    one = ir.Constant(x.type, [1.0] * x.type.count)
    return b.fdiv(one, b.fadd(one, exp_f32(b, module, b.fneg(x))))


FLOAT32 = {"exp": exp_f32, "erf": erf_f32, "tanh": tanh_f32, "sigmoid": sigmoid_f32}  # the loop IR's call names

__all__ = ["FLOAT32", "erf_f32", "exp_f32", "sigmoid_f32", "tanh_f32"]
