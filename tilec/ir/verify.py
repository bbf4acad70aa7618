"""Loop-IR well-formedness: buffers exist, ranks and dtypes agree, variables are in scope.

Requires: a PrimFunc. Guarantees: raises AssertionError naming the first problem,
or returns the function unchanged. Run between stages in tests and debug mode.
"""

from __future__ import annotations

from tilec.ir import loop as L


def verify(func: L.PrimFunc) -> L.PrimFunc:
    buffers = {b.name: b for b in func.params}
    assert len(buffers) == len(func.params), f"{func.name}: duplicate parameter names"
    _stmt(func.body, buffers, set())
    return func


def _stmt(s: L.Stmt, buffers: dict[str, L.Buffer], scope: set[str]) -> None:
    if isinstance(s, L.Seq):
        for st in s.stmts:
            _stmt(st, buffers, scope)
    elif isinstance(s, L.For):
        _expr(s.begin, buffers, scope)
        _expr(s.end, buffers, scope)
        assert s.begin.dtype == L.INDEX and s.end.dtype == L.INDEX, f"loop {s.var}: bounds must be {L.INDEX}"
        _stmt(s.body, buffers, scope | {s.var})
    elif isinstance(s, L.If):
        _expr(s.cond, buffers, scope)
        assert s.cond.dtype == "bool", f"if condition has dtype {s.cond.dtype}"
        _stmt(s.then, buffers, scope)
        if s.orelse is not None:
            _stmt(s.orelse, buffers, scope)
    elif isinstance(s, L.Allocate):
        assert s.buffer.name not in buffers, f"buffer {s.buffer.name} allocated twice"
        _stmt(s.body, {**buffers, s.buffer.name: s.buffer}, scope)
    elif isinstance(s, L.Store):
        buf = buffers.get(s.buffer)
        assert buf is not None, f"store to unknown buffer {s.buffer}"
        assert len(s.indices) == len(buf.shape), f"store to {s.buffer}: rank {len(buf.shape)}, {len(s.indices)} indices"
        assert s.value.dtype == buf.dtype, f"store of {s.value.dtype} into {s.buffer} ({buf.dtype})"
        for i in s.indices:
            _expr(i, buffers, scope)
        _expr(s.value, buffers, scope)
    elif not isinstance(s, L.Barrier):
        raise AssertionError(f"unknown statement {type(s).__name__}")


def _expr(e: L.Expr, buffers: dict[str, L.Buffer], scope: set[str]) -> None:
    if isinstance(e, L.Var):
        assert e.name in scope, f"variable {e.name} used outside its loop"
    elif isinstance(e, L.Load):
        buf = buffers.get(e.buffer)
        assert buf is not None, f"load from unknown buffer {e.buffer}"
        assert len(e.indices) == len(buf.shape), f"load from {e.buffer}: rank {len(buf.shape)}, {len(e.indices)} indices"
        assert e.dtype == buf.dtype, f"load from {e.buffer} typed {e.dtype}, buffer is {buf.dtype}"
        for i in e.indices:
            _expr(i, buffers, scope)
            assert i.dtype == L.INDEX, f"index into {e.buffer} has dtype {i.dtype}"
    elif isinstance(e, (L.Bin, L.Cmp)):
        _expr(e.a, buffers, scope)
        _expr(e.b, buffers, scope)
        assert e.a.dtype == e.b.dtype, f"{e.op}: operand dtypes {e.a.dtype} and {e.b.dtype} differ"
    elif isinstance(e, L.Select):
        for x in (e.cond, e.a, e.b):
            _expr(x, buffers, scope)
        assert e.cond.dtype == "bool" and e.a.dtype == e.b.dtype, "select: bad operand dtypes"
    elif isinstance(e, (L.Cast, L.Not)):
        _expr(e.a, buffers, scope)
    elif isinstance(e, L.Call):
        for a in e.args:
            _expr(a, buffers, scope)
