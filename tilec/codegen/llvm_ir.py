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

from typing import Any

import llvmlite.ir as ir

from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.dtypes import is_float
from tilec.target import Target

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


def emit_module(func: L.PrimFunc, target: Target) -> str:
    """The LLVM IR text of `func`, with the target's CPU and vector width as function attributes."""
    module = ir.Module(name=func.name)
    module.triple = _triple()
    body = _BodyEmitter(module, func).emit()
    wrapper = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), func.name)
    b = ir.IRBuilder(wrapper.append_basic_block("entry"))
    args = []
    for k, _ in enumerate(func.params):
        slot = b.gep(wrapper.args[0], [ir.Constant(I64, k)], source_etype=PTR)
        args.append(b.load(slot, typ=PTR))
    b.call(body, args)
    b.ret_void()
    return _add_function_attributes(str(module), target)


def _triple() -> str:
    from tilec.codegen.llvm_jit import initialise_llvm

    return initialise_llvm().get_process_triple()


def _add_function_attributes(text: str, target: Target) -> str:
    """llvmlite.ir cannot spell string attributes; add them as an attribute group."""
    attrs = f'"target-cpu"="{target.cpu}" "target-features"="{target.features}" ' \
            f'"prefer-vector-width"="{target.vector_bits}" "min-legal-vector-width"="0" nounwind'
    lines = []
    for line in text.splitlines():
        if line.startswith("define "):
            line = line + " #0" if not line.rstrip().endswith("{") else line.rstrip()[:-1].rstrip() + " #0 {"
        lines.append(line)
    lines.append(f"attributes #0 = {{ {attrs} }}")
    return "\n".join(lines) + "\n"


class _BodyEmitter:
    def __init__(self, module: ir.Module, func: L.PrimFunc) -> None:
        self.module = module
        self.func = func
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
        ptr = entry.alloca(ir.ArrayType(mem, max(1, buf.size)) if buf.size != 1 else mem, name=buf.name.replace(".", "_"))
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
        begin, end = self.expr(s.begin), self.expr(s.end)
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
        self.b.branch(header)
        self.b.position_at_end(exit_)
        if saved is not None:
            self.vars[s.var] = saved

    def _stmt_If(self, s: L.If) -> None:
        cond = self.expr(s.cond)
        if s.orelse is None:
            with self.b.if_then(cond):
                self.stmt(s.then)
        else:
            with self.b.if_else(cond) as (then, orelse):
                with then:
                    self.stmt(s.then)
                with orelse:
                    self.stmt(s.orelse)

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
        a, b = self.expr(e.a), self.expr(e.b)
        if is_float(e.a.dtype):
            if e.op == "ne":  # NaN != x is true, as in numpy
                return self.b.fcmp_unordered("!=", a, b)
            return self.b.fcmp_ordered(_FCMP[e.op], a, b)
        if e.a.dtype == "bool":
            return self.b.icmp_unsigned(_FCMP[e.op], a, b)
        return self.b.icmp_signed(_FCMP[e.op], a, b)

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
            fn = self.module.declare_intrinsic(_FLOAT_INTRINSICS[func], [t])
            return self.b.call(fn, args)
        if func == "sigmoid":
            exp = self.module.declare_intrinsic("llvm.exp", [t])
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
