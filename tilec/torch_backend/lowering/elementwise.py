"""Elementwise ATen ops: arithmetic with torch's broadcasting and type promotion, comparisons,
`where`, casts, activations and their backward formulas, constants (as lazy 0-d broadcasts).

Each op computes in its result's dtype (tensor operands are converted first, as torch's type
promotion does); comparisons compare in the operands' promoted dtype and give bool.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.fx as fx

from tilec.torch_backend.lowering.registry import argv, result, tile
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, convert, literal

aten = torch.ops.aten


def arguments(node: fx.Node) -> dict[str, Any]:
    """The node's arguments by their schema names (defaults filled in)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        raise Unsupported(f"{node.target} has no schema")
    out: dict[str, Any] = {}
    for i, a in enumerate(schema.arguments):
        if i < len(node.args):
            out[a.name] = argv(node)[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


def operands(p: ProgramWriter, args: list[Any], dtype: torch.dtype) -> tuple[list[str], list[Value]]:
    """Each argument as an expression in `dtype` (tensors converted where needed, integer constants
    written as float literals in a float op), and the tensors."""
    exprs, values = [], []
    for a in args:
        if isinstance(a, fx.Node):
            v = p.cast(p.tensor(a), dtype)
            values.append(v)
            exprs.append(p.elementwise(v))
        else:
            if isinstance(a, float) and not dtype.is_floating_point:
                raise Unsupported(f"float constant {a} in a {dtype} op")
            if dtype.is_floating_point and isinstance(a, int) and not isinstance(a, bool):
                a = float(a)  # an int literal in a float op: -8 / 6 is -1.33 (Tile divides two ints as ints)
            exprs.append(literal(a))
    return exprs, values


def pointwise(p: ProgramWriter, node: fx.Node, template: str, args: list[Any],
              compare_in: torch.dtype | None = None) -> Value:
    """`template` ({0}, {1}, ... the arguments) computed in the result's dtype, or for a
    comparison (a bool result) on operands converted to `compare_in`."""
    shape, dtype = result(node)
    exprs, values = operands(p, args, compare_in or dtype)
    expr = template.format(*[f"({e})" for e in exprs])
    return p.let(expr if compare_in is not None else typed(expr, dtype, values), shape, dtype, *values)


def typed(expr: str, dtype: torch.dtype, values: list[Value]) -> str:
    """`expr` (over `values` and literals) as a `dtype` expression: Tile types a literal-only
    expression by its literals (int32, float64) and bool or small-integer arithmetic and literals
    as int32, so those are converted to the node's dtype (as torch's result is)."""
    return convert(expr, dtype) if not values or dtype not in _CLOSED else expr


#: dtypes whose Tile arithmetic stays in the dtype (with literals too)
_CLOSED = (torch.float32, torch.float64, torch.int32, torch.int64)


def promoted(node: fx.Node, *args: Any) -> torch.dtype:
    """torch's promoted dtype of the tensor/number arguments (for comparisons)."""
    vals = [a.meta["val"] if isinstance(a, fx.Node) else a for a in args]
    return torch.result_type(*vals) if len(vals) == 2 else vals[0].dtype


def _binary(template: str) -> Any:
    def rule(p: ProgramWriter, node: fx.Node) -> Value:
        a = arguments(node)
        x, y = a["self"], a["other"]
        alpha = a.get("alpha", 1)
        if alpha != 1:  # (add, sub: other * alpha; rsub: other - self * alpha)
            scaled = "{0}" if node.target in (aten.rsub.Scalar, aten.rsub.Tensor) else "{1}"
            return pointwise(p, node, template.replace(scaled, f"({scaled} * {literal(alpha)})"), [x, y])
        return pointwise(p, node, template, [x, y])
    return rule


for _op, _t in [(aten.add.Tensor, "{0} + {1}"), (aten.add.Scalar, "{0} + {1}"), (aten.sub.Tensor, "{0} - {1}"),
                (aten.sub.Scalar, "{0} - {1}"), (aten.mul.Tensor, "{0} * {1}"), (aten.mul.Scalar, "{0} * {1}"),
                (aten.div.Tensor, "{0} / {1}"), (aten.div.Scalar, "{0} / {1}"),
                (aten.maximum.default, "max({0}, {1})"), (aten.minimum.default, "min({0}, {1})"),
                (aten.pow.Tensor_Tensor, "pow({0}, {1})"), (aten.rsub.Scalar, "{1} - {0}"),
                (aten.rsub.Tensor, "{1} - {0}"), (aten.bitwise_and.Tensor, "{0} & {1}"),
                (aten.bitwise_or.Tensor, "{0} | {1}"), (aten.logical_and.default, "as_bool({0}) & as_bool({1})"),
                (aten.logical_or.default, "as_bool({0}) | as_bool({1})")]:
    tile(_op)(_binary(_t))


def _compare(symbol: str) -> Any:
    def rule(p: ProgramWriter, node: fx.Node) -> Value:
        a = arguments(node)
        return pointwise(p, node, "{0} " + symbol + " {1}", [a["self"], a["other"]], promoted(node, a["self"], a["other"]))
    return rule


for _name, _sym in [("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")]:
    tile(getattr(aten, _name).Scalar, getattr(aten, _name).Tensor)(_compare(_sym))


_FLOAT_UNARY = {aten.exp.default: "exp({0})", aten.log.default: "log({0})", aten.sqrt.default: "sqrt({0})",
                aten.rsqrt.default: "1.0 / sqrt({0})", aten.tanh.default: "tanh({0})",
                aten.sigmoid.default: "sigmoid({0})", aten.erf.default: "erf({0})", aten.sin.default: "sin({0})",
                aten.cos.default: "cos({0})", aten.reciprocal.default: "1.0 / {0}",
                aten.log1p.default: "log(1.0 + {0})", aten.expm1.default: "exp({0}) - 1.0",
                aten.silu.default: "{0} * sigmoid({0})"}
_UNARY = {aten.neg.default: "-{0}", aten.relu.default: "relu({0})", aten.abs.default: "abs({0})",
          aten.bitwise_not.default: "~{0}", aten.logical_not.default: "as_bool({0}) == 0",
          aten.clone.default: "{0}", aten.alias.default: "{0}", aten.detach.default: "{0}",
          aten.lift_fresh_copy.default: "{0}", aten.sign.default: "sign({0})"}
#: Tile's sign keeps a NaN (numpy's), torch's sign of NaN is 0
_FLOAT_FORMS: dict[Any, str] = {aten.sign.default: "{0} == {0} ? sign({0}) : 0.0"}


def _unary(template: str, floating: bool) -> Any:
    def rule(p: ProgramWriter, node: fx.Node) -> Value:
        x = argv(node)[0]
        _, dtype = result(node)
        if floating and not dtype.is_floating_point:
            raise Unsupported(f"{node.target} of {dtype}")
        if template == "{0}":  # a copy: the same value (SSA: nothing is written in place)
            return p.tensor(x)
        form = _FLOAT_FORMS.get(node.target, template) if dtype.is_floating_point else template
        return pointwise(p, node, form, [x])
    return rule


for _op, _t in _FLOAT_UNARY.items():
    tile(_op)(_unary(_t, True))
for _op, _t in _UNARY.items():
    tile(_op)(_unary(_t, False))


@tile(aten.pow.Tensor_Scalar)
def _pow(p: ProgramWriter, node: fx.Node) -> Value:
    x, e = argv(node)[0], argv(node)[1]
    forms = {2: "{0} * {0}", 3: "{0} * {0} * {0}", 1: "{0}", 0.5: "sqrt({0})", -1: "1.0 / {0}",
             -0.5: "1.0 / sqrt({0})"}
    return pointwise(p, node, forms.get(e, "pow({0}, " + literal(e) + ")"), [x])


@tile(aten.gelu.default)
def _gelu(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    if a.get("approximate", "none") == "tanh":
        return pointwise(p, node, "0.5 * {0} * (1.0 + tanh(0.7978845608028654 * ({0} + 0.044715 * {0} * {0} * {0})))",
                         [a["self"]])
    return pointwise(p, node, "0.5 * {0} * (1.0 + erf({0} * 0.7071067811865476))", [a["self"]])


@tile(aten.gelu_backward.default)
def _gelu_backward(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    if a.get("approximate", "none") == "tanh":
        k, c = 0.7978845608028654, 0.044715
        inner = f"{k} * ({{1}} + {c} * {{1}} * {{1}} * {{1}})"
        t = f"tanh({inner})"
        d = f"0.5 * (1.0 + {t}) + 0.5 * {{1}} * (1.0 - {t} * {t}) * {k} * (1.0 + {3 * c} * {{1}} * {{1}})"
        return pointwise(p, node, "{0} * (" + d + ")", [a["grad_output"], a["self"]])
    cdf = "0.5 * (1.0 + erf({1} * 0.7071067811865476))"
    pdf = f"exp(-0.5 * {{1}} * {{1}}) * {1 / math.sqrt(2 * math.pi)!r}"
    return pointwise(p, node, "{0} * (" + cdf + " + {1} * " + pdf + ")", [a["grad_output"], a["self"]])


#: activation gradients of (grad_output, the forward's output or input), ATen's formulas
_GRADIENTS = {aten.tanh_backward.default: "{0} * (1.0 - {1} * {1})",  # {1}: tanh's output
              aten.sigmoid_backward.default: "{0} * {1} * (1.0 - {1})",  # {1}: sigmoid's output
              aten.silu_backward.default: "{0} * sigmoid({1}) * (1.0 + {1} * (1.0 - sigmoid({1})))"}  # {1}: input


def _gradient(template: str) -> Any:
    def rule(p: ProgramWriter, node: fx.Node) -> Value:
        return pointwise(p, node, template, [argv(node)[0], argv(node)[1]])
    return rule


for _op, _t in _GRADIENTS.items():
    tile(_op)(_gradient(_t))


@tile(aten.threshold_backward.default)
def _threshold_backward(p: ProgramWriter, node: fx.Node) -> Value:
    grad, x, threshold = argv(node)[0], argv(node)[1], argv(node)[2]
    return pointwise(p, node, "{1} <= " + literal(threshold) + " ? 0 : {0}", [grad, x])


def select(p: ProgramWriter, node: fx.Node, cond: Any, if_true: Any, if_false: Any) -> Value:
    """`cond ? if_true : if_false` in the node's dtype (torch.where's broadcasting)."""
    shape, dtype = result(node)
    c = p.tensor(cond)
    exprs, values = operands(p, [if_true, if_false], dtype)
    return p.let(typed(f"as_bool({p.elementwise(c)}) ? {exprs[0]} : {exprs[1]}", dtype, values), shape, dtype, c,
                 *values)


@tile(aten.where.self)
def _where(p: ProgramWriter, node: fx.Node) -> Value:
    return select(p, node, argv(node)[0], argv(node)[1], argv(node)[2])


@tile(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(p: ProgramWriter, node: fx.Node) -> Value:
    return select(p, node, argv(node)[1], argv(node)[2], argv(node)[0])


@tile(aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_min.Tensor, aten.clamp_max.default,
      aten.clamp_max.Tensor)
def _clamp(p: ProgramWriter, node: fx.Node) -> Value:
    """min(max(x, lo), hi) as torch's (hi wins where lo > hi; Tile's max and min keep a NaN, as
    torch's clamp does); the bounds are numbers or tensors."""
    a = arguments(node)
    lo = a.get("min") if node.target in (aten.clamp.default, aten.clamp.Tensor) else None
    hi = a.get("max") if node.target in (aten.clamp.default, aten.clamp.Tensor) else None
    if node.target in (aten.clamp_min.default, aten.clamp_min.Tensor):
        lo = a["min"]
    if node.target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        hi = a["max"]
    args, expr = [a["self"]], "{0}"
    if lo is not None:
        args.append(lo)
        expr = f"max({expr}, {{{len(args) - 1}}})"
    if hi is not None:
        args.append(hi)
        expr = f"min({expr}, {{{len(args) - 1}}})"
    return pointwise(p, node, expr, args)


@tile(aten._to_copy.default, aten.to.dtype)
def _to_copy(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    _, dtype = result(node)
    x = p.tensor(a["self"])
    if a.get("device") not in (None, torch.device("cpu")):
        raise Unsupported(f"a copy to {a['device']}")
    return p.cast(x, dtype)


def constant(p: ProgramWriter, node: fx.Node, value: Any) -> Value:
    """A tensor of the node's shape filled with `value`: a lazy 0-d broadcast."""
    shape, dtype = result(node)
    return p.let(convert(literal(value), dtype), shape, dtype)


@tile(aten.scalar_tensor.default)
def _scalar_tensor(p: ProgramWriter, node: fx.Node) -> Value:
    return constant(p, node, argv(node)[0])


@tile(aten.full.default, aten.full_like.default)
def _full(p: ProgramWriter, node: fx.Node) -> Value:
    return constant(p, node, argv(node)[1])


@tile(aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default)
def _zeros(p: ProgramWriter, node: fx.Node) -> Value:
    return constant(p, node, 0)


@tile(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def _ones(p: ProgramWriter, node: fx.Node) -> Value:
    return constant(p, node, 1)
