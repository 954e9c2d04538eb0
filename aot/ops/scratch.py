"""Intermediate tensors a lowering creates for itself (scratch between the kernels of one node).

A tensor that some kernel binds and that is neither a graph input, a graph output nor a constant
gets arena storage from lower_graph, and the memory planner gives it the lifetime of the kernels
that bind it, like any other intermediate. So a node lowered to several kernels (an RNN's input
projection followed by its recurrence) passes data through a tensor made here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, Stmt, const
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext


def scratch_tensor(ctx: LoweringContext, node: Node, shape: Sequence[int], dtype: np.dtype | str,
                   hint: str) -> Tensor:
    """A fresh arena tensor named after `node` (names must be unique: the planner keys on them)."""
    return ctx.new_tensor(f"{node.name}__{hint}", np.dtype(dtype), shape)


def fill_phase_border(kb: KernelBuilder, store: Callable[[Expr, Expr, Expr], Stmt], shape: tuple[int, int, int],
                      rows: tuple[int, int], columns: list[tuple[int, int]]) -> list[Stmt]:
    """Statements storing the padding value (through `store(row, phase, column)`) in the cells of
    a [row][phase][column] scratch image that a copy of the input leaves untouched: every row
    outside `rows`, and in those rows, the columns of each phase outside its `columns` range.
    Filling only the border, not the whole image before the copy, halves the stores of a copy
    without padding (a strided stem or MaxPool)."""
    height, phases, per_phase = shape
    first, last = rows
    stmts: list[Stmt] = []
    for a, b in ((0, first), (last, height)):
        if b > a:
            stmts += kb.loops([b - a, phases, per_phase], lambda i, a=a: [store(i[0] + a, i[1], i[2])], prefix="z")
    for phase, (lo, hi) in enumerate(columns):
        for a, b in ((0, lo), (max(lo, hi), per_phase)):
            if b > a and last > first:
                stmts += kb.loops([last - first, b - a], lambda i, a=a, phase=phase: [
                    store(i[0] + first, const(phase, INDEX), i[1] + a)], prefix="z")
    return stmts
