"""Matrix products (mm, addmm, bmm, baddbmm) as Tile contractions; their operands' lazy
transposes become the contraction's index order (no copy), and the elementwise ops that follow
in the same kernel fuse into the GEMM template's epilogue."""

from __future__ import annotations

import torch
import torch.fx as fx

from tilec.torch_backend.lowering.registry import argv, result, tile
from tilec.torch_backend.lowering.elementwise import arguments
from tilec.torch_backend.program import ProgramWriter, Unsupported, Value, literal

aten = torch.ops.aten


def matmul(p: ProgramWriter, a: Value, b: Value, shape: tuple[int, ...], dtype: torch.dtype) -> Value:
    """a @ b for 2-D or batched 3-D operands of `dtype`."""
    if a.dtype != dtype or b.dtype != dtype:
        raise Unsupported(f"a matrix product of {a.dtype} and {b.dtype}")
    if a.rank == 2:
        return p.contract(["i", "j"], shape, f"+({p.access(a, ['i', 'k'])} * {p.access(b, ['k', 'j'])})", dtype)
    return p.contract(["b", "i", "j"], shape,
                      f"+({p.access(a, ['b', 'i', 'k'])} * {p.access(b, ['b', 'k', 'j'])})", dtype)


@tile(aten.mm.default, aten.bmm.default)
def _mm(p: ProgramWriter, node: fx.Node) -> Value:
    shape, dtype = result(node)
    return matmul(p, p.tensor(argv(node)[0]), p.tensor(argv(node)[1]), shape, dtype)


@tile(aten.addmm.default, aten.baddbmm.default)
def _addmm(p: ProgramWriter, node: fx.Node) -> Value:
    a = arguments(node)
    shape, dtype = result(node)
    product = matmul(p, p.tensor(a["mat1" if "mat1" in a else "batch1"]),
                     p.tensor(a["mat2" if "mat2" in a else "batch2"]), shape, dtype)
    bias = p.tensor(a["self"])
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    if not dtype.is_floating_point and not (isinstance(beta, int) and isinstance(alpha, int)):
        raise Unsupported(f"{dtype} {node.target} with beta {beta!r}, alpha {alpha!r}")
    term = p.elementwise(bias) if beta == 1 else f"{p.elementwise(bias)} * {literal(beta)}"
    scaled = product.name if alpha == 1 else f"{product.name} * {literal(alpha)}"
    return p.let(f"{scaled} + {term}", shape, dtype, product, bias)
