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

from collections.abc import Callable, Mapping, Sequence

from aot.lowering.program import ARENA, INPUT, WEIGHT, Program
from aot.planner.in_place import find_in_place
from aot.planner.liveness import arena_intervals, buffer_intervals
from aot.planner.memory import align_up, lower_bound

Cost = Callable[[int, int, int, int], tuple]  # (kernel, bytes allocated, bytes freed, last producer) -> key


def dependencies(program: Program) -> list[set[int]]:
    """For each kernel, the earlier kernels it must follow: those touching an overlapping element
    range of the same storage, where at least one of the two writes (read-after-write,
    write-after-read, write-after-write). Storage nobody writes (weights, inputs) adds nothing."""
    accesses: dict[int, list[tuple[int, int, int, bool]]] = {}  # id(root) -> (kernel, lo, hi, writes)
    preds: list[set[int]] = []
    for k, (kernel, bindings, offsets) in enumerate(zip(program.kernels, program.bindings, program.offsets)):
        mine: set[int] = set()
        spans = []
        for buf, root, offset in zip(kernel.params, bindings, offsets):
            if program.storage[id(root)].kind in (WEIGHT, INPUT):
                continue
            lo, hi = offset, offset + max(buf.size, 1)
            for j, lo2, hi2, writes in accesses.get(id(root), ()):
                if lo < hi2 and lo2 < hi and (buf.writable or writes):
                    mine.add(j)
            spans.append((id(root), lo, hi, buf.writable))
        for root_id, lo, hi, writes in spans:
            accesses.setdefault(root_id, []).append((k, lo, hi, writes))
        preds.append(mine)
    return preds


def _net(kernel: int, alloc: int, freed: int, last_producer: int) -> tuple:
    return (alloc - freed, alloc, kernel)


def _branch(kernel: int, alloc: int, freed: int, last_producer: int) -> tuple:
    return (-last_producer, alloc - freed, kernel)


STRATEGIES: dict[str, Cost] = {"net": _net, "branch": _branch}


def list_schedule(program: Program, preds: Sequence[set[int]], cost: Cost, alignment: int) -> list[int]:
    """A topological order of the kernels, choosing among the ready ones by `cost`."""
    n = len(program.kernels)
    succs: list[list[int]] = [[] for _ in range(n)]
    waiting = [len(p) for p in preds]
    for k, ps in enumerate(preds):
        for p in ps:
            succs[p].append(k)
    sizes: dict[int, int] = {}
    touches: list[set[int]] = []
    remaining: dict[int, int] = {}
    for bindings in program.bindings:
        roots = {id(t) for t in bindings if program.storage[id(t)].kind == ARENA}
        for t in bindings:
            sizes[id(t)] = align_up(max(t.nbytes, 1), alignment)
        for r in roots:
            remaining[r] = remaining.get(r, 0) + 1
        touches.append(roots)
    started: set[int] = set()
    done_at: dict[int, int] = {}  # kernel -> position in the new order
    ready = [k for k in range(n) if waiting[k] == 0]
    order: list[int] = []
    while ready:
        def key(k: int) -> tuple:
            alloc = sum(sizes[r] for r in touches[k] if r not in started)
            freed = sum(sizes[r] for r in touches[k] if remaining[r] == 1)
            last_producer = max((done_at[p] for p in preds[k]), default=-1)
            return cost(k, alloc, freed, last_producer)

        k = min(ready, key=key)
        ready.remove(k)
        done_at[k] = len(order)
        order.append(k)
        for r in touches[k]:
            started.add(r)
            remaining[r] -= 1
        for s in succs[k]:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(s)
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


def schedule(program: Program, alignment: int,
             candidates: Mapping[int, Sequence[tuple[int, int]]] | None = None) -> str:
    """Reorder `program`'s kernels in place (see choose_order); returns the strategy used. Kernels
    are renamed k0, k1, ... in their new order so generated code reads in execution order. A
    program is scheduled once: later calls leave it as it is."""
    if program.schedule:
        return program.schedule
    order, strategy = choose_order(program, alignment, candidates)
    if strategy != "original":
        program.kernels[:] = [program.kernels[i] for i in order]
        program.bindings[:] = [program.bindings[i] for i in order]
        program.offsets[:] = [program.offsets[i] for i in order]
        for i, kernel in enumerate(program.kernels):
            kernel.name = f"k{i}"
    program.schedule = strategy
    return strategy
