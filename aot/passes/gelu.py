"""The erf GELU as exporters write it, as one `Gelu` node (opset 20's meaning):

    x * 0.5 * (1 + erf(x / sqrt 2))   as   Div(x, sqrt 2) -> Erf -> Add(., 1) -> Mul(x, .) -> Mul(., 0.5)
                                      or   Mul(x, 0.5) and Mul(., Add(Erf(Div(x, sqrt 2)), 1))

`Gelu` multiplies by 1 / sqrt 2 where the graph divides by sqrt 2, as onnxruntime's own Gelu
fusion does (the erf's argument differs by at most an ulp); a division per element in a MatMul's
epilogue cost ViT-tiny's MLP about a tenth of its time (benchmarks/profile_kernels.sh). Every
tensor inside the pattern must be read by the pattern alone and not be a graph output.
"""

from __future__ import annotations

import math

import numpy as np

from aot.ir.graph import Graph, Node, Tensor

# How close a constant must be to sqrt 2 (or 0.5, 1) to be taken for it: float32 rounding.
CLOSE = 1e-6


def recognise_gelu(graph: Graph) -> None:
    for erf in [n for n in graph.nodes if n.op_type == "Erf"]:
        if erf in graph.nodes:
            match = _match(graph, erf)
            if match is not None:
                _replace(graph, *match)


def _scalar(t: Tensor | None, value: float) -> bool:
    return (t is not None and t.is_constant and t.size == 1 and t.dtype == np.float32
            and abs(float(np.asarray(t.data).reshape(-1)[0]) - value) <= CLOSE * abs(value))


def _other(node: Node, t: Tensor) -> Tensor | None:
    """The operand of a two-input node beside `t`."""
    a, b = node.input(0), node.input(1)
    return b if a is t else a if b is t else None


def _reader(graph: Graph, t: Tensor | None, op_type: str) -> Node | None:
    if t is None or graph.is_output(t) or len(t.consumers) != 1 or t.consumers[0].op_type != op_type:
        return None
    return t.consumers[0]


def _match(graph: Graph, erf: Node) -> tuple[Tensor, list[Node], Tensor] | None:
    """(x, the nodes of the pattern, its output) for the GELU around `erf`."""
    scaled = erf.inputs[0]
    div = scaled.producer if scaled is not None else None
    if div is None or div.op_type != "Div" or not _scalar(div.input(1), math.sqrt(2.0)):
        return None
    x = div.inputs[0]
    if x is None or x.dtype != np.float32 or _reader(graph, scaled, "Erf") is not erf:
        return None
    add = _reader(graph, erf.outputs[0], "Add")
    if add is None or not _scalar(_other(add, erf.outputs[0]), 1.0):
        return None
    product = _reader(graph, add.outputs[0], "Mul")
    if product is None:
        return None
    factor = _other(product, add.outputs[0])
    if factor is x:  # Mul(x, 1 + erf), then Mul(., 0.5)
        half = _reader(graph, product.outputs[0], "Mul")
        if half is None or not _scalar(_other(half, product.outputs[0]), 0.5):
            return None
        nodes, out = [div, erf, add, product, half], half.outputs[0]
    else:  # Mul(x, 0.5) times (1 + erf)
        half = factor.producer if factor is not None else None
        if (half is None or half.op_type != "Mul" or _other(half, x) is None or not _scalar(_other(half, x), 0.5)
                or _reader(graph, factor, "Mul") is not product):
            return None
        nodes, out = [half, div, erf, add, product], product.outputs[0]
    if out is None or out.shape != x.shape or out.dtype != x.dtype:
        return None
    return x, nodes, out


def _replace(graph: Graph, x: Tensor, nodes: list[Node], out: Tensor) -> None:
    last = max(nodes, key=graph.nodes.index)
    gelu = Node("Gelu", last.name, [x], [out], {}, "", 20)
    position = graph.nodes.index(last)
    graph.add_node(gelu)
    graph.nodes.insert(position + 1, graph.nodes.pop())
    graph.remove_nodes(nodes)
