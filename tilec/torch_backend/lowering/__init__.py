"""The ATen ops tilec lowers, by family, and how the partitioner asks about them.

Two kinds of rule:
- a **Tile rule** `rule(p, node)` writes the node's statements into the kernel `p`
  (tilec.torch_backend.program.ProgramWriter) and returns its Value (or a tuple of them for a
  multi-output op, which `getitem` nodes pick from); nodes with Tile rules fuse into one program;
- a **library rule** `rule(*args, **kwargs)` runs the node on real tensors through tilec's own
  tuned kernels (convolutions) and returns torch tensors: one kernel call of its own.

A rule raises `Unsupported` for arguments it cannot lower; the node then runs in torch.
"""

from tilec.torch_backend.lowering import (attention, dropout, elementwise, indexing, layout, library, linalg, losses,  # noqa: F401
                                          normalization, pooling, reductions)
from tilec.torch_backend.lowering.registry import (LIBRARY_CHECKS, LIBRARY_RULES, TILE_RULES, argv, lowered_ops,
                                                   rule_key)

__all__ = ["TILE_RULES", "LIBRARY_RULES", "LIBRARY_CHECKS", "argv", "rule_key", "lowered_ops"]
