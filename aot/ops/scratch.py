"""Intermediate tensors a lowering creates for itself (scratch between the kernels of one node).

A tensor that some kernel binds and that is neither a graph input, a graph output nor a constant
gets arena storage from lower_graph, and the memory planner gives it the lifetime of the kernels
that bind it, like any other intermediate. So a node lowered to several kernels (an RNN's input
projection followed by its recurrence) passes data through a tensor made here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.lowering.context import LoweringContext


def scratch_tensor(ctx: LoweringContext, node: Node, shape: Sequence[int], dtype: np.dtype | str,
                   hint: str) -> Tensor:
    """A fresh arena tensor named after `node` (names must be unique: the planner keys on them)."""
    return ctx.new_tensor(f"{node.name}__{hint}", np.dtype(dtype), shape)
