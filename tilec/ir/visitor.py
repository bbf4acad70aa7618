"""One traversal of loop IR, derived from the node definitions, so every pass sees every node kind.

Requires: the nodes are the frozen dataclasses of :mod:`tilec.ir.loop` (the members of `Expr`
and `Stmt`, and `PrimFunc`). A field holds children when its annotation is an expression or
statement type, optionally ``| None``, or a tuple of them; Buffers and plain values (names,
dtypes, operators, loop kinds) are leaves. A field may not mix the two (checked when a class
is first seen).

Guarantees:
- `children(node)`: the nodes directly inside `node`, in field order (a tuple's items in
  order, None left out); a value that is not a loop-IR node has none. The child fields are
  read off each class's annotations once. A node class added to tilec.ir.loop is traversed
  without any change here.
- `walk(node)`: `node` and every node under it, statements and expressions, pre-order.
- `Visitor.visit` calls ``visit_<Class>`` for the node's class where the subclass defines it,
  else `visit_expr` or `visit_stmt` (by the kind of node), whose default visits the children.
- `Rewriter.rewrite` likewise calls ``rewrite_<Class>``, else `rewrite_expr` / `rewrite_stmt`,
  whose default (`rebuild`) rebuilds the node from its rewritten children and returns the
  *same object* when no child changed, so `is` tells a caller whether anything changed.
- `map_children` / `map_child_stmts` rebuild one node with a function applied to its children
  (all of them / its statements only), with the same sharing guarantee.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any, ClassVar, ForwardRef, TypeGuard, Union, get_args, get_origin, get_type_hints

from tilec.ir import loop as L

Node = Any  # an L.Expr, an L.Stmt or an L.PrimFunc


def _resolve(ref: object) -> type:
    return getattr(L, ref.__forward_arg__) if isinstance(ref, ForwardRef) else ref  # type: ignore[return-value]


EXPR_CLASSES: tuple[type, ...] = tuple(_resolve(t) for t in get_args(L.Expr))
STMT_CLASSES: tuple[type, ...] = tuple(_resolve(t) for t in get_args(L.Stmt))
NODE_CLASSES: tuple[type, ...] = EXPR_CLASSES + STMT_CLASSES + (L.PrimFunc,)


def is_expr(node: object) -> TypeGuard[L.Expr]:
    return isinstance(node, EXPR_CLASSES)


def is_stmt(node: object) -> TypeGuard[L.Stmt]:
    return isinstance(node, STMT_CLASSES)


# ------------------------------------------------------------------ child fields, once per class

class _Field:
    """A field of a node class that holds children: one node (or None), or a tuple of nodes."""

    __slots__ = ("name", "many", "stmts")

    def __init__(self, name: str, many: bool, stmts: bool) -> None:
        self.name, self.many, self.stmts = name, many, stmts


def _field_of(cls: type, name: str, hint: object) -> _Field | None:
    many = get_origin(hint) is tuple
    element = get_args(hint)[0] if many else hint
    members = get_args(element) if get_origin(element) is Union else (element,)
    members = tuple(m for m in members if m is not type(None))
    nodes = [m in NODE_CLASSES for m in members]
    if not any(nodes):
        return None
    if not all(nodes):
        raise TypeError(f"field {cls.__name__}.{name} mixes loop-IR nodes and plain values ({hint}); "
                        f"a field must hold one or the other for the traversal to know its children")
    return _Field(name, many, all(m in STMT_CLASSES for m in members))


_FIELDS: dict[type, tuple[_Field, ...]] = {}
_ALL_FIELDS: dict[type, tuple[str, ...]] = {}


def _child_fields(cls: type) -> tuple[_Field, ...]:
    found = _FIELDS.get(cls)
    if found is None:
        if cls in NODE_CLASSES:
            hints = get_type_hints(cls, vars(L))
            names = tuple(f.name for f in fields(cls))
            found = tuple(x for x in (_field_of(cls, n, hints[n]) for n in names) if x is not None)
            _ALL_FIELDS[cls] = names
        else:
            found = ()  # a Buffer, a name, a tuple...: a leaf
        _FIELDS[cls] = found
    return found


def children(node: Node) -> tuple[Node, ...]:
    """The nodes directly inside `node` (see the module doc)."""
    return _children(node, statements_only=False)


def child_stmts(node: Node) -> tuple[L.Stmt, ...]:
    """The statements directly inside `node` (a Seq's, a loop's body, an if's arms)."""
    return _children(node, statements_only=True)  # type: ignore[return-value]


def _children(node: Node, statements_only: bool) -> tuple[Node, ...]:
    out: list[Node] = []
    for f in _child_fields(type(node)):
        if statements_only and not f.stmts:
            continue
        value = getattr(node, f.name)
        if f.many:
            out.extend(value)
        elif value is not None:
            out.append(value)
    return tuple(out)


def walk(node: Node) -> Iterator[Node]:
    """`node` and every node under it (statements and expressions), pre-order."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(children(n)))


def _rebuild(node: Node, fn: Callable[[Node], Node], stmts_only: bool) -> Node:
    changed: dict[str, object] = {}
    for f in _child_fields(type(node)):
        if stmts_only and not f.stmts:
            continue
        old = getattr(node, f.name)
        if f.many:
            new = tuple(fn(x) for x in old)
            if any(a is not b for a, b in zip(new, old)):
                changed[f.name] = new
        elif old is not None:
            one = fn(old)
            if one is not old:
                changed[f.name] = one
    if not changed:
        return node
    return type(node)(*(changed[n] if n in changed else getattr(node, n) for n in _ALL_FIELDS[type(node)]))


def map_children(node: Node, fn: Callable[[Node], Node]) -> Node:
    """`node` with `fn` applied to each child (the same object if `fn` returned every child itself)."""
    return _rebuild(node, fn, False)


def map_child_stmts(node: Node, fn: Callable[[L.Stmt], L.Stmt]) -> Node:
    """`node` with `fn` applied to each child statement, expressions kept (the same object if none changed)."""
    return _rebuild(node, fn, True)


# ------------------------------------------------------------------ dispatch


def _method(owner: Any, cls: type, prefix: str) -> Callable[[Any, Node], Any]:
    """The method of `owner` (a Visitor or Rewriter subclass) for nodes of class `cls`:
    ``<prefix>_<Class>``, else the fallback for its kind of node; remembered in owner._dispatch."""
    if cls in EXPR_CLASSES:
        fallback = f"{prefix}_expr"
    elif cls in STMT_CLASSES:
        fallback = f"{prefix}_stmt"
    else:
        fallback = "generic_visit" if prefix == "visit" else "rebuild"
    method = getattr(owner, f"{prefix}_{cls.__name__}", None) or getattr(owner, fallback)
    owner._dispatch[cls] = method
    return method  # type: ignore[no-any-return]


class Visitor:
    """Visits loop IR: override ``visit_<Class>`` per node kind, or `visit_expr` / `visit_stmt`
    for all the expressions / statements without one of their own. `generic_visit` visits the
    children (call it from an override to go on below the node)."""

    _dispatch: ClassVar[dict[type, Callable[[Any, Node], None]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = {}  # per subclass: methods differ

    def visit(self, node: Node) -> None:
        cls = type(node)
        (self._dispatch.get(cls) or _method(type(self), cls, "visit"))(self, node)

    def generic_visit(self, node: Node) -> None:
        for c in children(node):
            self.visit(c)

    def visit_expr(self, e: L.Expr) -> None:
        self.generic_visit(e)

    def visit_stmt(self, s: L.Stmt) -> None:
        self.generic_visit(s)


class Rewriter:
    """Rewrites loop IR bottom-up or top-down as the overrides choose: override ``rewrite_<Class>``
    per node kind, or `rewrite_expr` / `rewrite_stmt` for all the expressions / statements without
    one of their own. `rebuild` rebuilds a node from its rewritten children, returning the node
    itself when none changed (call it from an override to rewrite below the node)."""

    _dispatch: ClassVar[dict[type, Callable[[Any, Node], Node]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._dispatch = {}

    def rewrite(self, node: Node) -> Node:
        cls = type(node)
        return (self._dispatch.get(cls) or _method(type(self), cls, "rewrite"))(self, node)

    def rebuild(self, node: Node) -> Node:
        return _rebuild(node, self.rewrite, False)

    def rewrite_expr(self, e: L.Expr) -> L.Expr:
        return self.rebuild(e)

    def rewrite_stmt(self, s: L.Stmt) -> L.Stmt:
        return self.rebuild(s)


__all__ = ["EXPR_CLASSES", "NODE_CLASSES", "STMT_CLASSES", "Rewriter", "Visitor", "child_stmts", "children",
           "is_expr", "is_stmt", "map_child_stmts", "map_children", "walk"]
