"""The gradients through the structural intrinsics (tilec.ir.intrinsics), as PlaidML derives them.

* ``O = gather(T, I)``: ``DT = scatter(DO, I, T)`` (each gathered row's gradient added back into
  the row it came from, clamped indices included); I is integer: no gradient.
* ``O = scatter(T, I, U)``: ``DT = gather(DO, I)``; U only sizes the result: no gradient.
* ``O = reshape(T, ...)``: ``DT = reshape(DO, dims of T)``.
* ``index`` and ``shape`` depend only on shapes: zero gradient (nothing is contributed).

Requires: `g` names the whole gradient of the statement's output. Guarantees: at most one
intrinsic statement, contributed to the gradient of the differentiable argument if it is needed.
"""

from __future__ import annotations

from tilec.autodiff.backward import Backward
from tilec.ir.tensor import Intrinsic


def intrinsic_gradient(b: Backward, st: Intrinsic, g: str) -> None:
    """Add the gradient of the needed differentiable argument of `st` given `g`, its output's gradient."""
    if st.func in ("index", "shape"):
        return
    source = st.tensors[0]
    if source not in b.needs:
        return
    out = b.shapes.fresh(f"D{source}_{len(b.statements)}")
    if st.func == "gather":
        rule = Intrinsic(out, "scatter", (g, st.tensors[1], source))
    elif st.func == "scatter":
        rule = Intrinsic(out, "gather", (g, st.tensors[1]))
    else:
        rule = Intrinsic(out, "reshape", (g,), b.shapes.shape(source))
    b.emit(rule, source, b.shapes.shape(source))
