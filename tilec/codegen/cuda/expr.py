"""Loop-IR expressions -> CUDA C expressions, with the loop IR's exact semantics.

Every expression renders to a C value of its dtype's C type (`ctype`), except that float16
values are ``float`` in registers (`value_ctype`): a float16 buffer in global or shared memory
holds ``__half``, loads widen and stores round (`stored`), so an expression on float16 is
computed in float32 and rounded once, where it is stored or an explicit conversion asks (the
language's rule, tilec.ir.dtypes); a local float16 buffer, an accumulator, holds float. Index expressions (int64 in the IR) use the kernel's index
type: ``int`` where the renderer proved they fit, else ``long long``. Also renders the
``float4`` form of a vectorized loop (`try_float4`), which needs per-lane expressions.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections.abc import Callable

import numpy as np

from tilec.codegen.cuda import analysis as A
from tilec.codegen.cuda.math import ARITH, float_bin, float_call
from tilec.errors import CodegenError
from tilec.ir import loop as L
from tilec.ir.dtypes import is_float, is_unsigned
from tilec.ir.visitor import walk

_CTYPES = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int", "int64": "long long",
           "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
           "uint64": "unsigned long long", "float16": "__half", "float32": "float", "float64": "double"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_RESERVED = {"auto", "bool", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
             "enum", "extern", "float", "for", "goto", "if", "int", "long", "register", "return", "short",
             "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
             "volatile", "while", "class", "new", "delete", "this", "template", "typename", "namespace",
             "true", "false", "inline", "private", "public", "operator", "threadIdx", "blockIdx", "blockDim",
             "gridDim", "warpSize", "half", "float4", "nvcuda", "wmma", "asm", "friend", "virtual"}
_LANES = "xyzw"


def ctype(dtype: str) -> str:
    """The C type of `dtype`'s values in global and shared memory."""
    try:
        return _CTYPES[dtype]
    except KeyError:
        raise CodegenError(f"the CUDA backend does not support dtype {dtype}") from None


def value_ctype(dtype: str) -> str:
    """The C type of `dtype`'s values in registers and local buffers (float16 is computed in float)."""
    return "float" if dtype == "float16" else ctype(dtype)


def holds_half(buf: L.Buffer) -> bool:
    """Whether `buf`'s memory holds __half values that loads widen and stores round."""
    return buf.dtype == "float16" and buf.scope != "local"


def identifier(name: str, taken: set[str]) -> str:
    """A C identifier for an IR name, distinct from every name in `taken` (which it joins)."""
    base = re.sub(r"\W", "_", name) or "v"
    if len(base) > 48:  # keep sources readable and inside every C compiler's identifier limits
        base = f"{base[:24]}_{hashlib.sha1(base.encode()).hexdigest()[:16]}"
    if base[0].isdigit() or base in _RESERVED or base.startswith(("tilec_", "__")):
        base = "v_" + base
    out, k = base, 1
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


class Names:
    """IR names -> C identifiers, one consistent spelling per IR name within a kernel."""

    def __init__(self) -> None:
        self.taken: set[str] = set()
        self.vars: dict[str, str] = {}
        self.buffers: dict[str, str] = {}

    def var(self, name: str) -> str:
        if name not in self.vars:
            self.vars[name] = identifier(name, self.taken)
        return self.vars[name]

    def buffer(self, name: str) -> str:
        if name not in self.buffers:
            self.buffers[name] = identifier(name, self.taken)
        return self.buffers[name]

    def fresh(self, hint: str) -> str:
        return identifier(hint, self.taken)


def float_literal(value: float, dtype: str) -> str:
    """An exact C literal for a float of `dtype` (special values by their bit patterns)."""
    if dtype == "float16":
        bits = int(np.array(value, dtype=np.float16).view(np.uint16))
        return f"__ushort_as_half((unsigned short){bits:#06x})"
    if dtype == "float32":
        v = float(np.float32(value))
        if math.isfinite(v):
            return f"{v!r}f"
        return f"__int_as_float({struct.unpack('<i', struct.pack('<f', v))[0]})"
    v = float(value)
    if math.isfinite(v):
        return repr(v)
    return f"__longlong_as_double({struct.unpack('<q', struct.pack('<d', v))[0]}LL)"


def _int_literal(value: int, dtype: str, wide: bool) -> str:
    value = int(value)
    if dtype == "int64" and (wide or not -2**31 <= value < 2**31):
        return f"{value}LL" if value > -2**63 else "(-9223372036854775807LL - 1)"
    if dtype == "int32" and value == -2**31:
        return "(-2147483647 - 1)"
    if is_unsigned(dtype):
        return f"(({ctype(dtype)}){value}ull)"
    return str(value) if dtype in ("int32", "int64") else f"(({ctype(dtype)}){value})"


