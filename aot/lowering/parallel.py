"""Choosing the loops that run on several threads (see aot/kernel/parallel.py for what the
backends make of them).

The op lowerings know which of their loops have independent iterations; these helpers mark one
top-level loop of a kernel `parallel` when the kernel is big enough to pay for a fork/join
(waking the pool's workers and waiting for the last one costs microseconds; a kernel of
PARALLEL_MIN_WORK multiply-adds or elements takes tens of them on one core), and only when the
target has threads at all (LoweringContext.parallel).
"""

from __future__ import annotations

from collections.abc import Callable

from aot.kernel.ir import INDEX, Expr, If, Loop, Stmt, binary, const, lt
from aot.lowering.builder import KernelBuilder

# Multiply-adds (or, for memory-bound kernels, elements) below which a kernel stays serial.
PARALLEL_MIN_WORK = 1 << 16
# Kernels whose iterations reuse a scratch buffer get one copy of it per "slot", and their
# parallel loop runs over the slots (each a contiguous run of the iterations): a compile-time
# bound on the threads such a kernel can use, since the arena is sized at compile time.
SCRATCH_SLOTS = 4


def pays(ctx, work: int) -> bool:  # noqa: ANN001 - LoweringContext (import cycle)
    """Whether a kernel of `work` multiply-adds / elements should get a parallel loop."""
    return bool(ctx.parallel) and work >= PARALLEL_MIN_WORK


def mark_outer(stmts: list[Stmt]) -> list[Stmt]:
    """Marks the last top-level statement parallel when it is a loop of 2+ iterations (the
    outermost loop of a loop nest, after any prologue the caller put before it)."""
    if stmts and isinstance(stmts[-1], Loop) and stmts[-1].extent >= 2:
        stmts[-1].parallel = True
    return stmts


def parallel_blocks(kb: KernelBuilder, total: int, size: int, emit: Callable[[Expr, int], list[Stmt]],
                    prefix: str) -> list[Stmt]:
    """aot/ops/contraction/row_updates.py `blocks` with its loop over the full blocks parallel; a shorter
    tail block follows serially. (The tail as the loop's last iteration, behind a branch in
    every iteration, cost 2.5% of SqueezeNet's single-thread time: the compilers lay out and
    allocate the branchy tile loop worse.)"""
    size = max(1, min(size, total))
    full, tail = divmod(total, size)
    stmts: list[Stmt] = []
    if full >= 2:
        var = kb.var(prefix)
        stmts.append(Loop(var, full, emit(var * size, size), parallel=True))
    elif full == 1:
        stmts += emit(const(0, INDEX), size)
    if tail:
        # In a loop of one trip: its locals must not sit at the kernel's top level, where the
        # parallel loop's segments would have to share them (aot/kernel/parallel.py).
        once = kb.var(prefix)
        stmts.append(Loop(once, 1, emit(const(full * size, INDEX), tail)))
    return stmts


def slot_blocks(kb: KernelBuilder, total: int, size: int, emit: Callable[[Expr, int, Expr], list[Stmt]],
                prefix: str, slots: int) -> list[Stmt]:
    """`blocks` over [0, total) with its full blocks as a parallel loop over `slots` slots, each
    a contiguous run of blocks (as even as integer division makes them); `emit(start, count,
    slot)` builds one block and puts its scratch at `slot`. Iterations of different slots may
    run at once, blocks of one slot never do, so a scratch per slot suffices. A shorter tail
    block follows serially, at slot 0 (as in parallel_blocks: the tail as a branch inside every
    iteration cost about 2% of SqueezeNet's single-thread time)."""
    size = max(1, min(size, total))
    full, tail = divmod(total, size)
    stmts: list[Stmt] = []
    if full:
        slots = max(1, min(slots, full))
        slot = kb.var("slot")
        per = -(-full // slots)
        t = kb.var(prefix)
        if full % slots == 0:
            body = (emit(slot * size, size, slot) if per == 1
                    else [Loop(t, per, emit((slot * per + t) * size, size, slot))])
        else:
            # Slot s covers blocks [s * full / slots, (s + 1) * full / slots).
            start = binary("div", slot * full, const(slots, INDEX))
            stop = binary("div", (slot + 1) * full, const(slots, INDEX))
            body = [Loop(t, per, [If(lt(start + t, stop), emit((start + t) * size, size, slot))])]
        stmts.append(Loop(slot, slots, body, parallel=slots >= 2))
    if tail:
        # In a loop of one trip: its locals must not sit at the kernel's top level, where a
        # parallel loop's segments would have to share them (aot/kernel/parallel.py).
        once = kb.var(prefix)
        stmts.append(Loop(once, 1, emit(const(full * size, INDEX), tail, const(0, INDEX))))
    return stmts


__all__ = ["PARALLEL_MIN_WORK", "SCRATCH_SLOTS", "mark_outer", "parallel_blocks", "pays", "slot_blocks"]
