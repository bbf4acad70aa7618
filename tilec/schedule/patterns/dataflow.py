"""Who reads what: the tensors each statement reads, and how many statements read each tensor.

Requires: a BoundProgram. Guarantees: `reads` lists the tensors a statement loads (a
contraction's operands and its default, an elementwise statement's tensors), `reader_counts`
the number of statements reading each tensor (a statement reading a tensor twice counts once).
"""

from __future__ import annotations

from tilec.ir import tensor as T
from tilec.ir.bounds import BoundProgram, BoundStatement


def reads(s: BoundStatement) -> list[str]:
    return T.statement_reads(s.stmt)


def reader_counts(bp: BoundProgram) -> dict[str, int]:
    count: dict[str, int] = {}
    for s in bp.statements:
        for n in set(reads(s)):
            count[n] = count.get(n, 0) + 1
    return count


__all__ = ["reads", "reader_counts"]
