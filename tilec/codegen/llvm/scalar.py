"""Loop-IR expressions as LLVM values: the state and the scalar half of the CPU backend's emitter.

Requires: a subclass (tilec.codegen.llvm.body.BodyEmitter) that sets up the function being
emitted, its builder and the maps below. Guarantees: `expr` emits one expression as a scalar
value, with loop IR's semantics: integer division is floor division with ``x // 0 == 0`` (never
a trap), float min/max propagate NaN, ``!=`` on floats is unordered (NaN != x), every other float
operation keeps IEEE semantics unless the caller passes fast-math `flags` (reductions).
`float_bin`, `int_bin`, `float_call`, `compare` and `convert` work on vectors too, which the
vector and transposing emitters (tilec.codegen.llvm.vector, .transpose) use.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import llvmlite.ir as ir

from tilec.codegen.llvm import bfloat
from tilec.codegen.llvm.types import (I64, bits, declare_intrinsic, like, packed_16bit, packed_bfloat16, storage_type,
                                      value_type)
from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.dtypes import LOW_PRECISION, is_float, is_unsigned

_BITWISE = {"and": "and_", "or": "or_", "xor": "xor"}
_FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_FLOAT_INTRINSICS = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "sin": "llvm.sin",
                     "cos": "llvm.cos", "floor": "llvm.floor", "ceil": "llvm.ceil", "abs": "llvm.fabs",
                     "tanh": "llvm.tanh", "pow": "llvm.pow", "round": "llvm.roundeven"}
_LIBM = ("erf", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")  # called per element


class ScalarEmitter:
    """The emitter's state, and expressions as scalar values (see the module doc)."""

    module: ir.Module
    func: L.PrimFunc
    cores: int  # threads that parallel loops run on
    pair_dot: bool  # the CPU has vdpbf16ps: DOT2_BF16 on vectors may use it (tilec.target.has_pair_dot)
    ids: itertools.count  # loop-metadata and outlined-function numbers, shared by nested emitters
    fn: ir.Function  # the function being emitted
    entry: ir.Block  # its first block, where allocas go
    b: ir.IRBuilder
    buffers: dict[str, L.Buffer]  # the parameters and the buffers allocated around the point of emission
    pointers: dict[str, ir.Value]
    vars: dict[str, ir.Value]  # loop variables in scope

    def restore_var(self, name: str, saved: ir.Value | None) -> None:
        if saved is None:
            self.vars.pop(name, None)  # a value out of its loop must not be used (or captured) any more
        else:
            self.vars[name] = saved

    def emit_if(self, s: L.If, emit: Callable[[L.Stmt], None]) -> None:
        """Branch on `s.cond` (a scalar), emitting each arm with `emit` (the scalar or vector emitter)."""
        cond = self.expr(s.cond)
        if s.orelse is None:
            with self.b.if_then(cond):
                emit(s.then)
        else:
            with self.b.if_else(cond) as (then, orelse):
                with then:
                    emit(s.then)
                with orelse:
                    emit(s.orelse)

    # ------------------------------------------------------------ memory

    def address(self, buf: L.Buffer, indices: tuple[L.Expr, ...]) -> ir.Value:
        if len(indices) != len(buf.shape):
            raise CodegenError(f"buffer {buf.name} has rank {len(buf.shape)}, indexed with {len(indices)} indices")
        offset: ir.Value | None = None
        stride = 1
        for idx, n in zip(reversed(indices), reversed(buf.shape)):
            term = self.expr(idx)
            if stride != 1:
                term = self.b.mul(term, ir.Constant(I64, stride), flags=("nsw",))
            offset = term if offset is None else self.b.add(offset, term, flags=("nsw",))
            stride *= n
        ptr = self.pointers[buf.name]
        if offset is None:
            return ptr
        return self.b.gep(ptr, [offset], inbounds=True, source_etype=storage_type(buf))

    # ------------------------------------------------------------ expressions

    def expr(self, e: L.Expr, flags: tuple[str, ...] = ()) -> ir.Value:
        method = getattr(self, f"_expr_{type(e).__name__}", None)
        if method is None:
            raise CodegenError(f"the LLVM backend cannot compile {type(e).__name__} expressions")
        return method(e, flags) if isinstance(e, L.Bin) else method(e)

    def _expr_Const(self, e: L.Const) -> ir.Value:
        if e.dtype == "bool":
            return ir.Constant(ir.IntType(1), int(bool(e.value)))
        if e.dtype in LOW_PRECISION:  # held in float32, as registers hold 16-bit floats (tilec.ir.elementwise._to)
            return ir.Constant(ir.FloatType(), bfloat.constant(e.value))
        return ir.Constant(value_type(e.dtype), e.value)

    def _expr_Var(self, e: L.Var) -> ir.Value:
        try:
            return self.vars[e.name]
        except KeyError:
            raise CodegenError(f"loop variable '{e.name}' used outside its loop") from None

    def _expr_Load(self, e: L.Load) -> ir.Value:
        buf = self.buffers[e.buffer]
        return self.from_memory(buf, self.b.load(self.address(buf, e.indices), typ=storage_type(buf)))

    def from_memory(self, buf: L.Buffer, v: ir.Value) -> ir.Value:
        """A value (or vector) loaded from `buf` as registers hold it: bool as i1, the 16-bit floats as float."""
        if buf.dtype == "bool":
            return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0) if not isinstance(v.type, ir.VectorType)
                                        else ir.Constant(v.type, [0] * v.type.count))
        if packed_bfloat16(buf):
            return bfloat.widen(self.b, v)
        if packed_16bit(buf):  # float16: half in memory (F16C's vcvtph2ps)
            return self.b.fpext(v, like(v, ir.FloatType()))
        return v

    def to_memory(self, buf: L.Buffer, v: ir.Value) -> ir.Value:
        """A value (or vector) in registers as `buf` stores it: bool as a byte, the 16-bit floats rounded."""
        if buf.dtype == "bool":
            return self.b.zext(v, like(v, ir.IntType(8)))
        if packed_bfloat16(buf):
            return bfloat.narrow(self.b, v)
        if packed_16bit(buf):
            return self.b.fptrunc(v, like(v, ir.HalfType()))
        return v

    def _expr_Cast(self, e: L.Cast) -> ir.Value:
        return self.convert(self.expr(e.a), e.a.dtype, e.dtype)

    def convert(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        """`v` (of `src`, a scalar or a vector) as `dst`, with numpy's astype meaning: float to
        integer truncates toward zero, to unsigned through int64 (so -1.0 becomes all ones)."""
        if src == dst:
            return v
        if src in LOW_PRECISION:  # registers hold its float32 value exactly
            return self.convert(v, "float32", dst)
        if dst in LOW_PRECISION:  # through a float32 holding the value, or rounded to odd: one rounding in all
            if src == "float64":
                exact = self._round_to_odd_f32(v)
            elif is_float(src) or src == "bool" or bits(src) <= 16:
                exact = self.convert(v, src, "float32")
            else:
                exact = self._round_to_odd_f32(self.convert(v, src, "float64"))
            if dst == "bfloat16":
                return bfloat.round_float(self.b, exact)
            return self.b.fpext(self.b.fptrunc(exact, like(v, ir.HalfType())), exact.type)
        t = like(v, value_type(dst))
        if dst == "bool":
            if is_float(src):
                return self.b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
            return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        if is_float(dst):
            if src == "bool" or is_unsigned(src):
                return self.b.uitofp(v, t)
            if is_float(src):
                return self.b.fpext(v, t) if bits(dst) > bits(src) else self.b.fptrunc(v, t)
            return self.b.sitofp(v, t)
        if is_float(src):
            if is_unsigned(dst):  # negative values wrap through int64, as numpy's astype does on x86
                wide = self.b.fptosi(v, like(v, I64))
                if bits(dst) < 64:
                    return self.b.trunc(wide, t)
                negative = self.b.fcmp_ordered("<", v, ir.Constant(v.type, 0.0))
                return self.b.select(negative, wide, self.b.fptoui(v, t))
            return self.b.fptosi(v, t)
        if src == "bool" or (is_unsigned(src) and bits(dst) > bits(src)):
            return self.b.zext(v, t)
        if bits(dst) == bits(src):
            return v  # int32 <-> uint32: the same bits
        return self.b.sext(v, t) if bits(dst) > bits(src) else self.b.trunc(v, t)

    def _round_to_odd_f32(self, v: ir.Value) -> ir.Value:
        """float64 -> float32 rounded to odd, so that rounding on to a 16-bit float is correctly rounded
        (no double rounding); LLVM would call __truncdfhf2, which the JIT does not link."""
        f32, i32t = like(v, ir.FloatType()), like(v, ir.IntType(32))
        nearest = self.b.fptrunc(v, f32)
        back = self.b.fpext(nearest, v.type)
        inexact = self.b.fcmp_ordered("!=", back, v)  # false for NaN
        raw = self.b.bitcast(nearest, i32t)
        even = self.b.icmp_unsigned("==", self.b.and_(raw, ir.Constant(i32t, 1)), ir.Constant(i32t, 0))
        fabs = declare_intrinsic(self.module, "llvm.fabs", v.type, 1)
        away = self.b.fcmp_ordered(">", self.b.call(fabs, [v]), self.b.call(fabs, [back]))
        neighbour = self.b.select(away, self.b.add(raw, ir.Constant(i32t, 1)), self.b.sub(raw, ir.Constant(i32t, 1)))
        odd = self.b.bitcast(neighbour, f32)
        return self.b.select(self.b.and_(inexact, even), odd, nearest)

    def _expr_Not(self, e: L.Not) -> ir.Value:
        return self.b.not_(self.expr(e.a))

    def _expr_Select(self, e: L.Select) -> ir.Value:
        return self.b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))

    def _expr_Cmp(self, e: L.Cmp) -> ir.Value:
        return self.compare(e.op, e.a.dtype, self.expr(e.a), self.expr(e.b))

    def compare(self, op: str, dtype: str, a: ir.Value, b: ir.Value) -> ir.Value:
        """`a op b` on operands of `dtype` (scalars or vectors)."""
        if is_float(dtype):
            if op == "ne":  # NaN != x is true, as in numpy
                return self.b.fcmp_unordered("!=", a, b)
            return self.b.fcmp_ordered(_FCMP[op], a, b)
        if dtype == "bool" or is_unsigned(dtype):
            return self.b.icmp_unsigned(_FCMP[op], a, b)
        return self.b.icmp_signed(_FCMP[op], a, b)

    def _expr_Bin(self, e: L.Bin, flags: tuple[str, ...] = ()) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.a.dtype
        if e.b.dtype != dt:
            raise CodegenError(f"operands of {e.op} disagree: {e.a.dtype} and {e.b.dtype}")
        if is_float(dt):
            return self.float_bin(e.op, a, b, flags)
        return self.int_bin(e.op, a, b, is_unsigned(dt))

    def float_bin(self, op: str, a: ir.Value, b: ir.Value, flags: tuple[str, ...]) -> ir.Value:
        if op == "add":
            return self.b.fadd(a, b, flags=flags)
        if op == "sub":
            return self.b.fsub(a, b)
        if op == "mul":
            return self.b.fmul(a, b, flags=flags)
        if op == "div":
            return self.b.fdiv(a, b)
        if op in ("max", "min"):  # NaN-propagating, like numpy.maximum / numpy.minimum
            better = self.b.fcmp_ordered(">" if op == "max" else "<", a, b)
            a_nan = self.b.fcmp_unordered("uno", a, a)
            return self.b.select(self.b.or_(better, a_nan), a, b)
        if op == "mod":
            r = self.b.frem(a, b)
            fix = self.b.and_(self.b.fcmp_ordered("!=", r, ir.Constant(r.type, 0.0)),
                              self.b.xor(self.b.fcmp_ordered("<", r, ir.Constant(r.type, 0.0)),
                                         self.b.fcmp_ordered("<", b, ir.Constant(b.type, 0.0))))
            return self.b.select(fix, self.b.fadd(r, b), r)
        raise CodegenError(f"unknown float operation {op}")

    def int_bin(self, op: str, a: ir.Value, b: ir.Value, unsigned: bool = False) -> ir.Value:
        """An integer (or, for and/or/xor, bool) operation on scalars or vectors."""
        if op in _BITWISE:
            return getattr(self.b, _BITWISE[op])(a, b)
        if op == "add":
            return self.b.add(a, b)
        if op == "sub":
            return self.b.sub(a, b)
        if op == "mul":
            return self.b.mul(a, b)
        if op in ("max", "min"):
            cmp = self.b.icmp_unsigned if unsigned else self.b.icmp_signed
            return self.b.select(cmp(">" if op == "max" else "<", a, b), a, b)
        if op in ("shl", "shr"):
            return self._shift(op, a, b, unsigned)
        if op in ("div", "mod") and unsigned:
            zero, one = ir.Constant(a.type, 0), ir.Constant(a.type, 1)
            by_zero = self.b.icmp_unsigned("==", b, zero)
            safe_b = self.b.select(by_zero, one, b)
            q = self.b.udiv(a, safe_b) if op == "div" else self.b.urem(a, safe_b)
            return self.b.select(by_zero, zero, q)
        if op in ("div", "mod"):
            return self._floor_divmod(op, a, b)
        raise CodegenError(f"unknown integer operation {op}")

    def _shift(self, op: str, a: ir.Value, b: ir.Value, unsigned: bool) -> ir.Value:
        """numpy's shifts: a count outside [0, width) (as unsigned) shifts every bit out."""
        t = a.type
        width = (t.element if isinstance(t, ir.VectorType) else t).width
        last = ir.Constant(t, width - 1)
        too_far = self.b.icmp_unsigned(">", b, last)
        if op == "shr" and not unsigned:
            return self.b.ashr(a, self.b.select(too_far, last, b))
        shifted = self.b.shl(a, b) if op == "shl" else self.b.lshr(a, b)
        return self.b.select(too_far, ir.Constant(t, 0), shifted)

    def _floor_divmod(self, op: str, a: ir.Value, b: ir.Value) -> ir.Value:
        t = a.type
        zero, one, minus_one = ir.Constant(t, 0), ir.Constant(t, 1), ir.Constant(t, -1)
        if isinstance(b, ir.Constant) and isinstance(b.constant, int) and b.constant > 0:
            q, r = self.b.sdiv(a, b), self.b.srem(a, b)
            adjust = self.b.icmp_signed("<", r, zero)
            if op == "div":
                return self.b.select(adjust, self.b.sub(q, one), q)
            return self.b.select(adjust, self.b.add(r, b), r)
        # b == 0 gives 0 (numpy does too, with a warning) and b == -1 avoids INT_MIN / -1 traps.
        unsafe = self.b.or_(self.b.icmp_signed("==", b, zero), self.b.icmp_signed("==", b, minus_one))
        safe_b = self.b.select(unsafe, one, b)
        q, r = self.b.sdiv(a, safe_b), self.b.srem(a, safe_b)
        adjust = self.b.and_(self.b.icmp_signed("!=", r, zero),
                             self.b.xor(self.b.icmp_signed("<", r, zero), self.b.icmp_signed("<", safe_b, zero)))
        if op == "div":
            floor_q = self.b.select(adjust, self.b.sub(q, one), q)
            by_minus_one = self.b.sub(zero, a)
            return self.b.select(self.b.icmp_signed("==", b, zero), zero,
                                 self.b.select(self.b.icmp_signed("==", b, minus_one), by_minus_one, floor_q))
        floor_r = self.b.select(adjust, self.b.add(r, safe_b), r)
        return self.b.select(unsafe, zero, floor_r)

    def _expr_Call(self, e: L.Call) -> ir.Value:
        args = [self.expr(a) for a in e.args]
        if e.func == L.DOT2_BF16:
            return bfloat.dot2_float(self.b, *args)
        if not is_float(e.dtype):
            return self._int_call(e.func, args, is_unsigned(e.dtype))
        return self.float_call(e.func, args, value_type(e.dtype))

    def float_call(self, func: str, args: list[ir.Value], t: ir.Type) -> ir.Value:
        if func in _FLOAT_INTRINSICS:
            fn = declare_intrinsic(self.module, _FLOAT_INTRINSICS[func], t, len(args))
            return self.b.call(fn, args)
        if func == "sigmoid":
            exp = declare_intrinsic(self.module, "llvm.exp", t, 1)
            e = self.b.call(exp, [self.b.fneg(args[0])])
            return self.b.fdiv(ir.Constant(t, 1.0), self.b.fadd(ir.Constant(t, 1.0), e))
        if func == "relu":
            return self.float_bin("max", args[0], ir.Constant(t, 0.0), ())
        if func in ("max", "min"):
            return self.float_bin(func, args[0], args[1], ())
        if func in _LIBM:
            name = f"{func}f" if isinstance(t, ir.FloatType) else func
            fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(t, [t]), name)
            return self.b.call(fn, args)
        raise CodegenError(f"no LLVM lowering for builtin {func}")

    def _int_call(self, func: str, args: list[ir.Value], unsigned: bool) -> ir.Value:
        t = args[0].type
        if func == "abs":
            name = f"llvm.abs.i{t.width}"
            fn = self.module.globals.get(name) or ir.Function(
                self.module, ir.FunctionType(t, [t, ir.IntType(1)]), name)
            return self.b.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])
        if func == "relu":
            return self.int_bin("max", args[0], ir.Constant(t, 0))
        if func in ("max", "min"):
            return self.int_bin(func, args[0], args[1], unsigned)
        if func == "pow":
            return self._int_pow(args[0], args[1], unsigned)
        if func in ("floor", "ceil"):
            return args[0]
        raise CodegenError(f"builtin {func} needs a float argument")

    def _int_pow(self, base: ir.Value, exp: ir.Value, unsigned: bool) -> ir.Value:
        """Exponentiation by squaring (wrapping, like numpy); negative exponents give 0."""
        t = base.type
        pre = self.b.block
        head = self.fn.append_basic_block("ipow")
        body = self.fn.append_basic_block("ipow_body")
        done = self.fn.append_basic_block("ipow_end")
        self.b.branch(head)
        self.b.position_at_end(head)
        result = self.b.phi(t)
        b_ = self.b.phi(t)
        e_ = self.b.phi(t)
        result.add_incoming(ir.Constant(t, 1), pre)
        b_.add_incoming(base, pre)
        e_.add_incoming(exp, pre)
        self.b.cbranch(self.b.icmp_unsigned("!=", e_, ir.Constant(t, 0)), body, done)
        self.b.position_at_end(body)
        odd = self.b.trunc(e_, ir.IntType(1))
        result.add_incoming(self.b.select(odd, self.b.mul(result, b_), result), body)
        b_.add_incoming(self.b.mul(b_, b_), body)
        e_.add_incoming(self.b.lshr(e_, ir.Constant(t, 1)), body)
        self.b.branch(head)
        self.b.position_at_end(done)
        if unsigned:
            return result
        negative = self.b.icmp_signed("<", exp, ir.Constant(t, 0))
        return self.b.select(negative, ir.Constant(t, 0), result)


__all__ = ["ScalarEmitter"]
