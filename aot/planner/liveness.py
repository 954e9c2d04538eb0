"""Lifetimes of arena tensors over the kernel schedule."""

from __future__ import annotations

from aot.lowering.program import Program
from aot.planner.memory import Interval


def arena_intervals(program: Program) -> list[Interval]:
    """Each arena tensor is live from the first kernel that touches it to the last one."""
    wanted = {id(t): t for t in program.arena_tensors}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, bindings in enumerate(program.bindings):
        for t in bindings:
            if id(t) in wanted:
                first.setdefault(id(t), step)
                last[id(t)] = step
    return [Interval(t.name, t.nbytes, first[id(t)], last[id(t)]) for t in program.arena_tensors]
