"""Explicit vector code for `vectorized` loops (the loop's extent is the vector length).

A value that does not depend on the loop variable stays scalar (and is splatted where
it meets a vector); a load or store whose address moves by one element per lane is a
vector load or store, one that does not move is a scalar access, any other is done
lane by lane. ``acc = acc + x * y`` becomes ``llvm.fmuladd`` (one FMA per lane).
`vectorizable` says whether a loop body is within what this emitter handles; the
backend falls back to a scalar loop (with LLVM's vectoriser hint) otherwise.

Requires: `vectorizable(loop, buffers)`, and the scalar emitter (tilec.codegen.llvm.scalar) whose
builder and state the vector code shares. Guarantees: the stores of the loop's iterations, in
vector registers, with the lanes' values those iterations compute; masked-off lanes neither load
memory their iteration would not have read nor store.
"""

from __future__ import annotations

import math

from typing import Any

import llvmlite.ir as ir

from tilec.codegen.llvm import bfloat, vector_math
from tilec.codegen.llvm.scalar import ScalarEmitter
from tilec.codegen.llvm.types import (I64, alignment, declare_intrinsic, declare_masked, packed_bfloat16, storage_type,
                                     value_type)
from tilec.ir import loop as L
from tilec.ir.dtypes import computed_dtype, is_float, is_unsigned
from tilec.ir.visitor import children, walk

_SAFE_CALLS = {"exp", "log", "sqrt", "sin", "cos", "floor", "ceil", "tanh", "pow", "max", "min"}
_SAFE_BIN = {"add", "sub", "mul", "div", "min", "max", "and", "or", "xor", "shl", "shr"}


def _exp_ceiling(e: L.Call) -> float | None:
    """c where `e` is exp(min(x, c)) in float32 with a constant c (vector_math.exp_f32's ceiling), else None."""
    if e.func != "exp" or computed_dtype(e.dtype) != "float32" or not isinstance(e.args[0], L.Bin):
        return None
    arg = e.args[0]
    if arg.op != "min" or not isinstance(arg.b, L.Const) or computed_dtype(arg.a.dtype) != "float32":
        return None
    value = float(arg.b.value)
    return value if math.isfinite(value) else None


def _pair(first: L.Expr, second: L.Expr, buffers: dict[str, L.Buffer]) -> bool:
    """Whether two loads read adjacent bfloat16 cells of one buffer: the second's index one more in
    one dimension, every dimension after it of size 1."""
    if not (isinstance(first, L.Load) and isinstance(second, L.Load) and first.buffer == second.buffer
            and first.dtype == second.dtype == "bfloat16" and first.buffer in buffers):
        return False
    differ = [d for d, (x, y) in enumerate(zip(first.indices, second.indices)) if x != y]
    shape = buffers[first.buffer].shape
    return (len(differ) == 1 and _one_more(first.indices[differ[0]], second.indices[differ[0]])
            and all(n == 1 for n in shape[differ[0] + 1:]))


def _one_more(first: L.Expr, second: L.Expr) -> bool:
    """Whether index `second` is `first` + 1: two constants, or `second` written as first + 1."""
    if isinstance(first, L.Const) and isinstance(second, L.Const):
        return second.value == first.value + 1
    return (isinstance(second, L.Bin) and second.op == "add" and second.a == first
            and isinstance(second.b, L.Const) and second.b.value == 1)


def varies(e: Any, var: str) -> bool:
    """Whether the value of `e` may differ between the lanes of the loop over `var`."""
    return any(isinstance(n, L.Var) and n.name == var for n in walk(e))


def _coefficient(e: L.Expr, var: str) -> int | None:
    """d e / d var for an affine index expression; None where it is not affine in var."""
    if not varies(e, var):
        return 0
    if isinstance(e, L.Var):
        return 1
    if isinstance(e, L.Bin) and e.op in ("add", "sub"):
        a, b = _coefficient(e.a, var), _coefficient(e.b, var)
        if a is None or b is None:
            return None
        return a + b if e.op == "add" else a - b
    if isinstance(e, L.Bin) and e.op == "mul":
        if isinstance(e.a, L.Const) and isinstance(e.a.value, int):
            c = _coefficient(e.b, var)
            return None if c is None else e.a.value * c
        if isinstance(e.b, L.Const) and isinstance(e.b.value, int):
            c = _coefficient(e.a, var)
            return None if c is None else e.b.value * c
    return None