class ExprRenderer:
    def __init__(self, buffers: dict[str, L.Buffer], wide: bool) -> None:
        self.buffers = buffers
        self.wide = wide
        self.index_type = "long long" if wide else "int"
        self.names = Names()
        self.lane_vars: dict[str, str] = {}  # loop variable -> C literal, inside a float4 lane
        self.lane_loads: dict[L.Load, str] = {}  # a vector load -> its lane of the float4 temporary
        self.aligned: set[str] = set()  # parameters read or written as float4 (16-byte aligned)
        self.wmma: set[str] = set()  # parameters with WMMA windows (32-byte aligned)
        self.ranges: dict[str, A.Interval] = {}  # loop-variable ranges, maintained by the statement renderer

    def type_of(self, e: L.Expr) -> str:
        if e.dtype == L.INDEX and not self.wide and A.pure_index(e):
            return "int"
        return value_ctype(e.dtype)

    # ------------------------------------------------------------ memory

    def offset(self, name: str, indices: tuple[L.Expr, ...]) -> str:
        buf = self.buffers.get(name)
        if buf is None:
            raise CodegenError(f"access to unknown buffer {name}")
        if buf.scope in L.FRAGMENT_SCOPES:
            raise CodegenError(f"fragment {name} is accessed element-wise; only WMMA statements may use it")
        if len(indices) != len(buf.shape):
            raise CodegenError(f"buffer {name} has rank {len(buf.shape)}, indexed with {len(indices)} indices")
        terms = []
        stride = 1
        for idx, n in zip(reversed(indices), reversed(buf.shape)):
            if idx.dtype != L.INDEX:
                raise CodegenError(f"index into {name} has dtype {idx.dtype}; indices are {L.INDEX}")
            if not (isinstance(idx, L.Const) and idx.value == 0):
                text = self.expr(idx)
                terms.append(text if stride == 1 else f"{text} * {_int_literal(stride, L.INDEX, self.wide)}")
            stride *= n
        return " + ".join(reversed(terms)) or "0"

    def access(self, name: str, indices: tuple[L.Expr, ...]) -> str:
        return f"{self.names.buffer(name)}[{self.offset(name, indices)}]"

    # ------------------------------------------------------------ expressions

    def expr(self, e: L.Expr) -> str:
        method: Callable[[L.Expr], str] | None = getattr(self, f"_{type(e).__name__}", None)
        if method is None:
            raise CodegenError(f"the CUDA backend cannot compile {type(e).__name__} expressions")
        return method(e)

    def _Const(self, e: L.Const) -> str:
        if e.dtype == "bool":
            return "true" if e.value else "false"
        if e.dtype == "float16":  # held in float32 (tilec.ir.elementwise._to)
            return float_literal(float(e.value), "float32")
        if is_float(e.dtype):
            return float_literal(float(e.value), e.dtype)
        ctype(e.dtype)
        return _int_literal(int(e.value), e.dtype, self.wide)

    def _Var(self, e: L.Var) -> str:
        if e.name in self.lane_vars:
            return self.lane_vars[e.name]
        if e.name not in self.names.vars:
            raise CodegenError(f"loop variable '{e.name}' used outside its loop")
        return self.names.vars[e.name]

    def _Load(self, e: L.Load) -> str:
        if e in self.lane_loads:
            return self.lane_loads[e]
        text = self.access(e.buffer, e.indices)
        return f"__half2float({text})" if holds_half(self.buffers[e.buffer]) else text

    def stored(self, buf: L.Buffer, value: L.Expr) -> str:
        """`value` as `buf`'s memory holds it: a float16 value rounded once to __half."""
        if not holds_half(buf):
            return self.expr(value)
        if isinstance(value, L.Cast) and value.dtype == "float16":  # the conversion itself rounds to __half
            return self._half(value.a)
        return f"__float2half_rn({self.expr(value)})"

    def _half(self, e: L.Expr) -> str:
        """The __half nearest `e`'s value (one rounding from any type)."""
        a, src = self.expr(e), e.dtype
        if src == "float64":
            return f"__double2half({a})"
        if src in ("int32", "int64"):
            return f"__{'ll' if src == 'int64' else 'int'}2half_rn({a})"
        if src in ("int8", "int16"):
            return f"__short2half_rn((short)({a}))"
        if is_unsigned(src):
            return f"__ull2half_rn((unsigned long long)({a}))"
        return f"__float2half_rn((float)({a}))"  # float32, float16 (a float in registers), bool

    def _Not(self, e: L.Not) -> str:
        return f"(!{self.expr(e.a)})"

    def _Select(self, e: L.Select) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"

    def _Cmp(self, e: L.Cmp) -> str:
        if e.a.dtype != e.b.dtype:
            raise CodegenError(f"operands of {e.op} disagree: {e.a.dtype} and {e.b.dtype}")
        return f"({self.expr(e.a)} {_CMP[e.op]} {self.expr(e.b)})"

    def _Bin(self, e: L.Bin) -> str:
        dt = e.a.dtype
        if e.b.dtype != dt:
            raise CodegenError(f"operands of {e.op} disagree: {e.a.dtype} and {e.b.dtype}")
        if e.op in ("and", "or"):
            op = ("&&" if e.op == "and" else "||") if dt == "bool" else ("&" if e.op == "and" else "|")
            return f"({self.expr(e.a)} {op} {self.expr(e.b)})"
        if e.op == "xor":
            return f"(({ctype(dt)})({self.expr(e.a)} ^ {self.expr(e.b)}))"
        if is_float(dt):
            return float_bin(e.op, self.expr(e.a), self.expr(e.b))
        if dt == "bool":
            raise CodegenError(f"operation {e.op} is not defined on bool")
        return self._int_bin(e)

    def _int_bin(self, e: L.Bin) -> str:
        t = self.type_of(e)
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in ("add", "sub", "mul"):
            if e.dtype == L.INDEX:
                return f"({a} {ARITH[e.op]} {b})"
            # wrapping arithmetic, as numpy (and LLVM's plain add/mul) do; signed overflow is UB in C
            return f"(({t})((unsigned long long)({a}) {ARITH[e.op]} (unsigned long long)({b})))"
        if e.op in ("max", "min"):
            return f"tilec_i{e.op}<{t}>({a}, {b})"
        if e.op in ("shl", "shr"):
            return f"tilec_{e.op}<{t}>({a}, {b})"
        if e.op in ("div", "mod") and is_unsigned(e.dtype):
            return f"tilec_u{e.op}<{t}>({a}, {b})"
        if e.op in ("div", "mod"):
            if isinstance(e.b, L.Const) and int(e.b.value) > 0 and self._nonnegative(e.a):
                return f"({a} {'/' if e.op == 'div' else '%'} {b})"
            return f"tilec_floor{e.op}<{t}>({a}, {b})"
        raise CodegenError(f"unknown integer operation {e.op}")

    def _nonnegative(self, e: L.Expr) -> bool:
        iv = A.interval(e, self.ranges)
        return iv is not None and iv[0] >= 0

    def _Cast(self, e: L.Cast) -> str:
        src, dst = e.a.dtype, e.dtype
        if src == dst:
            return self.expr(e.a)
        a = self.expr(e.a)
        if dst == "bool":
            return f"({a} != 0)"
        if dst == "float16":  # rounded, and held in float32
            return f"__half2float({self._half(e.a)})"
        if is_float(src) and is_unsigned(dst):  # negative values wrap through int64, as numpy's astype
            if dst == "uint64":
                return f"tilec_f2u64((double)({a}))"
            return f"(({ctype(dst)})(long long)({a}))"
        return f"(({self.type_of(e)})({a}))"

    def _Call(self, e: L.Call) -> str:
        if not is_float(e.dtype):
            return self._int_call(e)
        args = [self.expr(a) for a in e.args]
        return float_call(e.func, args, "float" if e.dtype in ("float16", "float32") else "double")

    def _int_call(self, e: L.Call) -> str:
        t = self.type_of(e)
        args = [self.expr(a) for a in e.args]
        if e.func == "abs":
            return f"tilec_iabs<{t}>({args[0]})"
        if e.func == "relu":
            return f"tilec_imax<{t}>({args[0]}, ({t})0)"
        if e.func in ("max", "min"):
            return f"tilec_i{e.func}<{t}>({args[0]}, {args[1]})"
        if e.func == "pow":
            return f"tilec_ipow<{t}>({args[0]}, {args[1]})"
        if e.func in ("floor", "ceil"):
            return args[0]
        raise CodegenError(f"builtin {e.func} needs a float argument")

    # ------------------------------------------------------------ float4 loops

    def try_float4(self, loop: L.For, emit: Callable[[str], None]) -> bool:
        """Emit `loop` (vectorized) with float4 accesses if it qualifies; False (nothing emitted) if not."""
        plan = _float4_plan(loop, self.buffers)
        if plan is None:
            return False
        loads, stores = plan
        c0 = int(loop.begin.value)  # type: ignore[union-attr]
        emit("{  // 4 float32 lanes: 128-bit accesses")
        temps: dict[L.Load, str] = {}
        for ld in loads:
            temps[ld] = self.names.fresh(f"{ld.buffer}_v4")
            self.lane_vars[loop.var] = _int_literal(c0, L.INDEX, self.wide)
            emit(f"  const float4 {temps[ld]} = *reinterpret_cast<const float4*>(&{self.access(ld.buffer, ld.indices)});")
        for st in stores:
            self.lane_vars[loop.var] = _int_literal(c0, L.INDEX, self.wide)
            target = f"&{self.access(st.buffer, st.indices)}"
            lanes = []
            for lane in range(4):
                self.lane_vars[loop.var] = _int_literal(c0 + lane, L.INDEX, self.wide)
                self.lane_loads = {ld: f"{temps[ld]}.{_LANES[lane]}" for ld in loads}
                lanes.append(self.expr(st.value))
            self.lane_loads = {}
            emit(f"  *reinterpret_cast<float4*>({target}) = make_float4({', '.join(lanes)});")
        self.lane_vars.pop(loop.var, None)
        self.aligned.update(ld.buffer for ld in loads)
        self.aligned.update(st.buffer for st in stores)
        emit("}")
        return True


