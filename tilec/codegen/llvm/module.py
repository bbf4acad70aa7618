"""Loop IR -> LLVM IR text (llvmlite.ir), for the CPU backend.

The module exports one function ``void NAME(ptr args)`` taking an array of buffer
pointers in PrimFunc parameter order; it unpacks them and calls an always-inlined
body whose pointer arguments are ``noalias`` (tilec allocates every output and
workspace itself, so buffers never overlap where one is written). Reductions of
the form ``acc = acc op x`` carry ``reassoc`` so LLVM may vectorise them; every
other float operation keeps IEEE semantics. Integer division is floor division
with ``x // 0 == 0`` (never a trap).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
import re
from typing import Any

import llvmlite.ir as ir

from tilec.codegen.llvm.binding import initialise_llvm
from tilec.codegen.llvm.runtime import ENTRY as PARALLEL_FOR
from tilec.codegen.llvm.transpose import emit_transposed, transposable
from tilec.codegen.llvm.vector import VectorLoop, power_of_two_pieces, vectorizable
from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.dtypes import is_float
from tilec.ir.visitor import walk
from tilec.target import CpuInfo

_TYPES: dict[str, ir.Type] = {
    "bool": ir.IntType(1), "int8": ir.IntType(8), "int16": ir.IntType(16), "int32": ir.IntType(32),
    "int64": ir.IntType(64), "float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType(),
}
_MEMORY_TYPES = dict(_TYPES, bool=ir.IntType(8))  # numpy stores a bool in one byte
_FCMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_FLOAT_INTRINSICS = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "sin": "llvm.sin",
                     "cos": "llvm.cos", "floor": "llvm.floor", "ceil": "llvm.ceil", "abs": "llvm.fabs",
                     "tanh": "llvm.tanh", "pow": "llvm.pow"}
_REASSOC = ("reassoc", "contract")
I64 = ir.IntType(64)
PTR = ir.PointerType()


def _type(dtype: str) -> ir.Type:
    try:
        return _TYPES[dtype]
    except KeyError:
        raise CodegenError(f"the LLVM backend does not support dtype {dtype}") from None


def emit_module(func: L.PrimFunc, cpu: CpuInfo) -> str:
    """The LLVM IR text of `func`, with the CPU's name, features and vector width as function attributes."""
    module = ir.Module(name=func.name)
    module.triple = _triple()
    body = _BodyEmitter(module, func, cpu.cores).emit()
    wrapper = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), func.name)
    b = ir.IRBuilder(wrapper.append_basic_block("entry"))
    args = []
    for k, _ in enumerate(func.params):
        slot = b.gep(wrapper.args[0], [ir.Constant(I64, k)], source_etype=PTR)
        args.append(b.load(slot, typ=PTR))
    b.call(body, args)
    b.ret_void()
    return _add_function_attributes(_patch_loop_ids(str(module)), cpu)


def _triple() -> str:
    return initialise_llvm().get_process_triple()


_LOOP_ID_PLACEHOLDER = "tilec.loop.id."


def _patch_loop_ids(text: str) -> str:
    """llvmlite.ir cannot spell self-referencing nodes: ``!7 = !{!"tilec.loop.id.0", ...}``
    becomes the loop ID ``!7 = distinct !{!7, ...}``."""
    pattern = re.compile(r'^(!\d+) = !\{ ?!"' + re.escape(_LOOP_ID_PLACEHOLDER) + r'\d+"', re.MULTILINE)
    return pattern.sub(lambda m: f"{m.group(1)} = distinct !{{ {m.group(1)}", text)


def _names_used(node: Any) -> tuple[list[str], list[str]]:
    """The buffers and variables a loop-IR node uses (each once, in first-use order)."""
    buffers: dict[str, None] = {}
    variables: dict[str, None] = {}
    for n in walk(node):
        if isinstance(n, L.Var):
            variables[n.name] = None
        elif isinstance(n, (L.Load, L.Store)):
            buffers[n.buffer] = None
    return list(buffers), list(variables)


def _i32(value: int) -> ir.Constant:
    return ir.Constant(ir.IntType(32), value)


def _type_suffix(t: ir.Type) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_type_suffix(t.element)}"
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {ir.HalfType: "f16", ir.FloatType: "f32", ir.DoubleType: "f64"}[type(t)]


def declare_intrinsic(module: ir.Module, name: str, t: ir.Type, nargs: int) -> ir.Function:
    """``name.<suffix of t>`` taking `nargs` values of type `t` (scalar or vector) and returning one."""
    full = f"{name}.{_type_suffix(t)}"
    existing = module.globals.get(full)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(t, [t] * nargs), full)


