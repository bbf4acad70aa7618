"""The WMMA statements of the loop IR (tilec/ir/loop.py) as ``nvcuda::wmma`` calls.

Requires fragments allocated with the FRAGMENT_SCOPES and windows that follow CUDA's rules
(32-byte-aligned first element, leading dimension a multiple of 16 bytes); a window whose
alignment cannot be proven from its affine form is a CodegenError, never a misaligned access.
Guarantees: the text of one statement; `ExprRenderer.wmma` collects the parameters whose
base address must be 32-byte aligned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tilec.codegen.cuda import analysis as A
from tilec.errors import CodegenError
from tilec.ir import loop as L

if TYPE_CHECKING:
    from tilec.codegen.cuda.expr import ExprRenderer

_NS = "nvcuda::wmma"
_FRAGMENT = {"wmma.matrix_a": ("matrix_a", "float16"), "wmma.matrix_b": ("matrix_b", "float16"),
             "wmma.accumulator": ("accumulator", "float32")}


def fragment_declaration(buf: L.Buffer, name: str) -> str:
    role, dtype = _FRAGMENT[buf.scope]
    if buf.dtype != dtype or len(buf.shape) < 2 or buf.shape[-2:] != (16, 16):
        raise CodegenError(f"fragment {buf.name} ({buf.scope}) must be {dtype}[..., 16, 16]; "
                           f"got {buf.dtype}{list(buf.shape)}")
    m, n, k = L.WMMA_SHAPE
    if role == "accumulator":
        t = f"{_NS}::fragment<{_NS}::accumulator, {m}, {n}, {k}, float>"
    else:
        t = f"{_NS}::fragment<{_NS}::{role}, {m}, {n}, {k}, __half, {_NS}::row_major>"
    dims = "".join(f"[{d}]" for d in buf.shape[:-2])
    return f"{t} {name}{dims};"


def render_wmma(s: L.Stmt, exprs: ExprRenderer) -> str:
    if isinstance(s, L.WmmaFill):
        _fragment(exprs, s.frag, s.index, "wmma.accumulator")
        if s.value.dtype != "float32":
            raise CodegenError(f"wmma fill of {s.frag} takes a float32 value; got {s.value.dtype}")
        return f"{_NS}::fill_fragment({_frag_ref(exprs, s.frag, s.index)}, {exprs.expr(s.value)});"
    if isinstance(s, L.WmmaLoad):
        scope = exprs.buffers[s.frag].scope if s.frag in exprs.buffers else ""
        _fragment(exprs, s.frag, s.index, scope if scope in L.FRAGMENT_SCOPES else "wmma.matrix_a")
        dtype = _FRAGMENT[scope][1]
        ptr, ld = _window(exprs, s.buffer, s.origin, dtype)
        layout = f", {_NS}::mem_row_major" if scope == "wmma.accumulator" else ""
        return f"{_NS}::load_matrix_sync({_frag_ref(exprs, s.frag, s.index)}, {ptr}, {ld}{layout});"
    if isinstance(s, L.WmmaMma):
        _fragment(exprs, s.acc, s.acc_index, "wmma.accumulator")
        _fragment(exprs, s.a, s.a_index, "wmma.matrix_a")
        _fragment(exprs, s.b, s.b_index, "wmma.matrix_b")
        acc = _frag_ref(exprs, s.acc, s.acc_index)
        return f"{_NS}::mma_sync({acc}, {_frag_ref(exprs, s.a, s.a_index)}, {_frag_ref(exprs, s.b, s.b_index)}, {acc});"
    if isinstance(s, L.WmmaStore):
        _fragment(exprs, s.frag, s.index, "wmma.accumulator")
        ptr, ld = _window(exprs, s.buffer, s.origin, "float32")
        return f"{_NS}::store_matrix_sync({ptr}, {_frag_ref(exprs, s.frag, s.index)}, {ld}, {_NS}::mem_row_major);"
    raise CodegenError(f"not a WMMA statement: {type(s).__name__}")


def _fragment(exprs: ExprRenderer, name: str, index: tuple[L.Expr, ...], scope: str) -> None:
    buf = exprs.buffers.get(name)
    if buf is None or buf.scope != scope:
        got = "an unknown buffer" if buf is None else f"scope {buf.scope}"
        raise CodegenError(f"WMMA operand {name} must be a fragment of scope {scope}; it is {got}")
    if len(index) != len(buf.shape) - 2:
        raise CodegenError(f"fragment {name} needs {len(buf.shape) - 2} indices; got {len(index)}")


def _frag_ref(exprs: ExprRenderer, name: str, index: tuple[L.Expr, ...]) -> str:
    return exprs.names.buffer(name) + "".join(f"[{exprs.expr(i)}]" for i in index)


def _window(exprs: ExprRenderer, name: str, origin: tuple[L.Expr, ...], dtype: str) -> tuple[str, int]:
    """(pointer to the window's first element, leading dimension), after checking CUDA's alignment rules."""
    buf = exprs.buffers.get(name)
    if buf is None:
        raise CodegenError(f"WMMA window into unknown buffer {name}")
    if buf.dtype != dtype or len(buf.shape) < 2 or buf.scope not in ("global", "shared"):
        raise CodegenError(f"WMMA window into {name}: needs a global or shared {dtype} buffer of rank >= 2; "
                           f"got {buf.scope} {buf.dtype}{list(buf.shape)}")
    itemsize = 2 if dtype == "float16" else 4
    ld = buf.shape[-1]
    if ld * itemsize % 16 or buf.shape[-2] < 16 or ld < 16:
        raise CodegenError(f"WMMA window into {name}: the last dimension ({ld}) must be at least 16 and a "
                           f"multiple of {16 // itemsize} elements")
    form = A.flat_affine(origin, buf.shape, atoms=True)
    step = 32 // itemsize
    if form is None or form[1] % step or any(c % step for c in form[0].values()):
        raise CodegenError(f"WMMA window into {name} at {[str(o) for o in origin]}: cannot prove its first "
                           f"element is 32-byte aligned (a multiple of {step} elements)")
    if buf.scope == "global":
        exprs.wmma.add(name)
    return f"&{exprs.access(name, origin)}", ld
