"""Lifetimes of arena tensors over the kernel schedule."""

from __future__ import annotations

from collections.abc import Sequence

from aot.ir.graph import Tensor
from aot.lowering.program import Program
from aot.planner.in_place import InPlace, groups
from aot.planner.memory import Interval


def arena_intervals(program: Program) -> list[Interval]:
    """Each arena tensor is live from the first kernel that touches it to the last one."""
    wanted = set(program.arena_tensors)
    first: dict[Tensor, int] = {}
    last: dict[Tensor, int] = {}
    for step, bindings in enumerate(program.bindings):
        for t in bindings:
            if t in wanted:
                first.setdefault(t, step)
                last[t] = step
    return [Interval(t.name, t.nbytes, first[t], last[t]) for t in program.arena_tensors]


def buffer_intervals(tensors: Sequence[Interval], pairs: Sequence[InPlace]) -> tuple[list[Interval], dict[str, str]]:
    """The buffers the planner places: tensors joined by in-place pairs become one buffer, keyed by
    the first tensor's name and live from its start to the last one's end (the ranges of a chain
    meet at the kernels writing in place, so their union has no gap). Also returns tensor name ->
    buffer key for the joined tensors."""
    leader = groups(pairs)
    merged: dict[str, Interval] = {}
    for t in tensors:
        key = leader.get(t.key, t.key)
        if key in merged:
            m = merged[key]
            merged[key] = Interval(key, max(m.size, t.size), min(m.start, t.start), max(m.end, t.end))
        else:
            merged[key] = Interval(key, t.size, t.start, t.end)
    return list(merged.values()), {name: key for name, key in leader.items() if name != key}
