"""Which nodes run fused in one kernel.

An anchor (Conv, Gemm, MatMul, or an elementwise op) absorbs the elementwise ops that follow it
as its epilogue, applied to each value before its single store: bias, residual Add, BatchNorm,
Relu/Clip/Sigmoid/HardSwish/Gelu... The absorbed ops need not form a chain: an epilogue is a
small DAG over the anchor's output that ends in one node, such as SiLU's diamond
`x -> Sigmoid -> Mul(x, .)` or PyTorch's Erf form of GELU (Div, Erf, Add, Mul(x, .), Mul), which
read the anchor's output twice. Every tensor inside the DAG is read only by DAG members and is
not a graph output, so none of them is written to memory; only the last node's output is, and
every node keeps the anchor's shape and dtype. Side inputs of the epilogue (a residual, a
per-channel scale) are read with broadcasting at the output index.

The fused kernel runs where the epilogue's last node was in the schedule, so every side input is
ready by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aot.ir.affine import ANCHORS
from aot.ir.graph import Graph, Node, Tensor
from aot.lowering.forms import is_elementwise

# The most nodes one step of growth may absorb before the DAG closes on a single tensor: enough
# for GELU's tanh form (Pow, Mul, Add, Mul, Tanh, Add, Mul, Mul); it bounds the search when a
# tensor's readers never join again.
MAX_STEP = 12


@dataclass
class FusionPlan:
    chains: dict[Node, list[Node]] = field(default_factory=dict)  # anchor -> epilogue nodes, in graph order
    absorbed: dict[Node, Node] = field(default_factory=dict)      # epilogue node -> its anchor
    last: dict[Node, Node] = field(default_factory=dict)          # last node of an epilogue -> anchor

    def chain(self, anchor: Node) -> list[Node]:
        return self.chains.get(anchor, [])


def _can_anchor(node: Node) -> bool:
    out = node.outputs[0] if node.outputs else None
    if out is None or len([o for o in node.outputs if o is not None]) != 1:
        return False
    if node.op_type == "MatMul":  # 1-D operands drop dimensions: the epilogue indexes the full shape
        return all(t is not None and t.rank >= 2 for t in node.inputs[:2])
    return node.op_type in ANCHORS or is_elementwise(node)


class _Planner:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.position = {node: i for i, node in enumerate(graph.nodes)}
        self.plan = FusionPlan()

    def fits(self, node: Node, like: Tensor, converts: bool = False) -> bool:
        """Whether `node` may join an epilogue over tensors shaped like `like`: elementwise, not in
        another epilogue, and of the same shape and dtype as the anchor's output (kernels may
        accumulate in the final buffer before the epilogue runs; a Cast to another type ends it).
        With `converts` (an elementwise anchor, which stores each value once) its type may differ:
        a QuantizeLinear or Cast then closes the epilogue, written in its own type."""
        out = node.outputs[0] if node.outputs else None
        return node not in self.plan.absorbed and is_elementwise(node) and out is not None \
            and out.shape == like.shape and (out.dtype == like.dtype or converts)

    def open_after(self, tensors: set[Tensor], members: set[Node]) -> set[Tensor]:
        """The tensors of the DAG still read outside it (or returned by the graph)."""
        return {t for t in tensors if self.graph.is_output(t) or any(c not in members for c in t.consumers)}

    def grow(self, tail: Tensor, taken: set[Node], converts: bool = False) -> list[Node]:
        """The fewest nodes after `tail` that close on one tensor: every tensor among `tail` and
        their outputs, but the last node's, is read only by them. Empty when there are none (a
        reader that cannot fuse, a graph output, readers that never join again).

        Members are taken in graph order, earliest reader first, so each reads only tensors that
        are ready (side inputs come from nodes scheduled before it)."""
        members: list[Node] = []
        inside = set(taken)
        internal = {tail}
        open_tensors = self.open_after(internal, inside)
        while open_tensors and len(members) < MAX_STEP:
            readers = [c for t in open_tensors for c in t.consumers if c not in inside]
            if not readers:
                return []  # a graph output inside the DAG: it must be stored
            node = min(readers, key=self.position.__getitem__)
            if not self.fits(node, tail, converts):
                return []
            members.append(node)
            inside.add(node)
            out = node.outputs[0]
            assert out is not None
            internal.add(out)
            open_tensors = self.open_after(internal, inside)
            if open_tensors <= {out}:
                return members
            if out.dtype != tail.dtype:
                return []  # a conversion must be the DAG's last node: nothing reads its output inside
        return []

    def epilogue(self, anchor: Node) -> list[Node]:
        out = anchor.outputs[0]
        assert out is not None
        members: list[Node] = []
        tail = out
        converts = is_elementwise(anchor)
        while not self.graph.is_output(tail) and tail.dtype == out.dtype:
            step = self.grow(tail, {anchor, *members}, converts)
            if not step:
                break
            members += step
            tail = step[-1].outputs[0]
            assert tail is not None
        return members

    def run(self) -> FusionPlan:
        plan = self.plan
        for node in self.graph.nodes:
            if node in plan.absorbed or not _can_anchor(node):
                continue
            members = self.epilogue(node)  # (a node with two fusable producers joins the first one's)
            if members:
                plan.chains[node] = members
                for member in members:
                    plan.absorbed[member] = node
                plan.last[members[-1]] = node
        return plan


def plan_fusion(graph: Graph) -> FusionPlan:
    return _Planner(graph).run()
