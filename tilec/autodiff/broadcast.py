"""Undoing broadcasting: the sum of a gradient over the dimensions its tensor was broadcast along.

An elementwise statement may read a tensor of fewer dims, or of dims of size 1, than its
result; the tensor's gradient is then the result's gradient summed over those dims.

Requires: `dst` broadcasts to `src_shape` (each dim of `dst` is 1 or the matching dim of
`src_shape`, which may have more leading dims). Guarantees: `unbroadcast` returns one contraction
``DX[x: dst] = +(G[j..., x + dst*k])``, named by `shapes.fresh`, that sums `src` over its leading
dims and over the dims where `dst` is 1.
"""

from __future__ import annotations

from tilec.autodiff.shapes import ONE, Shape, Shapes
from tilec.ir.tensor import Access, Contraction, IBin, IExpr, IVar


def unbroadcast(shapes: Shapes, src: str, src_shape: Shape, dst: Shape, name: str) -> Contraction:
    """The contraction summing `src` (of `src_shape`) down to `dst`, the shape of tensor `name`."""
    lead = len(src_shape) - len(dst)
    src_idx: list[IExpr] = [IVar(f"j{k}") for k in range(lead)]
    out_idx: list[IExpr] = []
    for k, d in enumerate(dst):
        x = IVar(f"x{k}")
        out_idx.append(x)
        if d == shapes.resolve(src_shape[lead + k]):
            src_idx.append(x)
        elif d == ONE:
            src_idx.append(IVar(f"k{k}"))
        else:  # d is 1 or equals the source's size; k > 0 only fits in the first case
            src_idx.append(IBin("+", x, IBin("*", d, IVar(f"k{k}"))))
    out = shapes.fresh(f"D{name}_sum")
    return Contraction(out, tuple(out_idx), dst, "+", "single", (Access(src, tuple(src_idx)),))