def element_stride(buf: L.Buffer, indices: tuple[L.Expr, ...], var: str) -> int | None:
    """How many elements of `buf` the access moves by per step of `var` (None where not affine).

    A flat index F spread over adjacent dimensions of extents (.., e2, e1) as
    (F / (e2 e1), (F / e1) % e2, F % e1) -- dimensions coalesced by a layout permutation -- moves
    the address by F's coefficient: the digits recombine into F."""
    total = 0
    dims = list(zip(reversed(indices), reversed(buf.shape)))  # innermost first
    d = 0
    while d < len(dims):
        flat, count = _digits(dims[d:]) or (dims[d][0], 1)
        c = _coefficient(flat, var)
        if c is None:
            return None
        total += c * math.prod(n for _, n in dims[:d])
        d += count
    return total


def _digits(dims: list[tuple[L.Expr, int]]) -> tuple[L.Expr, int] | None:
    """(F, k) when the first k >= 2 of `dims` (innermost first) index F % e1, (F / e1) % e2, ...,
    F / (e1 ... e(k-1)) with e the dimensions' extents; else None."""
    first, e1 = dims[0]
    if not (isinstance(first, L.Bin) and first.op == "mod" and first.b == L.const(e1)):
        return None
    flat, below = first.a, e1
    for k, (idx, n) in enumerate(dims[1:], start=2):
        quotient = L.Bin("div", flat, L.const(below))
        if idx == quotient:
            return flat, k
        if not (isinstance(idx, L.Bin) and idx.op == "mod" and idx.a == quotient and idx.b == L.const(n)):
            return None
        below *= n
    return None


def single_store(s: L.Stmt | None) -> L.Store | None:
    if isinstance(s, L.Seq) and len(s.stmts) == 1:
        s = s.stmts[0]
    return s if isinstance(s, L.Store) else None


def vectorizable(loop: L.For, buffers: dict[str, L.Buffer]) -> bool:
    """Whether `loop` (kind vectorized, constant bounds) is within what VectorLoop emits.

    An `if` whose condition varies across lanes is allowed around one unit-stride store (a
    masked store), or as an if/else storing to one place in both arms (a select); every load
    under such a condition must be unit-stride (a masked load) or from a local buffer, so no
    lane reads memory its scalar iteration would not have read."""
    if not (isinstance(loop.begin, L.Const) and isinstance(loop.end, L.Const)) or loop.end.value - loop.begin.value < 2:
        return False
    var = loop.var

    def expr_ok(e: L.Expr, masked: bool) -> bool:
        if isinstance(e, L.Load) and masked:
            buf = buffers.get(e.buffer)
            if buf is None:
                return False
            if buf.scope != "local" and element_stride(buf, e.indices, var) != 1:
                return False  # a uniform or gathered load would run for masked-off lanes too
        if not varies(e, var):
            return True
        if isinstance(e, L.Bin) and (e.op not in _SAFE_BIN or (e.op == "div" and not is_float(e.dtype))):
            return False
        if isinstance(e, L.Call) and e.func == L.DOT2_BF16:
            return all(expr_ok(c, masked) for c in children(e))
        if isinstance(e, L.Call) and ((e.func not in _SAFE_CALLS and not (e.func in vector_math.FLOAT32
                                                                           and computed_dtype(e.dtype) == "float32"))
                                      or not is_float(e.dtype)):
            return False
        if isinstance(e, L.Load):  # its indices are computed per lane in scalar code (once where affine): any will do
            return buffers.get(e.buffer) is not None
        return all(expr_ok(c, masked) for c in children(e))

    def store_ok(s: L.Store, masked: bool) -> bool:
        buf = buffers.get(s.buffer)
        if buf is None or buf.dtype == "bool" or not expr_ok(s.value, masked):
            return False
        stride = element_stride(buf, s.indices, var)
        if masked:
            return stride == 1 and all(not varies(i, var) or _coefficient(i, var) is not None for i in s.indices)
        return stride != 0 or not varies(s.value, var)  # all lanes into one cell: a reduction

    def stmt_ok(s: L.Stmt) -> bool:
        if isinstance(s, L.Seq):
            return all(stmt_ok(x) for x in s.stmts)
        if isinstance(s, L.If):
            if not varies(s.cond, var):
                return stmt_ok(s.then) and (s.orelse is None or stmt_ok(s.orelse))
            then, orelse = single_store(s.then), single_store(s.orelse)
            if not expr_ok(s.cond, False) or then is None:
                return False
            if s.orelse is None:
                return store_ok(then, True)
            return (orelse is not None and (orelse.buffer, orelse.indices) == (then.buffer, then.indices)
                    and store_ok(then, True) and store_ok(orelse, True))
        if isinstance(s, L.Store):
            return store_ok(s, False)
        return isinstance(s, L.Barrier)

    return stmt_ok(loop.body)


