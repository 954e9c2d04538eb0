"""Offsets for buffers with known lifetimes in one arena, close to the best possible size.

Buffers that are live at the same kernel step must not overlap. We place buffers one at a time
in a chosen order, each at the lowest-waste gap among the already-placed buffers it conflicts
with (best fit), try several orders (by size, by size x duration, by start) and keep the smallest
arena; ties are broken by name, so the plan is deterministic. The lower bound is the largest total
size of buffers live at one step: no plan can be smaller. The planner checks its own result.

Every step is O(n log n) in the number of buffers n, or O(P log P) in the number P of pairs of
buffers live together (each placement looks at the placed buffers it conflicts with, found
through aot/planner/intervals.py, not by scanning all of them). P is small for real models (a
chain has P ~ 2n) but reaches n^2 / 2 when everything is live at once, so past _EXACT_PAIRS the
orders that need it are skipped and only the start order runs: placed in start order, the
buffers a new one conflicts with are exactly those still live, so that order is an allocator
sweeping over the steps (freeing the buffers that died, best fit among the free gaps) with the
same result in O(n log n) at any P.
"""

from __future__ import annotations

import heapq
import random
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aot.planner.intervals import Span, TimeIndex, count_live_pairs, find_live_overlap

_SEARCH_BUDGET = 40_000  # buffer placements the random search may spend
# Pairs of buffers live together up to which every order (and the search) runs; above it only
# the start order, whose sweep does not depend on them. Real models stay far below (ResNet-50 has
# about 2,000); ten orders over 2 million pairs take seconds.
_EXACT_PAIRS = 2_000_000
_SEARCH_PAIRS = 20_000_000  # conflicting pairs the random search may look at, over all attempts


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
    pairs = count_live_pairs([(i.start, i.end) for i in items])
    orders: dict[str, Callable[[Interval], tuple]] = {
        "size": lambda i: (-i.size, i.start, i.key),
        "size_x_duration": lambda i: (-i.size * (i.end - i.start + 1), -i.size, i.key),
        "duration": lambda i: (-(i.end - i.start), -i.size, i.key),
        "start": lambda i: (i.start, -i.size, i.key),
    }
    best: tuple[int, str, dict[str, int]] | None = None
    for name, key in orders.items():
        if name == "start":
            offsets = _place_sweeping(sorted(items, key=key))
        elif pairs <= _EXACT_PAIRS:
            offsets = _place(sorted(items, key=key))
        else:
            continue
        size = max((offsets[i.key] + i.size for i in items), default=0)
        if best is None or size < best[0]:
            best = (size, name, offsets)
        if size == lower:
            break
    assert best is not None
    if best[0] > lower and pairs <= _EXACT_PAIRS:
        # Greedy orders missed the bound: a short, seeded (so deterministic) random search over
        # placement orders, as TVM's hill-climb does, stopping as soon as it reaches the bound.
        rng = random.Random(len(items) * 7919 + lower)
        base = sorted(items, key=orders["size"])
        attempts = min(_SEARCH_BUDGET // max(len(items), 1), _SEARCH_PAIRS // max(pairs, 1), 400)
        for attempt in range(attempts):
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
    """Each buffer in turn at the lowest-waste gap among the placed buffers live with it (best
    fit; the lowest such gap on a tie), or above them all."""
    placed = TimeIndex(max((i.end for i in order), default=0) + 1)
    offsets: dict[str, int] = {}
    for item in order:
        busy = sorted(placed.meeting(item.start, item.end))
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
        placed.add(item.start, item.end, (best_offset, best_offset + item.size))
    return offsets


def _place_sweeping(order: Sequence[Interval]) -> dict[str, int]:
    """_place for buffers in order of their start step, as an allocator: the placed buffers live
    with the next one are those not yet dead, so the gaps _place would find between them are the
    free gaps below the top of the live ones. Kept in a list sorted by (length, offset), the
    lowest-waste gap (lowest offset on a tie) is the first long enough; a freed buffer merges with
    the free gaps beside it, and when it was the topmost the top drops to the gap below it."""
    offsets: dict[str, int] = {}
    by_length: list[tuple[int, int]] = []  # free gaps (length, offset), below `top`
    gap_ending: dict[int, int] = {}  # free gap end -> its offset
    gap_starting: dict[int, int] = {}  # free gap offset -> its end
    dying: list[tuple[int, int, int]] = []  # heap of (last step, offset, end) of live buffers
    top = 0

    def take(lo: int, hi: int) -> None:
        by_length.pop(bisect_left(by_length, (hi - lo, lo)))
        del gap_starting[lo], gap_ending[hi]

    def give(lo: int, hi: int) -> None:
        insort(by_length, (hi - lo, lo))
        gap_starting[lo], gap_ending[hi] = hi, lo

    for item in order:
        while dying and dying[0][0] < item.start:
            _, lo, hi = heapq.heappop(dying)
            if lo in gap_ending:
                below = gap_ending[lo]
                take(below, lo)
                lo = below
            if hi == top:
                top = lo
                continue
            if hi in gap_starting:
                above = gap_starting[hi]
                take(hi, above)
                hi = above
            give(lo, hi)
        at = bisect_left(by_length, (item.size, -1))
        if at < len(by_length):
            length, lo = by_length[at]
            take(lo, lo + length)
            if length > item.size:
                give(lo + item.size, lo + length)
        else:
            lo = top
            top += item.size
        offsets[item.key] = lo
        heapq.heappush(dying, (item.end, lo, lo + item.size))
    return offsets


def _lower_bound(items: Sequence[Interval]) -> tuple[int, int, tuple[str, ...]]:
    """(largest live total, the first step it is reached at, the keys live there), sweeping the
    steps where some buffer starts (the live total only rises there)."""
    if not items:
        return 0, 0, ()
    by_start = sorted(items, key=lambda i: i.start)
    dying: list[tuple[int, int]] = []  # heap of (last step, size)
    total, best_total, best_step = 0, 0, 0
    index = 0
    while index < len(by_start):
        step = by_start[index].start
        while index < len(by_start) and by_start[index].start == step:
            total += by_start[index].size
            heapq.heappush(dying, (by_start[index].end, by_start[index].size))
            index += 1
        while dying[0][0] < step:
            total -= heapq.heappop(dying)[1]
        if total > best_total:
            best_total, best_step = total, step
    live = tuple(sorted(i.key for i in items if i.start <= best_step <= i.end))
    return best_total, best_step, live


def verify_plan(items: Sequence[Interval], offsets: dict[str, int], arena: int) -> None:
    """Glow's lesson: an allocator should check its own output."""
    for i in items:
        off = offsets[i.key]
        if off < 0 or off + i.size > arena:
            raise AssertionError(f"buffer {i.key} [{off}, {off + i.size}) leaves the arena of {arena} bytes")
    clash = find_live_overlap([Span(i.key, i.start, i.end, offsets[i.key], offsets[i.key] + i.size) for i in items])
    if clash is not None:
        a, b = clash
        raise AssertionError(f"buffers {a.key} and {b.key} are live together and overlap")
