"""Reverse-mode automatic differentiation: a Tile program in, its gradient program out.

`derive(program, wrt)` needs a checked tensor-IR program; it returns a program whose inputs
are the forward inputs followed by one output gradient ``D<Output>`` per forward output and
whose outputs are ``D<Name>`` for each name in `wrt`. The derived program recomputes the
forward statements first, then runs the backward statements (PlaidML's rules):

- ``O[o] = +(A[a] * B[b])`` gives ``DA[a: dims(A)] = +(DO[o] * B[b])`` with the constraints
  carried over (the operand's index polynomials become the left-hand side);
- ``>`` / ``<`` give ``DI[i: dims(I)] = +(I[i] == O[o] ? DO[o])``: tied maxima all receive the
  gradient, as in PlaidML;
- elementwise statements follow the chain rule; broadcasting is undone by a contraction that
  sums over the broadcast dimensions, ``DX[x: XD] = +(G[x + XD*k])`` (``k`` runs over the
  broadcast dimension only when ``XD`` is 1), and several uses of a tensor are added up;
- ``*`` aggregation and max/min over a combination of several tensors are refused
  ("not differentiable: ..."); ``==`` combinations and comparisons have zero gradient.

Every tensor needs a symbolic shape: inputs declared without dims get fresh size symbols
(``A_D0``, ...; their rank is read from a contraction access), and a contraction whose output
sizes cannot be read from its operands must state them.

The package, in the order a derivation runs: `driver` (derive), `shapes` (every tensor's
symbolic shape, fresh names), `backward` (the gradient statements being built and each tensor's
contributions), `contraction_rules` and `elementwise_rules` (one statement's gradient),
`broadcast` (summing a gradient back to a broadcast tensor's shape), `gather` and `polyphase`
(a derived scatter rewritten as gathers; `linear_forms` is their index algebra) and `compiled`
(grad: the derived program compiled into a Function).
"""

from tilec.autodiff.compiled import grad
from tilec.autodiff.driver import derive
from tilec.autodiff.gather import gather_form
from tilec.autodiff.polyphase import polyphase_form

__all__ = ["derive", "gather_form", "grad", "polyphase_form"]
