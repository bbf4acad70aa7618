"""Embeddings of tilec.nn.functional: embedding, a Tile gather whose gradient is the derived scatter-add.

Requires: a float32/float64 weight of rank 2 and int64/int32 indices of any shape (0-d and empty
included) within the weight's rows. Guarantees: torch's output (the indices' shape plus the
embedding dimension) and weight gradient: padding_idx's row gets none, scale_grad_by_freq divides
each row's gradient by how often its index occurs, and max_norm renormalises the referenced rows
of `weight` in place before the lookup, as torch does; sparse=True gives torch's sparse COO
gradient (one row per looked-up index, padding entries dropped, uncoalesced), and refuses
scale_grad_by_freq in the backward as torch does. Indices out of range raise a TilecError (torch
raises IndexError).

Gradient conventions without a stop-gradient in Tile: the program also reads a detached copy V of
the weight (no gradient is asked for it). Padding rows take their value from V; rows scaled by
frequency compute ``H + F * (G - H)`` with G from W and H from V, which equals G exactly (G - H is
0) and carries F times the gradient to W. A non-finite row (G - H not 0) takes G itself, so its
gradient is not scaled.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

from tilec.nn.functional.layout import check_float
from tilec.ops.arguments import OpError
from tilec.ops.program import run_program

_INDEX_DTYPES = (torch.int64, torch.int32)


@lru_cache(maxsize=None)
def embedding_source(padding_idx: int | None, scale_grad_by_freq: bool, bits: int) -> str:
    """The lookup O[N, D] of rows I[N] of W[R, D] (float`bits`, read only for frequency scaling);
    with a padding row or frequency scaling it also reads V[R, D], W without gradient (see the
    module docstring)."""
    if padding_idx is None and not scale_grad_by_freq:
        return "function (W[R, D], I[N]) -> (O) { O = gather(W, I); }"
    lines = ["G = gather(W, I);", "H = gather(V, I);"]
    value = "G"
    if scale_grad_by_freq:
        lines += [f"One = as_float(I == I, {bits});",
                  "Hist = scatter(One, I, V);",  # occurrences of each row
                  "Count = gather(Hist, I);",
                  "Inverse = 1 / Count;",
                  "Share = reshape(Inverse, N, 1);",
                  "Finite = G - H == 0;"]
        value = "Finite ? H + Share * (G - H) : G"
    if padding_idx is not None:
        lines += ["Row = reshape(I, N, 1);"]
        value = f"Row == {padding_idx} ? H : ({value})"
    lines.append(f"O = {value};")
    body = "\n    ".join(lines)
    return f"function (W[R, D], V[R, D], I[N]) -> (O) {{\n    {body}\n}}"


@lru_cache(maxsize=None)
def renorm_source(max_norm: float, norm_type: float, bits: int) -> str:
    """W[R, D] (float`bits`) with each row that I[N] references scaled to norm `max_norm` where its `norm_type`
    norm exceeds it (torch's embedding_renorm_: scale max_norm / (norm + 1e-7))."""
    if norm_type == 2.0:
        norm = "Squares = W * W;\n    Sum[r, 0: R, 1] = +(Squares[r, d]);\n    Norm = sqrt(Sum);"
    elif norm_type == 1.0:
        norm = "Abs = abs(W);\n    Norm[r, 0: R, 1] = +(Abs[r, d]);"
    elif norm_type == float("inf"):
        norm = "Abs = abs(W);\n    Norm[r, 0: R, 1] = >(Abs[r, d]);"
    elif norm_type == float("-inf"):
        norm = "Abs = abs(W);\n    Norm[r, 0: R, 1] = <(Abs[r, d]);"
    elif norm_type == 0.0:
        norm = "Nonzero = W != 0 ? 1.0 : 0.0;\n    Norm[r, 0: R, 1] = +(Nonzero[r, d]);"
    else:
        p = repr(float(norm_type))
        norm = (f"Powers = pow(abs(W), {p});\n    Sum[r, 0: R, 1] = +(Powers[r, d]);\n"
                f"    Norm = pow(Sum, 1.0 / {p});")
    limit = repr(float(max_norm))
    return f"""function (W[R, D], I[N]) -> (O) {{
    One = as_float(I == I, {bits});
    Counts = scatter(One, I, W);
    Hits = reshape(Counts, R, 1);
    {norm}
    Renorm = (Hits > 0) & (Norm > {limit});
    O = Renorm ? W * ({limit} / (Norm + 1e-7)) : W;
}}"""


def _padding_row(padding_idx: int | None, rows: int) -> int | None:
    if padding_idx is None:
        return None
    if not -rows <= padding_idx < rows:
        raise OpError(f"tilec.nn.functional.embedding: padding_idx={padding_idx} must be within the "
                      f"{rows} embeddings (from {-rows} to {rows - 1})")
    return padding_idx % rows


def embedding(input: torch.Tensor, weight: torch.Tensor, padding_idx: int | None = None,  # noqa: A002 (torch's name)
              max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> torch.Tensor:
    """torch.nn.functional.embedding (see the module docstring)."""
    check_float("embedding", "weight", weight)
    if not isinstance(input, torch.Tensor) or input.dtype not in _INDEX_DTYPES:
        found = input.dtype if isinstance(input, torch.Tensor) else type(input).__name__
        raise OpError(f"tilec.nn.functional.embedding: 'input' must be a tensor of int64 or int32 indices, "
                      f"got {found}")
    if weight.dim() != 2:
        raise OpError(f"tilec.nn.functional.embedding: 'weight' must have rank 2 (rows, embedding dim), "
                      f"got shape {tuple(weight.shape)}")
    rows, dim = weight.shape
    padding = _padding_row(padding_idx, rows)
    indices = input.reshape(-1)
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= rows):
        bad = indices[(indices < 0) | (indices >= rows)][0]
        raise OpError(f"tilec.nn.functional.embedding: index {int(bad)} is out of range for {rows} embeddings")
    bits = 64 if weight.dtype == torch.float64 else 32
    if max_norm is not None and indices.numel() and rows * dim:
        with torch.no_grad():
            weight.copy_(run_program(renorm_source(float(max_norm), float(norm_type), bits), [weight, indices], weight.shape))
    out_shape = (*input.shape, dim)
    if sparse:
        out = _SparseGradientLookup.apply(weight, indices, padding, bool(scale_grad_by_freq))
        return out.reshape(out_shape)
    source = embedding_source(padding, bool(scale_grad_by_freq), bits if scale_grad_by_freq else 0)
    plain = padding is None and not scale_grad_by_freq
    tensors = [weight, indices] if plain else [weight, weight.detach(), indices]
    return run_program(source, tensors, (indices.numel(), dim)).reshape(out_shape)


class _SparseGradientLookup(torch.autograd.Function):
    """The plain Tile lookup of rows `indices` of `weight`, whose weight gradient is torch's sparse
    one: a COO tensor holding the output gradient's rows at their indices (padding rows dropped)."""

    @staticmethod
    def forward(ctx: Any, weight: torch.Tensor, indices: torch.Tensor, padding: int | None,  # type: ignore[override]
                scale_grad_by_freq: bool) -> torch.Tensor:
        out = run_program(embedding_source(None, False, 0), [weight, indices], (indices.numel(), weight.shape[1]))
        ctx.save_for_backward(indices)
        ctx.weight_shape, ctx.padding, ctx.scale_grad_by_freq = tuple(weight.shape), padding, scale_grad_by_freq
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        if ctx.scale_grad_by_freq:
            raise OpError("tilec.nn.functional.embedding: scale_grad_by_freq=True has no sparse gradient "
                          "(sparse=True); torch refuses it too")
        indices, = ctx.saved_tensors
        values = grad.reshape(-1, ctx.weight_shape[1])
        if ctx.padding is not None:  # a selection of rows, not arithmetic: the padding row gets nothing
            kept = indices != ctx.padding
            indices, values = indices[kept], values[kept]
        gradient = torch.sparse_coo_tensor(indices.to(torch.int64).reshape(1, -1), values, ctx.weight_shape,
                                           check_invariants=False)
        return gradient, None, None, None


__all__ = ["embedding", "embedding_source", "renorm_source"]
