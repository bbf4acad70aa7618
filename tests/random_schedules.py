"""Shared by the random-schedule property tests (test_schedule.py, test_schedule_memory.py):
lowering a source for float32 inputs, applying a drawn list of primitives where legal, and
checking the scheduled function against the default one."""

from __future__ import annotations

from typing import Iterable

import numpy as np

import tilec
from reference import assert_matches
from tilec.errors import ScheduleError
from tilec.ir import loop as L
from tilec.ir.bounds import BoundProgram, bind
from tilec.ir.lower import lower
from tilec.ir.verify import verify
from tilec.schedule.primitives.apply import apply_primitive
from tilec.schedule.primitives.records import Schedule


def bound_f32(src: str, shapes: dict) -> BoundProgram:
    return bind(tilec.parse(src, {}), shapes, {n: "float32" for n in shapes}, {})


def lowered_f32(src: str, shapes: dict) -> L.PrimFunc:
    return lower(bound_f32(src, shapes))


def assert_legal_moves_compute_the_default(src: str, shapes: dict, inputs: list[np.ndarray], moves: Iterable,
                                           draw) -> None:
    """Apply `draw(func, move)` (a primitive, or None to skip) for each move on the lowered
    source, keeping those the scheduler accepts (ScheduleError: illegal, skipped); the schedule
    of the kept ones must compute what the default schedule computes."""
    func = lowered_f32(src, shapes)
    applied = []
    for move in moves:
        p = draw(func, move)
        if p is None:
            continue
        try:
            func = verify(apply_primitive(func, p))
        except ScheduleError:
            continue
        applied.append(p)
    f = tilec.compile(src)
    assert_matches(f.with_schedule(Schedule(applied))(*inputs), f(*inputs), dtype=np.float32, rtol=1e-5, atol=1e-5)
