"""The attention gradient's second form: a backward whose softmax is shifted by the forward's saved
logsumexp, as torch's flash backward's is, in place of the maximum (see the package's docstring).

Requires: a BoundProgram and the scores chain the gradient starts with. Guarantees: a plan only for
exactly the statements the package's docstring lists, none of the elided temporaries read elsewhere.
"""

from __future__ import annotations

from tilec.ir import tensor as T
from tilec.ir.bounds import BoundContraction, BoundElementwise, BoundProgram
from tilec.schedule.patterns.attention import ScoresChain, keepdim_reduce
from tilec.schedule.patterns.attention_backward.plan import BackwardPlan, BoundStatement, Saved, plain, plan, signature


def _unrounded(x: T.EExpr) -> T.EExpr:
    """x without an outer rounding to 16 bits (as_bfloat16(y), as_float(y, 16))."""
    if isinstance(x, T.ECall) and (x.func == "as_bfloat16" and len(x.args) == 1
                                   or x.func == "as_float" and x.args[1:] == (T.EConst(16),)):
        return x.args[0]
    return x


def _lse_copy(b: BoundStatement | None, nb: int, rows: tuple[int, ...]) -> tuple[str, tuple[int | None, ...]] | None:
    """(LSE, its axes) where b is Lse[.., s, 0] = =(LSE[..]), LSE indexed by the rows' variables in
    any order (torch keeps its logsumexp as (B, S, H) in memory)."""
    if not (isinstance(b, BoundContraction) and b.stmt.agg == "=" and b.stmt.combo == "single"
            and b.stmt.default is None and not b.guards and not b.empty and b.shape == rows):
        return None
    sig = signature(b)
    if sig is None or len(b.out_indices) != nb + 2:
        return None
    axes: list[int | None] = []
    for kind, where in sig[0]:
        if kind == "0":
            axes.append(None)
        elif kind == "o" and isinstance(where, int) and where <= nb:
            axes.append(where)
        else:
            return None
    return b.operands[0].tensor, tuple(axes)


def saved(index: int, sc: ScoresChain, bp: BoundProgram, dtypes: tuple[str, ...]) -> BackwardPlan | None:
    """The second form's plan (see the module docstring), or None."""
    stmts, nb, k = bp.statements, len(sc.batch), sc.next
    rows = bp.shapes[sc.raw][:-1] + (1,)
    copy = _lse_copy(stmts[k] if k < len(stmts) else None, nb, rows)
    view = stmts[k].output if copy is not None else None
    k += copy is not None
    e, total, p = (stmts[j] if j < len(stmts) else None for j in range(k, k + 3))
    if not (isinstance(e, BoundElementwise) and isinstance(total, BoundContraction) and isinstance(p, BoundElementwise)):
        return None
    x = _unrounded(e.stmt.expr)
    if not (isinstance(x, T.ECall) and x.func == "exp" and len(x.args) == 1 and isinstance(x.args[0], T.EBinary)
            and x.args[0].op == "-" and x.args[0].a == T.ETensor(sc.scores) and isinstance(x.args[0].b, T.ETensor)):
        return None
    if not keepdim_reduce(total, "+", e.output, sc.batch) \
            or _unrounded(p.stmt.expr) != T.EBinary("/", T.ETensor(e.output), T.ETensor(total.output)):
        return None
    lse_view = x.args[0].b.name
    if copy is None:  # the logsumexp read as it is, shaped like the rows
        if lse_view in sc.chain or bp.shapes.get(lse_view) != rows:
            return None
        copy = (lse_view, tuple(range(nb + 1)) + (None,))
    elif lse_view != view:
        return None
    k += 3
    roles: dict[str, str] = {}
    operands: dict[str, str] = {}  # do, v
    while k < len(stmts):
        role = _saved_role(stmts[k], sc, p.output, roles, operands, nb)
        if role is None or role in roles:
            break
        roles[role] = stmts[k].output
        k += 1
    written: dict[str, str] = {r: roles[r] for r in ("dq", "dk", "dv") if r in roles}
    middle = ("dp", "row", "ds") if "dq" in written or "dk" in written else ()
    if not written or set(roles) != set(written) | set(middle) or "do" not in operands:
        return None
    if bp.shapes[total.output] != rows or any(bp.shapes[roles[m]] != (rows if m == "row" else bp.shapes[sc.raw])
                                             for m in middle):
        return None
    lse, axes = copy
    if bp.dtypes[lse] not in ("float32", "float64", bp.dtypes[sc.q.tensor]):
        return None
    saved = Saved(lse=lse, axes=axes, lse_dtype=bp.dtypes[lse])
    elided = sc.chain + ((view,) if view else ()) + (e.output, total.output, p.output) + tuple(roles[r] for r in middle)
    return plan(index, k, sc, bp, dtypes, (operands["do"], operands.get("v")), written, elided, saved)


def _saved_role(b: BoundStatement, sc: ScoresChain, p: str, roles: dict[str, str], operands: dict[str, str],
                nb: int) -> str | None:
    """Which statement of the second form b is (noting dO and V in `operands` as they are met)."""
    batch = tuple(("o", i) for i in range(nb))
    row, col = ("o", nb), ("o", nb + 1)
    if isinstance(b, BoundElementwise):
        if {"dp", "row"} <= roles.keys():
            scaled = T.EBinary("*", T.ETensor(p), T.EBinary("-", T.ETensor(roles["dp"]), T.ETensor(roles["row"])))
            x = b.stmt.expr
            if isinstance(x, T.EBinary) and x.op == "*" and x.a == scaled and isinstance(x.b, T.EConst) \
                    and float(x.b.value) == sc.scale:
                return "ds"
        return None
    if not (isinstance(b, BoundContraction) and plain(b, "mul") and not b.guards and len(b.out_indices) == nb + 2):
        return None
    sig = signature(b)
    if sig is None:
        return None
    (sa, sb), (ta, tb) = sig, [a.tensor for a in b.operands]
    red = [x for x in sa + sb if x[0] == "r"]
    if len(red) != 2 or red[0] != red[1]:
        return None
    r = red[0]

    def do(name: str) -> bool:
        operands.setdefault("do", name)
        return operands["do"] == name

    for (xa, ya), (xt, yt) in (((sa, sb), (ta, tb)), ((sb, sa), (tb, ta))):
        if xt == p and xa == batch + (r, row) and ya == batch + (r, col) and do(yt):
            return "dv"
        if xt == roles.get("ds") and xa == batch + (row, r) and ya == batch + (r, col) and yt == sc.k.tensor:
            return "dq"
        if xt == roles.get("ds") and xa == batch + (r, row) and ya == batch + (r, col) and yt == sc.q.tensor:
            return "dk"
    if sa == batch + (row, r) and sb == batch + (col, r) and p not in (ta, tb) and do(ta):
        operands["v"] = tb
        return "dp"
    if b.shape[-1] == 1 and sa == sb == batch + (row, r) and {ta, tb} == {p, roles.get("dp")}:
        return "row"
    return None


__all__ = ["saved"]
