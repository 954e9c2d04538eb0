"""Cancel data movement that undoes itself: Transpose of a Transpose (composed, or dropped when
the composition is the identity), Reshape of a Reshape (one view), Transpose by the identity."""

from __future__ import annotations

from aot.ir.graph import Graph, Node

_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _perm(node_perm: list[int] | None, rank: int) -> list[int]:
    return list(node_perm) if node_perm is not None else list(range(rank))[::-1]


def cancel_layout_ops(graph: Graph) -> None:
    changed = True
    while changed:
        changed = False
        removed: list[Node] = []  # cancelled, dropped together after the sweep (see Graph.remove_nodes)
        for node in list(graph.nodes):
            src = node.inputs[0] if node.inputs else None
            out = node.outputs[0] if node.outputs else None
            if src is None or out is None:
                continue
            if node.op_type == "Transpose":
                perm = _perm(node.attr("perm"), src.rank)
                producer = src.producer
                if perm == list(range(src.rank)) and not graph.is_output(out):
                    graph.replace_all_uses(out, src)
                    removed.append(node)
                    changed = True
                elif producer is not None and producer.op_type == "Transpose" and producer.inputs[0] is not None:
                    first = _perm(producer.attr("perm"), producer.inputs[0].rank)
                    composed = [first[p] for p in perm]
                    graph.set_input(node, 0, producer.inputs[0])
                    node.attrs["perm"] = composed
                    changed = True
            elif node.op_type in _VIEWS:
                producer = src.producer
                if producer is not None and producer.op_type in _VIEWS and producer.inputs[0] is not None:
                    # A view of a view is one view of the original: make it a Reshape to the final shape.
                    graph.set_input(node, 0, producer.inputs[0])
                    for i in range(1, len(node.inputs)):
                        graph.set_input(node, i, None)
                    node.inputs = node.inputs[:1]
                    node.op_type, node.attrs = "Reshape", {}
                    changed = True
                elif src.shape == out.shape and not graph.is_output(out):
                    graph.replace_all_uses(out, src)
                    removed.append(node)
                    changed = True
        graph.remove_nodes(removed)
    graph.prune()