def power_of_two_pieces(loop: L.For) -> list[L.For]:
    """`loop` (constant bounds) as consecutive loops whose extents are powers of two, largest first.
    LLVM legalises a vector of, say, 48 floats through shuffles (about 30x slower on AVX-512), a 32
    and a 16 into plain registers. The pieces run one after another, which is the loop's meaning
    when its iterations are independent, as a vectorized loop's are."""
    begin, extent = int(loop.begin.value), int(loop.end.value) - int(loop.begin.value)  # type: ignore[union-attr]
    pieces = []
    for bit in reversed(range(extent.bit_length())):
        size = 1 << bit
        if extent & size:
            pieces.append(L.For(loop.var, L.const(begin), L.const(begin + size), loop.body, loop.kind))
            begin += size
    return pieces


class VectorLoop:
    """Emits one vectorized loop through the scalar emitter `em` (sharing its builder and state)."""

    def __init__(self, em: ScalarEmitter, loop: L.For) -> None:
        self.em = em
        self.loop = loop
        self.var = loop.var
        self.begin = int(loop.begin.value)  # type: ignore[union-attr]
        self.mask: ir.Value | None = None  # inside a lane-varying `if`: the lanes that run
        self.lanes = int(loop.end.value) - self.begin  # type: ignore[union-attr]

    @property
    def b(self) -> ir.IRBuilder:
        return self.em.b

    def emit(self) -> None:
        saved = self.em.vars.get(self.var)
        self.em.vars[self.var] = ir.Constant(I64, self.begin)  # addresses are taken at lane 0
        self.stmt(self.loop.body)
        self.em.restore_var(self.var, saved)

    # ------------------------------------------------------------ statements

    def stmt(self, s: L.Stmt) -> None:
        if isinstance(s, L.Seq):
            for x in s.stmts:
                self.stmt(x)
        elif isinstance(s, L.If) and not varies(s.cond, self.var):
            self.em.emit_if(s, self.stmt)
        elif isinstance(s, L.If):  # a lane mask: vectorizable() allowed only these two shapes
            self.masked_if(s)
        elif isinstance(s, L.Store):
            self.store(s)

    def masked_if(self, s: L.If) -> None:
        mask = self.vector(s.cond)
        then, orelse = single_store(s.then), single_store(s.orelse)
        assert then is not None
        buf = self.em.buffers[then.buffer]
        saved = self.mask
        self.mask = mask
        value = self.vector(then.value)
        if orelse is None:
            value = self.em.to_memory(buf, value)
            if value.type.element == ir.IntType(16):
                # 16-bit lanes (bfloat16's bits) stored as half: LLVM 22 lowers a masked store of
                # i16 lanes whose mask keeps one lane to a 4-byte store, overwriting the next element
                value = self.b.bitcast(value, ir.VectorType(ir.HalfType(), value.type.count))
            ptr = self.vector_pointer(buf, then.indices, value.type)
            store = declare_masked(self.em.module, "store", value.type)
            self.b.call(store, [value, ptr, ir.Constant(ir.IntType(32), alignment(buf.dtype)), mask])
        else:
            self.mask = self.b.not_(mask)
            chosen = self.em.to_memory(buf, self.b.select(mask, value, self.vector(orelse.value)))
            self.b.store(chosen, self.vector_pointer(buf, then.indices, chosen.type), align=alignment(buf.dtype))
        self.mask = saved

    def store(self, s: L.Store) -> None:
        buf = self.em.buffers[s.buffer]
        value = self.fused_update(s) or self.vector(s.value)
        stride = element_stride(buf, s.indices, self.var)
        if stride == 0:  # the value is uniform (vectorizable() checked it): one scalar store
            self.b.store(self.em.to_memory(buf, self.em.expr(s.value)), self.em.address(buf, s.indices))
            return
        value = self.em.to_memory(buf, value)
        if stride == 1:
            self.b.store(value, self.vector_pointer(buf, s.indices, value.type), align=alignment(buf.dtype))
        else:
            for lane in range(self.lanes):
                self.em.vars[self.var] = ir.Constant(I64, self.begin + lane)
                self.b.store(self.b.extract_element(value, ir.Constant(ir.IntType(32), lane)),
                             self.em.address(buf, s.indices))
            self.em.vars[self.var] = ir.Constant(I64, self.begin)

    def fused_update(self, s: L.Store) -> ir.Value | None:
        """``buf[i] = buf[i] + x * y`` on floats as one fmuladd per lane."""
        v = s.value
        if not (isinstance(v, L.Bin) and v.op == "add" and is_float(v.dtype) and isinstance(v.a, L.Load)
                and v.a.buffer == s.buffer and v.a.indices == s.indices and isinstance(v.b, L.Bin)
                and v.b.op == "mul"):
            return None
        acc, x, y = self.vector(v.a), self.vector(v.b.a), self.vector(v.b.b)
        fn = declare_intrinsic(self.em.module, "llvm.fmuladd", acc.type, 3)
        return self.b.call(fn, [x, y, acc])

    # ------------------------------------------------------------ expressions

    def vector(self, e: L.Expr) -> ir.Value:
        """`e` as a vector of `lanes` values (uniform values splatted)."""
        if not varies(e, self.var):
            return self.splat(self.em.expr(e))
        if isinstance(e, L.Var):
            return ir.Constant(ir.VectorType(I64, self.lanes), [self.begin + k for k in range(self.lanes)])
        if isinstance(e, L.Load):
            return self.load(e)
        if isinstance(e, L.Bin):
            a, b = self.vector(e.a), self.vector(e.b)
            if is_float(e.dtype):
                return self.em.float_bin(e.op, a, b, ())
            return self.em.int_bin(e.op, a, b, is_unsigned(e.dtype))
        if isinstance(e, L.Cmp):
            return self.em.compare(e.op, e.a.dtype, self.vector(e.a), self.vector(e.b))
        if isinstance(e, L.Not):
            return self.b.not_(self.vector(e.a))
        if isinstance(e, L.Select):
            return self.b.select(self.vector(e.cond), self.vector(e.a), self.vector(e.b))
        if isinstance(e, L.Cast):
            return self.em.convert(self.vector(e.a), e.a.dtype, e.dtype)
        if isinstance(e, L.Call) and e.func == L.DOT2_BF16:
            return self.dot2(e)
        if isinstance(e, L.Call):
            ceiling = _exp_ceiling(e)
            if ceiling is not None:  # e^min(x, c): the clamp is the exponential's own (softmax's e^(s - max))
                assert isinstance(e.args[0], L.Bin)
                return vector_math.exp_f32(self.b, self.em.module, self.vector(e.args[0].a), ceiling)
            args = [self.vector(a) for a in e.args]
            if e.func in ("max", "min"):
                return self.em.float_bin(e.func, args[0], args[1], ())
            if e.func in vector_math.FLOAT32 and computed_dtype(e.dtype) == "float32":
                return vector_math.FLOAT32[e.func](self.b, self.em.module, args[0])
            return self.em.float_call(e.func, args, args[0].type)
        raise AssertionError(f"vectorizable() let {type(e).__name__} through")

    def dot2(self, e: L.Call) -> ir.Value:
        """DOT2_BF16 (tilec.ir.loop) as one vdpbf16ps where its operands have that instruction's layout:
        16 lanes, the a pair the same in every lane and contiguous, the lanes' b pairs contiguous, on a
        CPU that has it; else lane by lane in float32."""
        acc, a0, a1, b0, b1 = e.args
        pairs_ok = (self.em.pair_dot and self.lanes % bfloat.DOT2_LANES == 0 and self.mask is None and not varies(a0, self.var)
                    and _pair(a0, a1, self.em.buffers) and _pair(b0, b1, self.em.buffers) and isinstance(a0, L.Load) and isinstance(b0, L.Load)
                    and packed_bfloat16(self.em.buffers[a0.buffer]) and packed_bfloat16(self.em.buffers[b0.buffer])
                    and element_stride(self.em.buffers[b0.buffer], b0.indices, self.var) == 2)
        if not pairs_ok:
            return bfloat.dot2_float(self.b, *(self.vector(x) for x in e.args))
        assert isinstance(a0, L.Load) and isinstance(b0, L.Load)
        a_word = self.b.load(self.em.address(self.em.buffers[a0.buffer], a0.indices), typ=ir.IntType(32), align=2)
        b_type = ir.VectorType(ir.IntType(16), 2 * bfloat.DOT2_LANES)
        b_base = self.em.address(self.em.buffers[b0.buffer], b0.indices)
        accs, n = self.vector(acc), bfloat.DOT2_LANES
        parts = []
        for c in range(self.lanes // n):  # one instruction per 16 lanes
            part = self.b.shuffle_vector(accs, ir.Constant(accs.type, None),
                                         ir.Constant(ir.VectorType(ir.IntType(32), n), list(range(c * n, (c + 1) * n))))
            b_ptr = self.b.gep(b_base, [ir.Constant(I64, 2 * n * c)], source_etype=ir.IntType(16))
            b_bits = self.b.load(b_ptr, typ=b_type, align=2)
            parts.append(bfloat.dot2_lanes(self.b, self.em.module, part, a_word, b_bits))
        while len(parts) > 1:  # concatenate pairwise
            width = 2 * parts[0].type.count
            parts = [self.b.shuffle_vector(parts[i], parts[i + 1], ir.Constant(ir.VectorType(ir.IntType(32), width),
                                                                               list(range(width))))
                     for i in range(0, len(parts), 2)]
        return parts[0]

    def load(self, e: L.Load) -> ir.Value:
        buf = self.em.buffers[e.buffer]
        stride = element_stride(buf, e.indices, self.var)
        elem = storage_type(buf)
        if stride == 0:
            return self.splat(self.em.expr(e))
        if stride == 1:
            vt = ir.VectorType(elem, self.lanes)
            if self.mask is not None and buf.scope != "local":  # lanes outside the mask may be out of bounds
                load = declare_masked(self.em.module, "load", vt)
                raw = self.b.call(load, [self.vector_pointer(buf, e.indices, vt),
                                         ir.Constant(ir.IntType(32), alignment(buf.dtype)), self.mask,
                                         ir.Constant(vt, None)])
            else:
                raw = self.b.load(self.vector_pointer(buf, e.indices, vt), typ=vt, align=alignment(buf.dtype))
            return self.em.from_memory(buf, raw)
        out = ir.Constant(ir.VectorType(value_type(buf.dtype), self.lanes), None)
        for lane in range(self.lanes):
            self.em.vars[self.var] = ir.Constant(I64, self.begin + lane)
            out = self.b.insert_element(out, self.em.expr(e), ir.Constant(ir.IntType(32), lane))
        self.em.vars[self.var] = ir.Constant(I64, self.begin)
        return out

    def vector_pointer(self, buf: L.Buffer, indices: tuple[L.Expr, ...], vt: ir.Type) -> ir.Value:
        """The address of lane 0, typed for a whole vector (a no-op cast under opaque pointers)."""
        return self.b.bitcast(self.em.address(buf, indices), ir.PointerType(vt))

    def splat(self, x: ir.Value) -> ir.Value:
        vt = ir.VectorType(x.type, self.lanes)
        one = self.b.insert_element(ir.Constant(vt, None), x, ir.Constant(ir.IntType(32), 0))
        mask = ir.Constant(ir.VectorType(ir.IntType(32), self.lanes), [0] * self.lanes)
        return self.b.shuffle_vector(one, ir.Constant(vt, None), mask)


__all__ = ["VectorLoop", "element_stride", "power_of_two_pieces", "single_store", "varies", "vectorizable"]
