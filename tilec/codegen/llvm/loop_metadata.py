"""Loop metadata: the hints a loop's back edge carries (``llvm.loop.vectorize.enable``,
``llvm.loop.unroll.full``) as an LLVM loop ID.

Requires: llvmlite.ir, which cannot spell a node that refers to itself, as a loop ID must.
Guarantees: `loop_metadata` makes a node whose first operand is a numbered placeholder string;
`patch_loop_ids`, run on the module's text, turns each such node into the self-referencing
``distinct`` loop ID LLVM expects.
"""

from __future__ import annotations

import re
from typing import Any

import llvmlite.ir as ir

_LOOP_ID_PLACEHOLDER = "tilec.loop.id."


def loop_metadata(module: ir.Module, number: int, hints: list[tuple[str, Any]]) -> ir.Value:
    """A loop ID node (loop `number` of the module) holding `hints`: (name, True/False/int/None) pairs."""
    operands: list[Any] = [ir.MetaDataString(module, f"{_LOOP_ID_PLACEHOLDER}{number}")]
    for name, value in hints:
        md: list[Any] = [ir.MetaDataString(module, name)]
        if value is not None:
            md.append(ir.Constant(ir.IntType(1), int(value)) if isinstance(value, bool)
                      else ir.Constant(ir.IntType(32), value))
        operands.append(module.add_metadata(md))
    return module.add_metadata(operands)


def patch_loop_ids(text: str) -> str:
    """``!7 = !{!"tilec.loop.id.0", ...}`` becomes the loop ID ``!7 = distinct !{!7, ...}``."""
    pattern = re.compile(r'^(!\d+) = !\{ ?!"' + re.escape(_LOOP_ID_PLACEHOLDER) + r'\d+"', re.MULTILINE)
    return pattern.sub(lambda m: f"{m.group(1)} = distinct !{{ {m.group(1)}", text)


__all__ = ["loop_metadata", "patch_loop_ids"]
