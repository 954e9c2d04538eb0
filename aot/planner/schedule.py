"""Kernel order: run independent branches in the order that keeps the least memory live.

The lowering emits kernels in the ONNX node order, which for branching models (Inception,
SqueezeNet fire modules, DenseNet) can leave a whole branch's outputs waiting while another branch
runs. Any order that keeps every pair of kernels touching overlapping memory (one of them writing)
in their original relative order computes the same result; among those, a greedy list scheduler
picks at each step a ready kernel by a memory cost, ties broken by the original position:

* "net": the kernel whose new buffers minus the buffers it frees (it is their last user) is
  smallest, so branches that shrink memory run first and a kernel allocating a big buffer waits;
* "branch": the kernel that continues the most recently started work (the latest ready kernel
  whose inputs were produced last), so one branch is finished before the next one starts.

Each candidate order is judged by what the planner would face: the largest total of buffers live
at one step after in-place merging (the lower bound). The original order is kept unless a
candidate is strictly smaller, so linear models and ties keep the ONNX order. Deterministic: no
randomness, and every choice has a total tie-break.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from aot.ir.graph import Tensor
from aot.lowering.program import ARENA, INPUT, WEIGHT, Program
from aot.planner.in_place import find_in_place, reading_through_output
from aot.planner.liveness import arena_intervals, buffer_intervals
from aot.planner.memory import align_up, lower_bound

Cost = Callable[[int, int, int, int], tuple]  # (kernel, bytes allocated, bytes freed, last producer) -> key


def dependencies(program: Program) -> list[set[int]]:
    """For each kernel, the earlier kernels it must follow because they touch an overlapping
    element range of the same storage, at least one of the two writing: read-after-write and
    write-after-write with the latest writer of each element, write-after-read with every earlier
    reader. (An element's older writers are not listed: each precedes the latest through the same
    rule, so the orders allowed are the same, and so is the latest predecessor the "branch" cost
    reads.) Storage nobody writes (weights, inputs) adds nothing. A read looks up the last writers
    of its range (O(log segments + writers found)) rather than comparing itself with every
    earlier access of the root, which is quadratic for a Concat output written in 10,000 parts. Only a
    write still scans the root's earlier reads (roots written after many reads are rare)."""
    writers: dict[Tensor, LastWriters] = {}  # root -> who last wrote each element range
    readers: dict[Tensor, list[tuple[int, int, int]]] = {}  # root -> (kernel, lo, hi) of each read
    preds: list[set[int]] = []
    for k, (kernel, bindings, offsets) in enumerate(zip(program.kernels, program.bindings, program.offsets)):
        mine: set[int] = set()
        writes, reads = [], []  # recorded after all params, so a kernel never follows itself
        for buf, root, offset in zip(kernel.params, bindings, offsets):
            if program.storage[root].kind in (WEIGHT, INPUT):
                continue
            lo, hi = offset, offset + max(buf.size, 1)
            last = writers.get(root)
            if last is not None:
                mine |= last.between(lo, hi)
            if buf.writable:
                mine.update(j for j, lo2, hi2 in readers.get(root, ()) if lo < hi2 and lo2 < hi)
                writes.append((root, lo, hi))
            else:
                reads.append((root, lo, hi))
        for root, lo, hi in writes:
            writers.setdefault(root, LastWriters()).write(lo, hi, k)
        for root, lo, hi in reads:
            readers.setdefault(root, []).append((k, lo, hi))
        preds.append(mine)
    return preds


class LastWriters:
    """The kernel that last wrote each element of one storage root: the root's elements cut into
    segments [bounds[i], bounds[i + 1]) (the last one open-ended), each with its writer (-1: none)."""

    def __init__(self) -> None:
        self._bounds = [0]
        self._writer = [-1]

    def between(self, lo: int, hi: int) -> set[int]:
        """The last writers of the elements in [lo, hi)."""
        first = bisect_right(self._bounds, lo) - 1
        stop = bisect_left(self._bounds, hi)
        return {w for w in self._writer[first:stop] if w >= 0}

    def write(self, lo: int, hi: int, kernel: int) -> None:
        first, stop = self._cut(lo), self._cut(hi)
        self._bounds[first:stop] = [lo]
        self._writer[first:stop] = [kernel]

    def _cut(self, at: int) -> int:
        """Split the segment holding element `at` there; the index of the segment starting at `at`."""
        index = bisect_right(self._bounds, at) - 1
        if self._bounds[index] == at:
            return index
        self._bounds.insert(index + 1, at)
        self._writer.insert(index + 1, self._writer[index])
        return index + 1


def _net(kernel: int, alloc: int, freed: int, last_producer: int) -> tuple:
    return (alloc - freed, alloc, kernel)


def _branch(kernel: int, alloc: int, freed: int, last_producer: int) -> tuple:
    return (-last_producer, alloc - freed, kernel)


STRATEGIES: dict[str, Cost] = {"net": _net, "branch": _branch}