def _add_function_attributes(text: str, cpu: CpuInfo) -> str:
    """llvmlite.ir cannot spell string attributes; add them as an attribute group."""
    attrs = f'"target-cpu"="{cpu.name}" "target-features"="{cpu.features}" ' \
            f'"prefer-vector-width"="{cpu.vector_bits}" "min-legal-vector-width"="0" nounwind'
    lines = []
    for line in text.splitlines():
        if line.startswith("define "):
            line = line + " #0" if not line.rstrip().endswith("{") else line.rstrip()[:-1].rstrip() + " #0 {"
        lines.append(line)
    lines.append(f"attributes #0 = {{ {attrs} }}")
    return "\n".join(lines) + "\n"


class _BodyEmitter:
    def __init__(self, module: ir.Module, func: L.PrimFunc, cores: int = 1) -> None:
        self.module = module
        self.func = func
        self.cores = cores  # threads that parallel loops run on
        self.ids = itertools.count()  # loop-metadata and outlined-function numbers
        self.buffers: dict[str, L.Buffer] = {b.name: b for b in func.params}
        self.pointers: dict[str, ir.Value] = {}
        self.vars: dict[str, ir.Value] = {}
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * len(func.params))
        self.fn = ir.Function(module, fnty, f"{func.name}_body")
        self.fn.linkage = "internal"
        self.fn.attributes.add("alwaysinline")
        for arg, buf in zip(self.fn.args, func.params):
            arg.add_attribute("noalias")
            arg.name = buf.name.replace(".", "_")
            self.pointers[buf.name] = arg
        self.entry = self.fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.fn.append_basic_block("start"))

    def emit(self) -> ir.Function:
        self.stmt(self.func.body)
        self.b.ret_void()
        ir.IRBuilder(self.entry).branch(self.fn.blocks[1])
        return self.fn

    # ------------------------------------------------------------ statements

    def stmt(self, s: L.Stmt) -> None:
        method = getattr(self, f"_stmt_{type(s).__name__}", None)
        if method is None:
            raise CodegenError(f"the LLVM backend cannot compile {type(s).__name__} statements")
        method(s)

    def _stmt_Seq(self, s: L.Seq) -> None:
        for st in s.stmts:
            self.stmt(st)

    def _stmt_Barrier(self, s: L.Barrier) -> None:
        pass  # one thread per block on the CPU

    def _stmt_Allocate(self, s: L.Allocate) -> None:
        buf = s.buffer
        if buf.scope not in ("local", "shared"):
            raise CodegenError(f"buffer {buf.name}: scope {buf.scope} cannot be allocated inside a CPU kernel")
        entry = ir.IRBuilder(self.entry)
        mem = _MEMORY_TYPES[buf.dtype]
        ptr = entry.alloca(mem, size=ir.Constant(I64, max(1, buf.size)) if buf.size != 1 else None,
                           name=buf.name.replace(".", "_"))
        saved = self.pointers.get(buf.name)
        self.pointers[buf.name] = ptr
        self.buffers[buf.name] = buf
        self.stmt(s.body)
        if saved is not None:
            self.pointers[buf.name] = saved

    def _stmt_Store(self, s: L.Store) -> None:
        buf = self.buffers[s.buffer]
        value = s.value
        flags: tuple[str, ...] = ()
        if isinstance(value, L.Bin) and value.op in ("add", "mul") and isinstance(value.a, L.Load) \
                and value.a.buffer == s.buffer and value.a.indices == s.indices:
            flags = _REASSOC  # a reduction update: let LLVM reorder it
        v = self.expr(value, flags)
        if v.type != _type(buf.dtype):
            raise CodegenError(f"store of {value.dtype} into {buf.name} ({buf.dtype})")
        if buf.dtype == "bool":
            v = self.b.zext(v, ir.IntType(8))
        self.b.store(v, self.address(buf, s.indices))

    def _stmt_For(self, s: L.For) -> None:
        if s.kind == "unrolled" and transposable(s, self.buffers):
            emit_transposed(self, s)
        elif s.kind == "unrolled" and isinstance(s.begin, L.Const) and isinstance(s.end, L.Const):
            self._unrolled_loop(s)
        elif s.kind == "parallel" and self.cores > 1:
            self._parallel_loop(s)
        elif s.kind == "vectorized" and vectorizable(s, self.buffers):
            for piece in power_of_two_pieces(s):
                VectorLoop(self, piece).emit()
        else:
            loop_hints: dict[str, list[tuple[str, Any]]] = {
                "vectorized": [("llvm.loop.vectorize.enable", True)], "unrolled": [("llvm.loop.unroll.full", None)]}
            hints = loop_hints.get(s.kind, [])
            self._serial_loop(s, self.expr(s.begin), self.expr(s.end), hints)

    def _serial_loop(self, s: L.For, begin: ir.Value, end: ir.Value, hints: list[tuple[str, Any]]) -> None:
        pre = self.b.block
        header = self.fn.append_basic_block(f"for_{s.var}")
        body = self.fn.append_basic_block(f"for_{s.var}_body")
        exit_ = self.fn.append_basic_block(f"for_{s.var}_end")
        self.b.branch(header)
        self.b.position_at_end(header)
        iv = self.b.phi(I64, name=s.var)
        iv.add_incoming(begin, pre)
        self.b.cbranch(self.b.icmp_signed("<", iv, end), body, exit_)
        self.b.position_at_end(body)
        saved = self.vars.get(s.var)
        self.vars[s.var] = iv
        self.stmt(s.body)
        nxt = self.b.add(iv, ir.Constant(I64, 1), flags=("nsw",))
        iv.add_incoming(nxt, self.b.block)
        back_edge = self.b.branch(header)
        if hints:
            back_edge.set_metadata("llvm.loop", self._loop_metadata(hints))
        self.b.position_at_end(exit_)
        self._restore_var(s.var, saved)

    def _restore_var(self, name: str, saved: ir.Value | None) -> None:
        if saved is None:
            self.vars.pop(name, None)  # a value out of its loop must not be used (or captured) any more
        else:
            self.vars[name] = saved

    def _loop_metadata(self, hints: list[tuple[str, Any]]) -> ir.Value:
        """A loop ID node; its self-reference is patched in textually (see _patch_loop_ids)."""
        operands: list[Any] = [ir.MetaDataString(self.module, f"{_LOOP_ID_PLACEHOLDER}{next(self.ids)}")]
        for name, value in hints:
            md: list[Any] = [ir.MetaDataString(self.module, name)]
            if value is not None:
                md.append(ir.Constant(ir.IntType(1), int(value)) if isinstance(value, bool)
                          else ir.Constant(ir.IntType(32), value))
            operands.append(self.module.add_metadata(md))
        return self.module.add_metadata(operands)

    def _unrolled_loop(self, s: L.For) -> None:
        """The body once per iteration, with the loop variable a constant in each copy."""
        saved = self.vars.get(s.var)
        for value in range(int(s.begin.value), int(s.end.value)):  # type: ignore[union-attr]
            self.vars[s.var] = ir.Constant(I64, value)
            self.stmt(s.body)
        self._restore_var(s.var, saved)

    def _parallel_loop(self, s: L.For) -> None:
        """Split [begin, end) into `cores` chunks run by the runtime's worker pool (llvm_runtime).

        The loop is outlined into ``void chunk_fn(ptr ctx, i64 c)`` with
        ``ctx = {buffer pointers..., loop variables..., begin, chunk, end}``; chunk_fn runs
        iterations [begin + c * chunk, min(end, begin + (c + 1) * chunk)) through an
        always-inlined body whose buffer pointers are ``noalias`` like the kernel's own.
        """
        chunk_fn, ctx_type, captured_names = self._outline_parallel(s)  # before code that uses self.vars
        ctx = ir.IRBuilder(self.entry).alloca(ctx_type, name="par_ctx")
        buffers, variables = captured_names
        captured = [self.pointers[b] for b in buffers] + [self.vars[v] for v in variables]
        begin, end = self.expr(s.begin), self.expr(s.end)
        cores = ir.Constant(I64, self.cores)
        chunk = self.b.sdiv(self.b.add(self.b.sub(end, begin), ir.Constant(I64, self.cores - 1)), cores)
        for k, value in enumerate(captured + [begin, chunk, end]):
            self.b.store(value, self.b.gep(ctx, [_i32(0), _i32(k)], inbounds=True))
        run = self.module.globals.get(PARALLEL_FOR) or ir.Function(
            self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, I64]), PARALLEL_FOR)
        self.b.call(run, [chunk_fn, ctx, cores])

    def _outline_parallel(self, s: L.For) -> tuple[ir.Function, ir.Type, tuple[list[str], list[str]]]:
        k = next(self.ids)
        buffers, variables = _names_used(s)
        buffers = [b for b in buffers if b in self.pointers]
        variables = [v for v in variables if v in self.vars]
        ctx_type = ir.LiteralStructType([PTR] * len(buffers) + [I64] * (len(variables) + 3))
        # the body: (buffer pointers..., loop variables..., lo, hi)
        body_ty = ir.FunctionType(ir.VoidType(), [PTR] * len(buffers) + [I64] * (len(variables) + 2))
        inner = _BodyEmitter.__new__(_BodyEmitter)
        inner.module, inner.func, inner.cores, inner.ids = self.module, self.func, self.cores, self.ids
        inner.buffers = dict(self.buffers)
        inner.fn = ir.Function(self.module, body_ty, f"{self.func.name}_par{k}_body")
        inner.fn.linkage = "internal"
        inner.fn.attributes.add("alwaysinline")
        args = list(inner.fn.args)
        for arg, name in zip(args, buffers):
            arg.add_attribute("noalias")
            arg.name = name.replace(".", "_")
        inner.pointers = dict(zip(buffers, args))
        inner.vars = dict(zip(variables, args[len(buffers):]))
        inner.entry = inner.fn.append_basic_block("entry")
        inner.b = ir.IRBuilder(inner.fn.append_basic_block("start"))
        inner._serial_loop(s, args[-2], args[-1], [])
        inner.b.ret_void()
        ir.IRBuilder(inner.entry).branch(inner.fn.blocks[1])
        # the pool's entry point: unpack the context, compute this chunk's range
        chunk_fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64]), f"{self.func.name}_par{k}")
        chunk_fn.linkage = "internal"
        b = ir.IRBuilder(chunk_fn.append_basic_block("entry"))
        ctx, c = chunk_fn.args
        fields = [b.load(b.gep(ctx, [_i32(0), _i32(f)], inbounds=True, source_etype=ctx_type), typ=t)
                  for f, t in enumerate(ctx_type.elements)]
        begin, chunk, end = fields[-3:]
        lo = b.add(begin, b.mul(c, chunk))
        hi_raw = b.add(lo, chunk)
        hi = b.select(b.icmp_signed("<", hi_raw, end), hi_raw, end)
        with b.if_then(b.icmp_signed("<", lo, hi)):
            b.call(inner.fn, fields[:-3] + [lo, hi])
        b.ret_void()
        return chunk_fn, ctx_type, (buffers, variables)

    def _stmt_If(self, s: L.If) -> None:
        self.emit_if(s, self.stmt)

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
        return self.b.gep(ptr, [offset], inbounds=True, source_etype=_MEMORY_TYPES[buf.dtype])

    # ------------------------------------------------------------ expressions

    def expr(self, e: L.Expr, flags: tuple[str, ...] = ()) -> ir.Value:
        method = getattr(self, f"_expr_{type(e).__name__}", None)
        if method is None:
            raise CodegenError(f"the LLVM backend cannot compile {type(e).__name__} expressions")
        return method(e, flags) if isinstance(e, L.Bin) else method(e)

    def _expr_Const(self, e: L.Const) -> ir.Value:
        if e.dtype == "bool":
            return ir.Constant(ir.IntType(1), int(bool(e.value)))
        return ir.Constant(_type(e.dtype), e.value)

    def _expr_Var(self, e: L.Var) -> ir.Value:
        try:
            return self.vars[e.name]
        except KeyError:
            raise CodegenError(f"loop variable '{e.name}' used outside its loop") from None

    def _expr_Load(self, e: L.Load) -> ir.Value:
        buf = self.buffers[e.buffer]
        v = self.b.load(self.address(buf, e.indices), typ=_MEMORY_TYPES[buf.dtype])
        if buf.dtype == "bool":
            v = self.b.icmp_unsigned("!=", v, ir.Constant(ir.IntType(8), 0))
        return v

    def _expr_Cast(self, e: L.Cast) -> ir.Value:
        return self.convert(self.expr(e.a), e.a.dtype, e.dtype)

    def convert(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        if src == dst:
            return v
        t = _type(dst)
        if dst == "bool":
            if is_float(src):
                return self.b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
            return self.b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        if is_float(dst):
            if src == "bool":
                return self.b.uitofp(v, t)
            if is_float(src):
                return self.b.fpext(v, t) if _bits(dst) > _bits(src) else self.b.fptrunc(v, t)
            return self.b.sitofp(v, t)
        if is_float(src):
            return self.b.fptosi(v, t)
        if src == "bool":
            return self.b.zext(v, t)
        return self.b.sext(v, t) if _bits(dst) > _bits(src) else self.b.trunc(v, t)

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
        if dtype == "bool":
            return self.b.icmp_unsigned(_FCMP[op], a, b)
        return self.b.icmp_signed(_FCMP[op], a, b)

    @staticmethod
    def memory_type(dtype: str) -> ir.Type:
        return _MEMORY_TYPES[dtype]

    @staticmethod
    def value_type(dtype: str) -> ir.Type:
        return _type(dtype)

    def _expr_Bin(self, e: L.Bin, flags: tuple[str, ...] = ()) -> ir.Value:
        a, b = self.expr(e.a), self.expr(e.b)
        dt = e.a.dtype
        if e.b.dtype != dt:
            raise CodegenError(f"operands of {e.op} disagree: {e.a.dtype} and {e.b.dtype}")
        if e.op == "and":
            return self.b.and_(a, b)
        if e.op == "or":
            return self.b.or_(a, b)
        if is_float(dt):
            return self._float_bin(e.op, a, b, flags)
        return self._int_bin(e.op, a, b)

    def _float_bin(self, op: str, a: ir.Value, b: ir.Value, flags: tuple[str, ...]) -> ir.Value:
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

    def _int_bin(self, op: str, a: ir.Value, b: ir.Value) -> ir.Value:
        if op == "add":
            return self.b.add(a, b)
        if op == "sub":
            return self.b.sub(a, b)
        if op == "mul":
            return self.b.mul(a, b)
        if op in ("max", "min"):
            return self.b.select(self.b.icmp_signed(">" if op == "max" else "<", a, b), a, b)
        if op in ("div", "mod"):
            return self._floor_divmod(op, a, b)
        raise CodegenError(f"unknown integer operation {op}")

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
        if not is_float(e.dtype):
            return self._int_call(e.func, args)
        if e.dtype == "float16":  # compute in float32, as libm has no half functions
            args = [self.b.fpext(a, ir.FloatType()) for a in args]
            return self.b.fptrunc(self._float_call(e.func, args, ir.FloatType()), ir.HalfType())
        return self._float_call(e.func, args, _type(e.dtype))

    def _float_call(self, func: str, args: list[ir.Value], t: ir.Type) -> ir.Value:
        if func in _FLOAT_INTRINSICS:
            fn = declare_intrinsic(self.module, _FLOAT_INTRINSICS[func], t, len(args))
            return self.b.call(fn, args)
        if func == "sigmoid":
            exp = declare_intrinsic(self.module, "llvm.exp", t, 1)
            e = self.b.call(exp, [self.b.fneg(args[0])])
            return self.b.fdiv(ir.Constant(t, 1.0), self.b.fadd(ir.Constant(t, 1.0), e))
        if func == "relu":
            return self._float_bin("max", args[0], ir.Constant(t, 0.0), ())
        if func in ("max", "min"):
            return self._float_bin(func, args[0], args[1], ())
        if func == "erf":
            name = "erff" if isinstance(t, ir.FloatType) else "erf"
            fn = self.module.globals.get(name) or ir.Function(self.module, ir.FunctionType(t, [t]), name)
            return self.b.call(fn, args)
        raise CodegenError(f"no LLVM lowering for builtin {func}")

    def _int_call(self, func: str, args: list[ir.Value]) -> ir.Value:
        t = args[0].type
        if func == "abs":
            name = f"llvm.abs.i{t.width}"
            fn = self.module.globals.get(name) or ir.Function(
                self.module, ir.FunctionType(t, [t, ir.IntType(1)]), name)
            return self.b.call(fn, [args[0], ir.Constant(ir.IntType(1), 0)])
        if func == "relu":
            return self._int_bin("max", args[0], ir.Constant(t, 0))
        if func in ("max", "min"):
            return self._int_bin(func, args[0], args[1])
        if func == "pow":
            return self._int_pow(args[0], args[1])
        if func in ("floor", "ceil"):
            return args[0]
        raise CodegenError(f"builtin {func} needs a float argument")

    def _int_pow(self, base: ir.Value, exp: ir.Value) -> ir.Value:
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
        self.b.cbranch(self.b.icmp_signed(">", e_, ir.Constant(t, 0)), body, done)
        self.b.position_at_end(body)
        odd = self.b.trunc(e_, ir.IntType(1))
        result.add_incoming(self.b.select(odd, self.b.mul(result, b_), result), body)
        b_.add_incoming(self.b.mul(b_, b_), body)
        e_.add_incoming(self.b.ashr(e_, ir.Constant(t, 1)), body)
        self.b.branch(head)
        self.b.position_at_end(done)
        negative = self.b.icmp_signed("<", exp, ir.Constant(t, 0))
        return self.b.select(negative, ir.Constant(t, 0), result)


def _bits(dtype: str) -> int:
    return {"float16": 16, "float32": 32, "float64": 64, "int8": 8, "int16": 16, "int32": 32, "int64": 64}[dtype]


__all__: list[Any] = ["emit_module"]
