"""A task's search space: its template's knobs and constraints (tilec.schedule.templates), with
the heuristic's default always a point of it.

The Space itself (mixed-radix enumeration of the legal points, an integer index, neighbours)
is tilec.schedule.templates.space; each template declares its choice lists and constraints.
"""

from __future__ import annotations

from tilec.autotune.task import Task
from tilec.schedule.templates.space import MAX_RAW_POINTS, Config, Constraint, Knob, Space, SpaceTooLarge, choices_with


def space_for(task: Task, max_points: int = MAX_RAW_POINTS) -> Space:
    default = task.default_config()
    knobs, constraints = task.impl.space(task.stmt, task.plan, task.context, default)
    return Space(knobs, constraints, default, max_points)


__all__ = ["Config", "Constraint", "Knob", "MAX_RAW_POINTS", "Space", "SpaceTooLarge", "choices_with", "space_for"]
