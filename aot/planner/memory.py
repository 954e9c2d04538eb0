"""Offsets for buffers with known lifetimes in one arena, close to the best possible size.

Buffers that are live at the same kernel step must not overlap. We place buffers one at a time
in a chosen order, each at the lowest-waste gap among the already-placed buffers it conflicts
with (best fit), try several orders (by size, by size x duration, by start) and keep the smallest
arena; ties are broken by name, so the plan is deterministic. The lower bound is the largest total
size of buffers live at one step: no plan can be smaller. The planner checks its own result.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_SEARCH_BUDGET = 40_000  # buffer placements the random search may spend


@dataclass(frozen=True)
class Interval:
    """A buffer of `size` bytes live from kernel step `start` to `end`, inclusive."""

    key: str
    size: int
    start: int
    end: int

    def overlaps_in_time(self, other: Interval) -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]
    arena_bytes: int
    lower_bound_bytes: int
    unshared_bytes: int
    alignment: int
    strategy: str
    peak_step: int
    peak_keys: tuple[str, ...]


def align_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def plan_memory(intervals: Sequence[Interval], alignment: int = 64) -> MemoryPlan:
    if alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"alignment {alignment} is not a power of two")
    items = [Interval(i.key, align_up(max(i.size, 1), alignment), i.start, i.end) for i in intervals]
    keys = [i.key for i in items]
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate buffer keys")
    lower, peak_step, peak_keys = _lower_bound(items)
    unshared = sum(i.size for i in items)
    orders: dict[str, Callable[[Interval], tuple]] = {
        "size": lambda i: (-i.size, i.start, i.key),
        "size_x_duration": lambda i: (-i.size * (i.end - i.start + 1), -i.size, i.key),
        "duration": lambda i: (-(i.end - i.start), -i.size, i.key),
        "start": lambda i: (i.start, -i.size, i.key),
    }
    best: tuple[int, str, dict[str, int]] | None = None
    for name, key in orders.items():
        offsets = _place(sorted(items, key=key))
        size = max((offsets[i.key] + i.size for i in items), default=0)
        if best is None or size < best[0]:
            best = (size, name, offsets)
        if size == lower:
            break
    assert best is not None
    if best[0] > lower:
        # Greedy orders missed the bound: a short, seeded (so deterministic) random search over
        # placement orders, as TVM's hill-climb does, stopping as soon as it reaches the bound.
        rng = random.Random(len(items) * 7919 + lower)
        base = sorted(items, key=orders["size"])
        for attempt in range(min(_SEARCH_BUDGET // max(len(items), 1), 400)):
            order = list(base)
            rng.shuffle(order)
            offsets = _place(order)
            size = max((offsets[i.key] + i.size for i in items), default=0)
            if size < best[0]:
                best = (size, f"search#{attempt}", offsets)
            if size == lower:
                break
    arena, strategy, offsets = best
    verify_plan(items, offsets, arena)
    return MemoryPlan(offsets, arena, lower, unshared, alignment, strategy, peak_step, peak_keys)


def lower_bound(intervals: Sequence[Interval], alignment: int = 64) -> int:
    """The largest total (aligned) size of buffers live at one step: no plan can be smaller."""
    return _lower_bound([Interval(i.key, align_up(max(i.size, 1), alignment), i.start, i.end) for i in intervals])[0]


def _place(order: Sequence[Interval]) -> dict[str, int]:
    placed: list[tuple[int, Interval]] = []
    offsets: dict[str, int] = {}
    for item in order:
        busy = sorted((off, off + other.size) for off, other in placed if other.overlaps_in_time(item))
        best_offset, best_waste = None, None
        cursor = 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= item.size and (best_waste is None or gap - item.size < best_waste):
                best_offset, best_waste = cursor, gap - item.size
            cursor = max(cursor, hi)
        if best_offset is None:
            best_offset = cursor
        offsets[item.key] = best_offset
        placed.append((best_offset, item))
    return offsets


def _lower_bound(items: Sequence[Interval]) -> tuple[int, int, tuple[str, ...]]:
    if not items:
        return 0, 0, ()
    steps = sorted({i.start for i in items})
    best = (0, 0, ())
    for step in steps:  # the live total only rises where some buffer starts
        live = [i for i in items if i.start <= step <= i.end]
        total = sum(i.size for i in live)
        if total > best[0]:
            best = (total, step, tuple(sorted(i.key for i in live)))
    return best


def verify_plan(items: Sequence[Interval], offsets: dict[str, int], arena: int) -> None:
    """Glow's lesson: an allocator should check its own output."""
    for i in items:
        off = offsets[i.key]
        if off < 0 or off + i.size > arena:
            raise AssertionError(f"buffer {i.key} [{off}, {off + i.size}) leaves the arena of {arena} bytes")
    by_start = sorted(items, key=lambda i: i.start)
    for a_index, a in enumerate(by_start):
        for b in by_start[a_index + 1:]:
            if b.start > a.end:
                break
            oa, ob = offsets[a.key], offsets[b.key]
            if oa < ob + b.size and ob < oa + a.size:
                raise AssertionError(f"buffers {a.key} and {b.key} are live together and overlap")