def _float4_plan(loop: L.For, buffers: dict[str, L.Buffer]) -> tuple[list[L.Load], list[L.Store]] | None:
    """The loads and stores of a qualifying 4-lane float32 loop, or None.

    Qualifies: extent 4 from a constant; a body of stores only, each to a float32 global or
    shared buffer at a unit-stride, 16-byte-aligned offset; every load that moves with the
    loop variable likewise; no buffer both stored and loaded at another offset (so doing
    each statement for all lanes at once cannot reorder a dependence between lanes).
    """
    if not (isinstance(loop.begin, L.Const) and isinstance(loop.end, L.Const)
            and int(loop.end.value) - int(loop.begin.value) == 4):
        return None
    c0 = int(loop.begin.value)
    stores = list(loop.body.stmts) if isinstance(loop.body, L.Seq) else [loop.body]
    if not all(isinstance(s, L.Store) for s in stores):
        return None
    loads: list[L.Load] = []

    def aligned_access(name: str, indices: tuple[L.Expr, ...]) -> bool:
        buf = buffers.get(name)
        if buf is None or buf.dtype != "float32" or buf.scope == "local":
            return False
        # non-affine subterms free of the lane variable (a tile's row, tid // 8) are unknown integers
        if any(_opaque_uses(i, loop.var) for i in indices):
            return False
        form = A.flat_affine(indices, buf.shape, atoms=True)
        if form is None or form[0].get(loop.var) != 1:
            return False
        rest = [c for v, c in form[0].items() if v != loop.var]
        return (form[1] + c0) % 4 == 0 and all(c % 4 == 0 for c in rest)

    for s in stores:
        assert isinstance(s, L.Store)
        if not aligned_access(s.buffer, s.indices):
            return None
        for node in walk(s.value):
            if isinstance(node, L.Load) and A.uses_vars(node, {loop.var}):
                if not aligned_access(node.buffer, node.indices):
                    return None
                if node not in loads:
                    loads.append(node)
    stored = {(s.buffer, s.indices) for s in stores}  # type: ignore[union-attr]
    if len({b for b, _ in stored}) != len(stored):
        return None
    for node in (n for s in stores for n in walk(s)):
        if isinstance(node, L.Load) and any(b == node.buffer and i != node.indices for b, i in stored):
            return None
    if len(stores) > 1 and any(isinstance(n, L.Load) and n.buffer in {b for b, _ in stored}
                               for s in stores for n in walk(s.value)):  # type: ignore[union-attr]
        return None
    return loads, stores  # type: ignore[return-value]


def _opaque_uses(e: L.Expr, var: str) -> bool:
    """Whether a non-affine subterm of index `e` (an atom of cuda_analysis.affine) uses `var`."""
    if isinstance(e, (L.Var, L.Const)):
        return False
    if isinstance(e, L.Bin) and e.op in ("add", "sub"):
        return _opaque_uses(e.a, var) or _opaque_uses(e.b, var)
    if isinstance(e, L.Bin) and e.op == "mul":
        if isinstance(e.a, L.Const):
            return _opaque_uses(e.b, var)
        if isinstance(e.b, L.Const):
            return _opaque_uses(e.a, var)
    return A.uses_vars(e, {var})
