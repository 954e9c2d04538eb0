"""Concat without copies: each input is written by its producer straight into its slice of the
Concat output, so the Concat itself does nothing.

Possible when the slice is contiguous (every dimension before the axis is 1, e.g. batch-1 NCHW
channel concat as in SqueezeNet, Inception, DenseNet), and the input is an ordinary intermediate:
made by a kernel, not a graph input, constant, view or graph output of its own, and listed once.
Decided before lowering, because the producer's kernel must already know where to write.
"""

from __future__ import annotations

from collections import Counter

from aot.ir.graph import Graph, Tensor
from aot.ir.sizes import element_count

_VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout")


def _placeable(graph: Graph, t: Tensor, listed: Counter[Tensor], claimed: set[Tensor]) -> bool:
    producer = t.producer
    return (producer is not None and producer.op_type not in _VIEW_OPS and not t.is_constant
            and not graph.is_output(t) and t not in claimed
            and listed[t] == 1 and t.size > 0)


def plan_concat_in_place(graph: Graph) -> list[tuple[Tensor, Tensor, int]]:
    """(part, concat output, element offset) for every Concat input that can be written in place."""
    placements: list[tuple[Tensor, Tensor, int]] = []
    claimed: set[Tensor] = set()
    for node in graph.nodes:
        out = node.outputs[0] if node.op_type == "Concat" and node.outputs else None
        if out is None or out.size == 0:
            continue
        axis = int(node.attr("axis", 1))
        axis = axis + out.rank if axis < 0 else axis
        if element_count(out.shape[:axis]) != 1:
            continue  # each part would be strided: a copy is simpler and as fast
        inner = element_count(out.shape[axis + 1:])
        offset = 0
        listed = Counter(t for t in node.inputs if t is not None)  # how often the Concat lists each input
        for t in node.inputs:
            if t is None or t.size == 0:
                continue
            if _placeable(graph, t, listed, claimed):
                placements.append((t, out, offset))
                claimed.add(t)
            offset += t.shape[axis] * inner
    return placements
