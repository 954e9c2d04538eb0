"""Model statistics for `aot inspect`: op counts, parameters and multiply-accumulates."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from aot.ir.graph import Graph, Node, Tensor
from aot.ir.sizes import element_count

Shape = Sequence[int]


def op_macs(op_type: str, inputs: Sequence[Shape | None], output: Shape | None, trans_a: bool = False) -> int:
    """Multiply-accumulates of the ops that dominate compute, from their operands' shapes alone
    (also what onnxruntime's profiler reports of its nodes: benchmarks/layers.py); 0 for the rest.
    `trans_a`: Gemm's (or QGemm's) transA."""
    def shape(i: int) -> Shape | None:
        return inputs[i] if i < len(inputs) else None

    if op_type in RECURRENT_OPS:
        return _recurrent_macs(shape(0), shape(1), shape(2))
    if output is None:
        return 0

    out = element_count(output)
    if op_type in ("QLinearConv", "ConvInteger", "Conv"):  # the weights are input 3 (QLinearConv) or 1
        w = shape(3 if op_type == "QLinearConv" else 1)
        return out * element_count(w[1:]) if w is not None else 0
    if op_type == "ConvTranspose":
        x, w = shape(0), shape(1)
        # Every input element meets each of its group's output channels through every tap.
        return element_count(x) * element_count(w[1:]) if x is not None and w is not None else 0
    if op_type in ("QLinearMatMul", "MatMulInteger", "QGemm", "Gemm", "MatMul", "MatMulNBits"):
        a = shape(0)
        return out * (a[0] if trans_a else a[-1]) if a is not None else 0
    return 0


RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def _recurrent_macs(x: Shape | None, w: Shape | None, r: Shape | None) -> int:
    """Every step of every sequence multiplies its input by W and its hidden state by R, in
    each direction: W and R hold all gates of all directions."""
    if x is None or w is None or r is None or not x or not x[-1]:
        return 0
    steps = element_count(x) // x[-1]  # sequence x batch, in either layout
    return steps * (element_count(w) + element_count(r))


def node_macs(node: Node) -> int:
    """Multiply-accumulates of the ops that dominate compute; 0 for the rest."""
    out = next((t for t in node.outputs if t is not None), None)
    return op_macs(node.op_type, [t.shape if t is not None else None for t in node.inputs],
                   out.shape if out is not None else None, bool(node.attr("transA", 0)))


@dataclass
class ModelStats:
    op_counts: dict[str, int]
    unsupported: dict[str, list[str]]
    parameters: int
    weights_bytes: int
    macs: int
    per_node_macs: list[tuple[str, str, int]] = field(default_factory=list)


# Element types an ONNX file stores two to a byte (numpy holds them one to a byte).
PACKED_4BIT = frozenset({"int4", "uint4", "float4_e2m1fn"})


def _file_bytes(t: Tensor) -> int:
    """A constant's size as the model file stores it."""
    return (t.size + 1) // 2 if t.dtype.name in PACKED_4BIT else t.nbytes


def model_stats(graph: Graph) -> ModelStats:
    counts = Counter(n.qualified_op for n in graph.nodes)  # by domain too: as support is decided
    consts = [t for t in graph.tensors.values() if t.is_constant]
    per_node = [(n.name, n.op_type, node_macs(n)) for n in graph.nodes]
    return ModelStats(
        op_counts=dict(sorted(counts.items())),
        unsupported=dict(graph.unsupported),
        parameters=sum(t.size for t in consts if t.dtype.kind == "f"),
        weights_bytes=sum(_file_bytes(t) for t in consts),
        macs=sum(m for _, _, m in per_node),
        per_node_macs=per_node,
    )
