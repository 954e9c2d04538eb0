"""Planning a Program's arena: kernel order, in-place reuse, offsets, and a check of the result.

The steps, in order (each its own module):
1. schedule.py picks the kernel order with the smallest peak of live memory;
2. in_place.py decides which kernels write their output over a dying input, in that order;
3. liveness.py turns tensors into buffers (in-place chains joined) with live ranges;
4. memory.py places the buffers; its lower bound is over the joined buffers, so it already counts
   the memory in-place reuse saves.
Then every arena tensor gets its buffer's offset, and the tensors are checked once more: two
tensors live at the same step may share bytes only as an in-place pair at the one kernel where
the input dies and the output is born, and each pair's kernel is traced to load no input element
after storing that output element (in_place.verify_in_place).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from aot.kernel.ir import Kernel
from aot.lowering.program import Program
from aot.planner.in_place import InPlace, find_in_place, in_place_candidates, verify_in_place
from aot.planner.intervals import Span, find_live_overlap
from aot.planner.liveness import arena_intervals, buffer_intervals
from aot.planner.memory import Interval, MemoryPlan, align_up, plan_memory
from aot.planner.schedule import choose_order, in_run_order


@dataclass(frozen=True)
class PlannedProgram:
    """What the planner decided for a lowered program, as a value: the program with its kernels
    in the order they run and the in-place pairs for that order (a new Program: the lowered one
    is not changed), every arena tensor's offset, and how the order was chosen. The printers
    (aot/package/c_sources.py, aot/backends/llvm/) take this, so they cannot see an unplanned
    program."""

    program: Program
    memory: MemoryPlan
    schedule: str  # the strategy of aot/planner/schedule.py that gave the order ("original": the lowering's)

    @property
    def kernels(self) -> list[Kernel]:
        return self.program.kernels


def plan_program(program: Program, alignment: int = 64, reorder: bool = True, in_place: bool = True) -> PlannedProgram:
    """The plan of `program`'s arena (offsets keyed by tensor name), with the kernel order for the
    smallest peak (unless `reorder` is false) and the in-place pairs (unless `in_place` is false)."""
    candidates = {id(k): in_place_candidates(k) if in_place else [] for k in program.kernels}
    order, strategy = choose_order(program, alignment, candidates) if reorder else (list(range(len(program.kernels))),
                                                                                    "original")
    ordered = program.reordered(order)
    pairs = find_in_place(ordered, candidates)
    tensors = arena_intervals(ordered)
    buffers, joined = buffer_intervals(tensors, pairs)
    plan = plan_memory(buffers, alignment)
    offsets = {t.key: plan.offsets[joined.get(t.key, t.key)] for t in tensors}
    verify_sharing(tensors, offsets, pairs, alignment)
    verify_in_place(ordered, pairs)
    # "Unshared" stays the arena with no sharing at all, each tensor on its own.
    unshared = sum(align_up(max(t.size, 1), alignment) for t in tensors)
    run = in_run_order(program, order, [(p.kernel, p.out_param, p.in_param) for p in pairs])
    return PlannedProgram(run, replace(plan, offsets=offsets, unshared_bytes=unshared), strategy)


def verify_sharing(tensors: Sequence[Interval], offsets: dict[str, int], pairs: Sequence[InPlace],
                   alignment: int) -> None:
    """Tensors live at the same step overlap in memory only as an in-place pair at its kernel."""
    allowed = {(p.input, p.output): p.kernel for p in pairs}
    by_key = {t.key: t for t in tensors}

    def in_place(x: Span, y: Span) -> bool:
        a, b = by_key[x.key], by_key[y.key]
        step = allowed.get((a.key, b.key), allowed.get((b.key, a.key)))
        shared = {a.start, a.end} & {b.start, b.end}
        return (step is not None and (a.end == b.start or b.end == a.start) and shared == {step}
                and x.lo == y.lo)  # (a strided depthwise conv writes a smaller output over its input)

    spans = [Span(t.key, t.start, t.end, offsets[t.key], offsets[t.key] + align_up(max(t.size, 1), alignment))
             for t in tensors]
    clash = find_live_overlap(spans, in_place)
    if clash is not None:
        raise AssertionError(f"tensors {clash[0].key} and {clash[1].key} are live together and overlap")