def list_schedule(program: Program, preds: Sequence[set[int]], cost: Cost, alignment: int) -> list[int]:
    """A topological order of the kernels, choosing among the ready ones by `cost` (whose keys
    must differ between kernels: they end with the kernel's index).

    The ready kernels wait in a heap by cost. A kernel's cost changes only when a buffer it
    touches starts (its first kernel ran: no longer allocated by the others) or gets down to its
    last user (that one frees it), so only then are the ready kernels touching it costed again;
    older heap entries are skipped as stale. Each buffer does so twice, which keeps the whole
    schedule O(accesses log n) where taking the cheapest of all ready kernels at every step was
    quadratic (a Concat of 10,000 branches has 10,000 ready kernels at a time)."""
    n = len(program.kernels)
    succs: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(p) for p in preds]
    for k, ps in enumerate(preds):
        for p in ps:
            succs[p].append(k)
    sizes: dict[Tensor, int] = {}
    touches: list[set[Tensor]] = []
    remaining: dict[Tensor, int] = {}
    users: dict[Tensor, list[int]] = {}  # root -> the kernels touching it
    for k, bindings in enumerate(program.bindings):
        roots = {t for t in bindings if program.storage[t].kind == ARENA}
        for t in bindings:
            sizes[t] = align_up(max(t.nbytes, 1), alignment)
        for r in roots:
            remaining[r] = remaining.get(r, 0) + 1
            users.setdefault(r, []).append(k)
        touches.append(roots)
    started: set[Tensor] = set()
    done_at: dict[int, int] = {}  # kernel -> position in the new order
    ready = [False] * n
    current: dict[int, tuple] = {}  # ready kernel -> its cost now
    heap: list[tuple[tuple, int]] = []

    def offer(k: int) -> None:
        alloc = sum(sizes[r] for r in touches[k] if r not in started)
        freed = sum(sizes[r] for r in touches[k] if remaining[r] == 1)
        last_producer = max((done_at[p] for p in preds[k]), default=-1)
        key = cost(k, alloc, freed, last_producer)
        if current.get(k) != key:
            current[k] = key
            heapq.heappush(heap, (key, k))

    for k in range(n):
        if waiting[k] == 0:
            ready[k] = True
            offer(k)
    order: list[int] = []
    while heap:
        key, k = heapq.heappop(heap)
        if not ready[k] or current[k] != key:
            continue  # ran already, or costed again since
        ready[k] = False
        done_at[k] = len(order)
        order.append(k)
        changed = []
        for r in touches[k]:
            if r not in started:
                started.add(r)
                changed.append(r)
            remaining[r] -= 1
            if remaining[r] == 1:
                changed.append(r)
        for r in changed:
            for user in users[r]:
                if ready[user]:
                    offer(user)
        for s in succs[k]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready[s] = True
                offer(s)
    assert len(order) == n, "kernel dependencies have a cycle"
    return order


def peak_bytes(program: Program, alignment: int,
               candidates: Mapping[int, Sequence[tuple[int, int]]] | None = None) -> int:
    """The planner's lower bound for the program in its current order (after in-place merging)."""
    buffers, _ = buffer_intervals(arena_intervals(program), find_in_place(program, candidates))
    return lower_bound(buffers, alignment)


def choose_order(program: Program, alignment: int,
                 candidates: Mapping[int, Sequence[tuple[int, int]]] | None = None) -> tuple[list[int], str]:
    """The kernel order with the smallest peak, and the strategy that found it ("original" when
    no strategy beats the lowering's order)."""
    n = len(program.kernels)
    identity = list(range(n))
    if n < 3:
        return identity, "original"
    preds = dependencies(program)
    best: tuple[int, list[int], str] | None = None
    for name, cost in STRATEGIES.items():
        order = list_schedule(program, preds, cost, alignment)
        if order == identity:
            continue  # a chain, or the lowering's order already: nothing to compare
        if best is None:  # the original's peak, computed only when there is an alternative
            best = (peak_bytes(program, alignment, candidates), identity, "original")
        peak = peak_bytes(program.reordered(order), alignment, candidates)
        if peak < best[0]:
            best = (peak, order, name)
    if best is None:
        return identity, "original"
    return best[1], best[2]


def in_run_order(program: Program, order: list[int], in_place: Sequence[tuple[int, int, int]] = ()) -> Program:
    """A new Program running `program`'s kernels in `order`, with the in-place pairs chosen for
    that order, each pair's kernel loading its input through its output param (one pointer to
    the shared buffer); `program` keeps its kernels and their names. When the order is not the
    lowering's, the kernels are copies renamed k0, k1, ... so generated code reads in execution
    order."""
    ordered = program.reordered(order)
    if order != list(range(len(order))):
        ordered.kernels = [replace(kernel, name=f"k{i}") for i, kernel in enumerate(ordered.kernels)]
    pairs: dict[int, list[tuple[int, int]]] = {}
    for k, out_param, in_param in in_place:
        pairs.setdefault(k, []).append((out_param, in_param))
    ordered.kernels = [reading_through_output(kernel, pairs[k]) if k in pairs else kernel
                       for k, kernel in enumerate(ordered.kernels)]
    return replace(ordered, in_place=tuple(in_place))
