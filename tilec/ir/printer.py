"""Readable pseudo-code for loop IR (what `tilec explain --stage loop` prints)."""

from __future__ import annotations

from tilec.ir import loop as L

_BIN_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%", "and": "&&", "or": "||"}
_CMP_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def format_expr(e: L.Expr) -> str:
    if isinstance(e, L.Const):
        if e.dtype == L.INDEX or e.dtype == "bool":
            return str(e.value)
        return f"{e.value!r}:{e.dtype}"
    if isinstance(e, L.Var):
        return e.name
    if isinstance(e, L.Bin):
        if e.op in _BIN_SYMBOL:
            return f"({format_expr(e.a)} {_BIN_SYMBOL[e.op]} {format_expr(e.b)})"
        return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, L.Cmp):
        return f"({format_expr(e.a)} {_CMP_SYMBOL[e.op]} {format_expr(e.b)})"
    if isinstance(e, L.Not):
        return f"!{format_expr(e.a)}"
    if isinstance(e, L.Select):
        return f"select({format_expr(e.cond)}, {format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, L.Cast):
        return f"{e.dtype}({format_expr(e.a)})"
    if isinstance(e, L.Call):
        return f"{e.func}({', '.join(format_expr(a) for a in e.args)})"
    if isinstance(e, L.Load):
        return f"{e.buffer}[{', '.join(format_expr(i) for i in e.indices)}]"
    raise TypeError(f"not a loop-IR expression: {e!r}")


def format_stmt(s: L.Stmt, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(s, L.Store):
        return [f"{pad}{s.buffer}[{', '.join(format_expr(i) for i in s.indices)}] = {format_expr(s.value)}"]
    if isinstance(s, L.For):
        kind = "" if s.kind == "serial" else f" {s.kind}"
        head = f"{pad}for{kind} {s.var} in [{format_expr(s.begin)}, {format_expr(s.end)}):"
        return [head] + format_stmt(s.body, indent + 1)
    if isinstance(s, L.If):
        lines = [f"{pad}if {format_expr(s.cond)}:"] + format_stmt(s.then, indent + 1)
        if s.orelse is not None:
            lines += [f"{pad}else:"] + format_stmt(s.orelse, indent + 1)
        return lines
    if isinstance(s, L.Seq):
        return [line for st in s.stmts for line in format_stmt(st, indent)]
    if isinstance(s, L.Allocate):
        b = s.buffer
        head = f"{pad}allocate {b.name}: {b.dtype}{list(b.shape)} {b.scope}"
        return [head] + format_stmt(s.body, indent)
    if isinstance(s, L.Barrier):
        return [f"{pad}barrier()"]
    if isinstance(s, L.WMMA_STMTS):  # warp-collective tensor-core statements
        args = ", ".join(_operand(v) for v in s.__dict__.values())
        return [f"{pad}{type(s).__name__.replace('Wmma', 'wmma_').lower()}({args})"]
    if isinstance(s, L.TileRegion):
        return [f"{pad}tiles configured:"] + format_stmt(s.body, indent + 1)
    if isinstance(s, L.TileDot):  # an AMX block
        args = ", ".join(_operand(v) for v in (s.acc, s.acc_origin, s.a, s.a_origin, s.b, s.b_origin, s.pairs,
                                                s.fresh))
        return [f"{pad}tile_dot_{s.m}x{s.n}({args})"]
    raise TypeError(f"not a loop-IR statement: {s!r}")


def _operand(v: object) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(format_expr(e) for e in v) + "]"
    return v if isinstance(v, str) else format_expr(v)  # type: ignore[arg-type]


def format_func(f: L.PrimFunc) -> str:
    params = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.params)
    return "\n".join([f"def {f.name}({params}):"] + format_stmt(f.body, 1))
