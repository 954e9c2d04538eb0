"""Where a model computes on 8-bit integers and where in float, for `aot inspect` and `aot report`.

A quantised model mixes the two: integer ops (QLinearConv, int8 MaxPool, QLinearAdd ...) where
the QDQ groups matched (aot/passes/quantized_ops.py), float ops between a DequantizeLinear and a
QuantizeLinear where they did not, and the conversions between them. Users ask which is which
(a layer left in float is slow and may be why the int8 build is not faster).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from aot.ir.graph import Graph, Node

EIGHT_BIT = (np.dtype(np.int8), np.dtype(np.uint8))
CONVERSIONS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
INT8, FLOAT, CONVERSION, OTHER = "int8", "float", "conversion", "other"


def node_precision(node: Node) -> str:
    """int8 when the node reads an 8-bit tensor computed at run time (the data, not a weight),
    conversion for QuantizeLinear/DequantizeLinear, float when it reads or writes float data."""
    if node.op_type in CONVERSIONS:
        return CONVERSION
    data = [t for t in node.inputs if t is not None and not t.is_constant]
    if any(t.dtype in EIGHT_BIT for t in data):
        return INT8
    outputs = [t for t in node.outputs if t is not None]
    if any(t.dtype.kind == "f" for t in [*data, *outputs]):
        return FLOAT
    return OTHER


@dataclass
class PrecisionSummary:
    nodes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # precision -> (node, op)
    tensor_bytes: dict[str, int] = field(default_factory=dict)  # dtype -> bytes of run-time tensors
    weight_bytes: dict[str, int] = field(default_factory=dict)  # dtype -> bytes of constants

    @property
    def quantized(self) -> bool:
        return bool(self.nodes.get(INT8)) or bool(self.nodes.get(CONVERSION))

    def to_json(self) -> dict[str, object]:
        return {
            "int8_nodes": [{"node": n, "op": op} for n, op in self.nodes.get(INT8, [])],
            "float_nodes": [{"node": n, "op": op} for n, op in self.nodes.get(FLOAT, [])],
            "conversion_nodes": len(self.nodes.get(CONVERSION, [])),
            "tensor_bytes_by_dtype": dict(sorted(self.tensor_bytes.items())),
            "weight_bytes_by_dtype": dict(sorted(self.weight_bytes.items())),
        }


def precision_summary(graph: Graph) -> PrecisionSummary:
    """The nodes of `graph` (after the graph passes) by precision, and its tensors' bytes by dtype
    (each tensor counted once, before the arena shares their storage)."""
    summary = PrecisionSummary()
    for node in graph.nodes:
        summary.nodes.setdefault(node_precision(node), []).append((node.name, node.op_type))
    runtime, constant = Counter[str](), Counter[str]()
    for t in graph.tensors.values():
        (constant if t.is_constant else runtime)[t.dtype.name] += t.nbytes
    summary.tensor_bytes, summary.weight_bytes = dict(runtime), dict(constant)
    return summary
