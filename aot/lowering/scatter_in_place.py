"""Whether a scatter (ScatterND, ScatterElements, TensorScatter) may write its updates straight
into the storage of its `data` input, so that the copy of data into the output is skipped: a KV
cache updated at one position then costs that position, not the whole cache.

Decided while lowering, when every node before the scatter has its kernels: the output may take
data's storage when that storage is an intermediate made by a kernel (not a graph input, output
or constant, not a slice of a bigger buffer), no other input of the scatter lives in it, and every
node that reads it (through any view of it) has already been lowered. The scheduler keeps those
readers before the scatter (aot/planner/schedule.py: write-after-read).
"""

from __future__ import annotations

from aot.ir.graph import Node, Tensor
from aot.lowering.context import LoweringContext


def can_write_in_place(node: Node, ctx: LoweringContext, data: Tensor, out: Tensor) -> bool:
    """Whether `out` may take the storage of `data` (see above); `out` placed inside another
    tensor already (a Concat part) keeps its place."""
    root, offset = ctx.resolve(data)
    if ctx.root(out) is not out:
        return False
    graph = ctx.graph
    if offset != 0 or root.size != data.size or root.is_constant or root.producer is None:
        return False
    if root in graph.inputs or any(ctx.root(t) is root for t in node.inputs if t is not None and t is not data):
        return False
    sharers = [root, *(t for t in ctx.aliased_tensors() if ctx.root(t) is root)]
    if any(graph.is_output(t) for t in sharers):
        return False
    position = {n: i for i, n in enumerate(graph.nodes)}
    here = position[node]
    return all(_lowered_at(ctx, reader, position) < here
               for t in sharers for reader in t.consumers if reader is not node)


def _lowered_at(ctx: LoweringContext, node: Node, position: dict[Node, int]) -> int:
    """Where `node`'s kernel is emitted: a fused epilogue node's, or an anchor's, at the end of
    its chain (aot/lowering/program.py lower_graph)."""
    anchor = ctx.fusion.absorbed.get(node, node)
    chain = ctx.fusion.chain(anchor)
    return position.get(chain[-1] if chain else node, len(position))
