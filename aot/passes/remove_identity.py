"""Identity and inference-mode Dropout compute nothing: their consumers read the input directly."""

from __future__ import annotations

from aot.ir.graph import Graph


def remove_identities(graph: Graph) -> None:
    removed = []
    replacements = []  # applied together (Graph.replace_uses), chains of Identity included
    for node in graph.nodes:
        if node.op_type not in ("Identity", "Dropout"):
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
