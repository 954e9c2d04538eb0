"""Model statistics for `aot inspect`: op counts, parameters and multiply-accumulates."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from aot.ir.graph import Graph, Node
from aot.ir.sizes import element_count


def node_macs(node: Node) -> int:
    """Multiply-accumulates of the ops that dominate compute; 0 for the rest."""
    out = node.outputs[0] if node.outputs else None
    if out is None:
        return 0
    if node.op_type in ("QLinearConv", "ConvInteger"):  # the weights are input 3 (QLinearConv) or 1
        w = node.input(3 if node.op_type == "QLinearConv" else 1)
        return out.size * element_count(w.shape[1:]) if w is not None else 0
    if node.op_type in ("QLinearMatMul", "MatMulInteger", "QGemm"):
        a = node.input(0)
        k = (a.shape[0] if node.attr("transA", 0) else a.shape[-1]) if a is not None else 0
        return out.size * k
    if node.op_type == "Conv" and node.input(1) is not None:
        w = node.inputs[1]
        assert w is not None
        return out.size * element_count(w.shape[1:])
    if node.op_type == "ConvTranspose" and node.input(0) is not None and node.input(1) is not None:
        x, w = node.inputs[0], node.inputs[1]
        assert x is not None and w is not None
        # Every input element meets each of its group's output channels through every tap.
        return x.size * element_count(w.shape[1:])
    if node.op_type == "Gemm" and node.input(0) is not None:
        a = node.inputs[0]
        assert a is not None
        k = a.shape[0] if node.attr("transA", 0) else a.shape[-1]
        return out.size * k
    if node.op_type == "MatMul" and node.input(0) is not None:
        a = node.inputs[0]
        assert a is not None
        return out.size * a.shape[-1]
    return 0


@dataclass
class ModelStats:
    op_counts: dict[str, int]
    unsupported: dict[str, list[str]]
    parameters: int
    weights_bytes: int
    macs: int
    per_node_macs: list[tuple[str, str, int]] = field(default_factory=list)


def model_stats(graph: Graph) -> ModelStats:
    counts = Counter(n.op_type for n in graph.nodes)
    consts = [t for t in graph.tensors.values() if t.is_constant]
    per_node = [(n.name, n.op_type, node_macs(n)) for n in graph.nodes]
    return ModelStats(
        op_counts=dict(sorted(counts.items())),
        unsupported=dict(graph.unsupported),
        parameters=sum(t.size for t in consts if t.dtype.kind == "f"),
        weights_bytes=sum(t.nbytes for t in consts),
        macs=sum(m for _, _, m in per_node),
        per_node_macs=per_node,
    )
