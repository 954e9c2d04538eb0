"""Identity, inference-mode Dropout and a Cast to the type its input already has compute nothing:
their consumers read the input directly. (torch exports a Softmax computed in float32 of a
float32 model as Softmax, Cast, Cast.)"""

from __future__ import annotations

from aot.ir.graph import Graph, Node


def _same_type_cast(node: Node) -> bool:
    source, out = node.input(0), node.outputs[0] if node.outputs else None
    return node.op_type == "Cast" and source is not None and out is not None and source.dtype == out.dtype


def remove_identities(graph: Graph) -> None:
    removed = []
    replacements = []  # applied together (Graph.replace_uses), chains of Identity included
    for node in graph.nodes:
        if node.op_type not in ("Identity", "Dropout") and not _same_type_cast(node):
            continue
        if any(t is not None for t in node.outputs[1:]):  # Dropout's mask is used: keep it
            continue
        source, out = node.inputs[0], node.outputs[0]
        if source is None or out is None or graph.is_output(out):
            continue  # a graph output keeps its ONNX name; the lowering makes it a free view
        replacements.append((out, source))
        removed.append(node)
        del graph.tensors[out.name]
    graph.replace_uses(replacements)
    graph.remove_nodes(removed)
