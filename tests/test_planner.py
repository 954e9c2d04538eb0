"""The memory planner: its plans are valid for any lifetimes and sizes, and near the lower bound."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aot.planner import memory
from aot.planner.intervals import Span, TimeIndex, count_live_pairs, find_live_overlap
from aot.planner.memory import Interval, align_up, plan_memory, verify_plan


@st.composite
def interval_sets(draw: st.DrawFn) -> list[Interval]:
    n = draw(st.integers(0, 40))
    items = []
    for i in range(n):
        start = draw(st.integers(0, 30))
        length = draw(st.integers(0, 10))
        size = draw(st.integers(1, 100_000))
        items.append(Interval(f"t{i}", size, start, start + length))
    return items


@settings(max_examples=300, deadline=None)
@given(interval_sets(), st.sampled_from([1, 16, 64, 128]))
def test_plan_never_overlaps_live_buffers_and_stays_in_arena(items: list[Interval], alignment: int) -> None:
    plan = plan_memory(items, alignment)
    for i in items:
        off = plan.offsets[i.key]
        assert off % alignment == 0
        assert off + i.size <= plan.arena_bytes
    for a in items:
        for b in items:
            if a.key < b.key and a.overlaps_in_time(b):
                oa, ob = plan.offsets[a.key], plan.offsets[b.key]
                sa, sb = align_up(a.size, alignment), align_up(b.size, alignment)
                assert oa + sa <= ob or ob + sb <= oa, f"{a} and {b} overlap"
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.unshared_bytes


def test_chain_reuses_memory_down_to_the_lower_bound() -> None:
    # A chain a -> b -> c -> d: only two neighbours are ever live together.
    items = [Interval(f"t{i}", 1000, i, i + 1) for i in range(6)]
    plan = plan_memory(items, 64)
    assert plan.arena_bytes == plan.lower_bound_bytes
    assert plan.arena_bytes < plan.unshared_bytes / 2


def test_plan_is_deterministic() -> None:
    items = [Interval(f"t{i}", (i * 7919) % 5000 + 1, i % 5, i % 5 + i % 3) for i in range(30)]
    first = plan_memory(items, 64)
    second = plan_memory(list(reversed(items)), 64)
    assert first.offsets == second.offsets and first.arena_bytes == second.arena_bytes


def test_verifier_catches_overlap() -> None:
    items = [Interval("a", 64, 0, 2), Interval("b", 64, 1, 3)]
    with pytest.raises(AssertionError, match="overlap"):
        verify_plan(items, {"a": 0, "b": 32}, 128)
    with pytest.raises(AssertionError, match="leaves the arena"):
        verify_plan(items, {"a": 0, "b": 64}, 100)


def test_lower_bound_reports_the_peak() -> None:
    items = [Interval("a", 128, 0, 1), Interval("b", 256, 1, 2), Interval("c", 64, 2, 3)]
    plan = plan_memory(items, 64)
    assert plan.lower_bound_bytes == 384 and plan.peak_keys in (("a", "b"), ("b", "c"))


# -- the near-linear machinery gives the answers of the pairwise definitions -----------------------


@settings(max_examples=200, deadline=None)
@given(interval_sets())
def test_time_index_and_pair_count_match_pairwise(items: list[Interval]) -> None:
    index = TimeIndex(max((i.end for i in items), default=0) + 1)
    for i in items:
        index.add(i.start, i.end, i.key)
    for probe in items:
        expected = sorted(i.key for i in items if i.overlaps_in_time(probe))
        assert sorted(index.meeting(probe.start, probe.end)) == expected
    pairs = sum(1 for x, a in enumerate(items) for b in items[x + 1:] if a.overlaps_in_time(b))
    assert count_live_pairs([(i.start, i.end) for i in items]) == pairs


@settings(max_examples=200, deadline=None)
@given(interval_sets(), st.integers(0, 2**32))
def test_overlap_sweep_finds_what_pairwise_finds(items: list[Interval], seed: int) -> None:
    rng = random.Random(seed)
    spans = [Span(i.key, i.start, i.end, lo, lo + rng.choice([64, 128, 1000]))
             for i in items for lo in [rng.randrange(0, 4096, 64)]]
    clash = any(a.lo < b.hi and b.lo < a.hi and a.start <= b.end and b.start <= a.end
                for x, a in enumerate(spans) for b in spans[x + 1:])
    found = find_live_overlap(spans)
    assert (found is not None) == clash
    if found:
        a, b = found
        assert a.lo < b.hi and b.lo < a.hi and a.start <= b.end and b.start <= a.end


@settings(max_examples=200, deadline=None)
@given(interval_sets())
def test_start_order_sweep_places_as_best_fit_does(items: list[Interval]) -> None:
    aligned = sorted((Interval(i.key, align_up(i.size, 64), i.start, i.end) for i in items),
                     key=lambda i: (i.start, -i.size, i.key))
    assert memory._place_sweeping(aligned) == memory._place(aligned)


@settings(max_examples=100, deadline=None)
@given(interval_sets())
def test_plan_beyond_the_pair_budget_is_still_valid(items: list[Interval]) -> None:
    # Too many live pairs for every order: only the start-order sweep runs, and is checked.
    saved = memory._EXACT_PAIRS
    memory._EXACT_PAIRS = -1
    try:
        plan = plan_memory(items, 64)
    finally:
        memory._EXACT_PAIRS = saved
    assert plan.strategy == "start" or not items
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.unshared_bytes
