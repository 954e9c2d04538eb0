"""Splitting a kernel at its parallel loops, for the backends.

A lowering marks a top-level loop of a kernel `parallel` (aot/kernel/ir.py Loop) when its
iterations are independent. Each backend then emits the kernel as *segments*, in body order:

* a serial segment -- a run of ordinary statements -- is a function `void f(params)`, called
  once by the run function, exactly like a kernel without parallel loops;
* a parallel segment -- one parallel loop -- is a function `void f(params, int32_t first,
  int32_t last)` that runs iterations [first, last) of that loop. The run function hands it to
  the executor (aot_runtime.h: aot_parallel_for), which calls it over disjoint ranges covering
  [0, extent), on several threads or, without an executor, once with [0, extent).

Every iteration executes the same code whichever thread runs it, so a threaded run gives
bit-identical results. A segment takes only the params its statements use (C compilers reject
unused parameters under -Wextra -Werror); `params` maps them back to the kernel's.
A kernel without parallel loops is one serial segment: the kernel itself, unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from aot.kernel.ir import (
    Assign,
    Buffer,
    Declare,
    Expr,
    If,
    Kernel,
    Load,
    Loop,
    Stmt,
    Store,
    VecLoad,
    VecStore,
    expr_children,
    walk_stmts,
)


@dataclass(frozen=True)
class Segment:
    kernel: Kernel            # the segment as a kernel of its own (name, used params, statements)
    params: tuple[int, ...]   # for each of its params, the index in the whole kernel's params
    extent: int | None        # the parallel loop's trip count; None for a serial segment

    @property
    def parallel(self) -> bool:
        return self.extent is not None


def has_parallel(kernel: Kernel) -> bool:
    return any(isinstance(s, Loop) and s.parallel for s in kernel.body)


def serial_copy(kernel: Kernel) -> Kernel:
    """The kernel named `<name>s`, with its parallel loops as ordinary ones: what a backend runs
    when there are no threads, with every loop bound a constant."""
    body = [dataclasses.replace(s, parallel=False) if isinstance(s, Loop) and s.parallel else s for s in kernel.body]
    return Kernel(f"{kernel.name}s", kernel.params, body, kernel.sources, kernel.op)


def segments(kernel: Kernel) -> list[Segment]:
    """The kernel's segments in execution order (see the module docstring)."""
    check_parallel(kernel)
    if not has_parallel(kernel):
        return [Segment(kernel, tuple(range(len(kernel.params))), None)]
    parts: list[tuple[list[Stmt], int | None]] = []
    for stmt in kernel.body:
        if isinstance(stmt, Loop) and stmt.parallel:
            parts.append(([stmt], stmt.extent))
        elif parts and parts[-1][1] is None:
            parts[-1][0].append(stmt)
        else:
            parts.append(([stmt], None))
    out = []
    for number, (body, extent) in enumerate(parts):
        used = buffers_used(body)
        indices = tuple(i for i, b in enumerate(kernel.params) if b.name in used)
        name = kernel.name if len(parts) == 1 else f"{kernel.name}_{number}"
        sub = Kernel(name, [kernel.params[i] for i in indices], body, kernel.sources, kernel.op)
        out.append(Segment(sub, indices, extent))
    return out


def check_parallel(kernel: Kernel) -> None:
    """Parallel loops only at the top level, with a positive trip count, and no top-level local
    variables next to them (they would have to cross from one segment's function to another)."""
    top = set(map(id, kernel.body))
    parallel = [s for s in walk_stmts(kernel.body) if isinstance(s, Loop) and s.parallel]
    if not parallel:
        return
    for s in parallel:
        if id(s) not in top:
            raise ValueError(f"{kernel.name}: parallel loop {s.var.name} is not at the top level of the kernel")
        if s.extent <= 0:
            raise ValueError(f"{kernel.name}: parallel loop {s.var.name} has no iterations")
    for s in kernel.body:
        if isinstance(s, (Declare, Assign)):
            raise ValueError(f"{kernel.name}: top-level local {s.var.name} in a kernel with parallel loops")


def buffers_used(body: list[Stmt]) -> set[str]:
    """Names of the buffers the statements load from or store to."""
    names: set[str] = set()
    for s in walk_stmts(body):
        exprs: list[Expr] = []
        if isinstance(s, (Store, VecStore)):
            names.add(s.buffer.name)
            exprs = [s.index, s.value]
        elif isinstance(s, (Declare, Assign)):
            exprs = [s.init if isinstance(s, Declare) else s.value]
        elif isinstance(s, If):
            exprs = [s.cond]
        for e in exprs:
            _expr_buffers(e, names)
    return names


def _expr_buffers(e: Expr, names: set[str]) -> None:
    stack = [e]
    seen: set[int] = set()  # by identity: fused chains share operands, their trees are exponential
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (Load, VecLoad)):
            names.add(e.buffer.name)
        stack += expr_children(e)


__all__ = ["Buffer", "Segment", "buffers_used", "check_parallel", "has_parallel", "segments"]
