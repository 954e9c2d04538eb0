"""Which nodes run fused in one kernel.

An anchor (Conv, Gemm, MatMul, or an elementwise op) absorbs the chain of elementwise ops that
follow it while each link's output has exactly one reader, is not a graph output, and keeps the
anchor's shape: bias, residual Add, BatchNorm, Relu/Clip/Sigmoid/HardSwish/Gelu... become the
anchor's epilogue, applied to each value before its single store. The chain's intermediate
tensors are never written to memory. Side inputs of the chain (a residual, a per-channel scale)
are read with broadcasting at the output index.

The fused kernel runs where the chain's last node was in the schedule, so every side input is
ready by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aot.ir.affine import ANCHORS
from aot.ir.graph import Graph, Node
from aot.lowering.forms import is_elementwise


@dataclass
class FusionPlan:
    chains: dict[Node, list[Node]] = field(default_factory=dict)  # anchor -> epilogue nodes, in order
    absorbed: dict[Node, Node] = field(default_factory=dict)      # epilogue node -> its anchor
    last: dict[Node, Node] = field(default_factory=dict)          # last node of a chain -> anchor

    def chain(self, anchor: Node) -> list[Node]:
        return self.chains.get(anchor, [])


def _can_anchor(node: Node) -> bool:
    out = node.outputs[0] if node.outputs else None
    if out is None or len([o for o in node.outputs if o is not None]) != 1:
        return False
    if node.op_type == "MatMul":  # 1-D operands drop dimensions: the epilogue indexes the full shape
        return all(t is not None and t.rank >= 2 for t in node.inputs[:2])
    return node.op_type in ANCHORS or is_elementwise(node)


def plan_fusion(graph: Graph) -> FusionPlan:
    plan = FusionPlan()
    for node in graph.nodes:
        if node in plan.absorbed or not _can_anchor(node):
            continue
        chain: list[Node] = []
        tail = node.outputs[0]
        assert tail is not None
        while True:
            if graph.is_output(tail) or len(tail.consumers) != 1:
                break
            follower = tail.consumers[0]
            out = follower.outputs[0] if follower.outputs else None
            # Same shape and dtype as the anchor's own output: kernels may accumulate in the final
            # buffer before the epilogue runs (a Cast to another type ends the chain).
            if follower in plan.absorbed or not is_elementwise(follower) or out is None \
                    or out.shape != tail.shape or out.dtype != tail.dtype:
                break  # (a follower with two fusable producers joins the first one's chain)
            chain.append(follower)
            tail = out
        if chain:
            plan.chains[node] = chain
            for member in chain:
                plan.absorbed[member] = node
            plan.last[chain[-1]] = node
    return plan
