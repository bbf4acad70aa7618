"""The attention-backward template's knob record, its default and its rules.

Requires: nothing. Guarantees: `default_knobs` fits the sequences (no block much longer than
them), `knob_problems` lists what the kernel cannot build.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilec.schedule.cpu.attention import LANES
from tilec.schedule.templates.knobs import knob


@dataclass(frozen=True)
class AttentionBackwardKnobs:
    """The template's tunable knobs (a schedule record)."""

    bq: int = knob(64, 1, 1024, "query rows per block, a multiple of mr")
    bk: int = knob(64, 1, 1024, f"keys per block, a multiple of {LANES} and of mr")
    mr: int = knob(4, 1, 16, "rows of a register block in the micro-GEMMs")
    panel: bool = knob(True, doc="one pass keeping a query block's S and dP for every key (see build)")


def default_knobs(s: int, t: int) -> AttentionBackwardKnobs:
    """The untuned knobs for S queries and T keys: the defaults' 64 x 64 blocks, shrunk to the
    sequences when they are shorter (rows of a block past the sequence are padding work: at S = T
    = 16, 64 x 64 blocks would compute 16 times the scores needed)."""
    base = AttentionBackwardKnobs()
    bq = min(base.bq, -(-s // base.mr) * base.mr)
    bk = min(base.bk, -(-t // LANES) * LANES)
    return AttentionBackwardKnobs(bq=bq, bk=bk, mr=base.mr, panel=base.panel)


def knob_problems(knobs: AttentionBackwardKnobs) -> list[str]:
    """Why `knobs` cannot be built (empty when they can)."""
    problems = []
    if knobs.mr < 1 or knobs.bq < 1 or knobs.bk < 1:
        problems.append("bq, bk and mr must be positive")
    elif knobs.bq % knobs.mr or knobs.bk % knobs.mr:
        problems.append(f"bq ({knobs.bq}) and bk ({knobs.bk}) must be multiples of mr ({knobs.mr})")
    if knobs.bk % LANES:
        problems.append(f"bk ({knobs.bk}) must be a multiple of {LANES}")
    return problems


__all__ = ["AttentionBackwardKnobs", "default_knobs", "knob_problems"]
