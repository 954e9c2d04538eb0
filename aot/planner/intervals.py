"""Questions about buffers live over kernel steps, answered in O(n log n) rather than by comparing
every pair: which placed buffers are live during a range of steps (TimeIndex), how many pairs
are live together (count_live_pairs), and whether any two buffers live together overlap in memory
(find_live_overlap). A model of 100,000 kernels has 5e9 pairs; these never look at most of them.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import NamedTuple


class Span(NamedTuple):
    """A buffer at bytes [lo, hi), live from step `start` to `end` inclusive."""

    key: str
    start: int
    end: int
    lo: int
    hi: int


class TimeIndex:
    """Values attached to step ranges, found by the ranges they intersect.

    Two segment trees over the steps 0..steps-1: `_cover` holds each value at the O(log steps)
    nodes that exactly cover its range (so the values live at one step are on the path from that
    step's leaf to the root), `_starts` holds it at every ancestor of its start step's leaf (so the
    values starting inside a range are on that range's O(log steps) canonical nodes). A range
    [s, e] meets the values live at s and those starting in (s, e]: two disjoint sets, each found
    in O(log steps + answer)."""

    def __init__(self, steps: int) -> None:
        self._leaves = 1
        while self._leaves < max(steps, 1):
            self._leaves *= 2
        self._cover: dict[int, list] = {}
        self._starts: dict[int, list] = {}

    def add(self, start: int, end: int, value: object) -> None:
        lo, hi = start + self._leaves, end + self._leaves + 1
        while lo < hi:
            if lo & 1:
                self._cover.setdefault(lo, []).append(value)
                lo += 1
            if hi & 1:
                hi -= 1
                self._cover.setdefault(hi, []).append(value)
            lo //= 2
            hi //= 2
        node = start + self._leaves
        while node:
            self._starts.setdefault(node, []).append(value)
            node //= 2

    def meeting(self, start: int, end: int) -> list:
        """Every value whose range intersects [start, end]."""
        found: list = []
        node = start + self._leaves
        while node:
            found += self._cover.get(node, ())
            node //= 2
        lo, hi = start + 1 + self._leaves, end + 1 + self._leaves
        while lo < hi:
            if lo & 1:
                found += self._starts.get(lo, ())
                lo += 1
            if hi & 1:
                hi -= 1
                found += self._starts.get(hi, ())
            lo //= 2
            hi //= 2
        return found


def count_live_pairs(ranges: Sequence[tuple[int, int]]) -> int:
    """How many pairs of the (start, end) ranges (inclusive) share a step: for each range, the
    ranges starting no later (earlier in the sorted order) that have not ended before it starts."""
    starts = sorted(s for s, _ in ranges)
    ends = sorted(e for _, e in ranges)
    return sum(index - bisect_left(ends, s) for index, s in enumerate(starts))


def find_live_overlap(spans: Sequence[Span],
                      may_share: Callable[[Span, Span], bool] | None = None) -> tuple[Span, Span] | None:
    """Two spans live at a common step whose byte ranges overlap (and that `may_share` does not
    allow), or None. A sweep over steps keeps the spans live so far sorted by bytes; each new span
    is compared with its neighbours only. That suffices: the spans in the sorted list never
    overlap each other (or only as allowed pairs with equal ranges, which sit side by side), so
    their ends rise with their starts and the first neighbour that misses ends the search."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start, i))
    live: list[tuple[int, int, int]] = []  # (lo, hi, index) of the spans live at the current step
    ending: list[tuple[int, int, int, int]] = []  # heap of (end, lo, hi, index)
    for i in order:
        s = spans[i]
        while ending and ending[0][0] < s.start:
            _, lo, hi, j = heapq.heappop(ending)
            del live[bisect_left(live, (lo, hi, j))]
        at = bisect_right(live, (s.lo, s.hi, i))
        left = at - 1
        while left >= 0 and live[left][1] > s.lo:
            other = spans[live[left][2]]
            if other.lo < s.hi and s.lo < other.hi and not (may_share and may_share(other, s)):
                return other, s
            left -= 1
        right = at
        while right < len(live) and live[right][0] < s.hi:
            other = spans[live[right][2]]
            if not (may_share and may_share(other, s)):
                return other, s
            right += 1
        live.insert(at, (s.lo, s.hi, i))
        heapq.heappush(ending, (s.end, s.lo, s.hi, i))
    return None
