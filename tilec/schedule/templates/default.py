"""The "default" template: the plain default loop nest of tilec.ir.lower, on any target.

Every statement no other template takes gets it; naming it in a TemplateSchedule keeps the
heuristic's templates off a statement. (On a GPU target the nest is then bound to blocks and
threads by tilec.schedule.gpu.launch.)
"""

from __future__ import annotations

from tilec.ir import loop as L
from tilec.ir.lower import LoweredGroup, lower_statement
from tilec.schedule.templates.base import Choice, Context, Template


class Default(Template):
    name = "default"
    kind = "any"

    def match(self, index: int, ctx: Context) -> bool:
        return True

    def build(self, choice: Choice, ctx: Context) -> LoweredGroup:
        workspaces: list[L.Buffer] = []
        stmt = lower_statement(ctx.bp.statements[choice.index], ctx.bp, workspaces, wide_sums=not ctx.target.is_gpu)
        return LoweredGroup(stmt, tuple(workspaces))


DEFAULT = Default()

__all__ = ["DEFAULT", "Default"]
