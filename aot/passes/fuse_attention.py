"""Scaled dot-product attention as exporters write it, as one node (aot/ops/attention/fused.py).

The pattern, read backwards from each Softmax over the last axis:

    MatMul(Q [* c], K^T [* c]) [* c | / c]... [+ mask] [Where(keep, ., fill)] -> Softmax
        [-> Where(IsNaN(.), 0, .)] -> MatMul(., V)

torch's TorchScript exporter writes HF eager attention as MatMul, Div, Add(mask), Softmax,
MatMul; `F.scaled_dot_product_attention` as Mul(Q, sqrt s), Mul(Transpose(K), sqrt s), MatMul,
Add(mask), Softmax, MatMul; GPT-2's causal mask is a Where over a constant triangle. Every tensor
inside the pattern must be read by the pattern alone and not be a graph output. The fused node
never holds the full score matrix (aot/ops/attention/kernel.py). A constant mask that is a causal
triangle becomes the node's `causal_offset`, so its queries x keys constant leaves the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aot.ir.graph import Graph, Node, Tensor
from aot.ir.internal_attrs import FUSED_FROM, INTERNAL_DOMAIN
from aot.ops.attention.fused import OP_TYPE

# A fill at or below this is as good as -inf for a softmax: exp(fill - max) is 0 in float32
# whatever the scores are.
NEGLIGIBLE = -1e30


@dataclass
class _Match:
    q: Tensor
    keys_t: Tensor
    v: Tensor
    y: Tensor
    scale: float = 1.0
    bias: Tensor | None = None
    keep: Tensor | None = None
    fill: float = float("-inf")
    nodes: list[Node] = field(default_factory=list)


def fuse_attention(graph: Graph) -> None:
    for softmax in [n for n in graph.nodes if n.op_type == "Softmax"]:
        if softmax in graph.nodes:
            match = _match(graph, softmax)
            if match is not None:
                _replace(graph, match)


def _scalar(t: Tensor | None) -> float | None:
    if t is None or not t.is_constant or t.size != 1 or t.dtype.kind != "f":
        return None
    return float(np.asarray(t.data).reshape(-1)[0])


def _only_reader(graph: Graph, t: Tensor) -> Node | None:
    if graph.is_output(t) or len(t.consumers) != 1:
        return None
    return t.consumers[0]


def _inner(graph: Graph, t: Tensor, reader: Node) -> Node | None:
    """t's producer, where `reader` is t's only reader and t no graph output."""
    if t.producer is None or _only_reader(graph, t) is not reader:
        return None
    return t.producer


def _match(graph: Graph, softmax: Node) -> _Match | None:
    s, p = softmax.inputs[0], softmax.outputs[0]
    if s is None or p is None or s.dtype != np.float32 or s.rank < 2:
        return None
    if int(softmax.attr("axis", -1 if softmax.opset >= 13 else 1)) not in (-1, s.rank - 1):
        return None
    after = _probabilities_reader(graph, p)
    if after is None:
        return None
    product, guard = after
    v, y = product.inputs[1], product.outputs[0]
    if v is None or y is None or v.rank < 2 or v.dtype != np.float32:
        return None
    match = _scores(graph, softmax, s)
    if match is None:
        return None
    match.v, match.y = v, y
    match.nodes += [softmax, *guard, product]
    return match if _shapes_fit(match) else None


def _probabilities_reader(graph: Graph, p: Tensor) -> tuple[Node, list[Node]] | None:
    """The MatMul reading the probabilities as its A (through the exporters' NaN guard)."""
    if graph.is_output(p):
        return None
    guard: list[Node] = []
    readers = {n.op_type: n for n in p.consumers}
    if len(p.consumers) == 2 and set(readers) == {"IsNaN", "Where"}:
        isnan, where = readers["IsNaN"], readers["Where"]
        flag = isnan.outputs[0]
        if (flag is None or where.inputs[0] is not flag or _only_reader(graph, flag) is not where
                or _scalar(where.input(1)) != 0.0 or where.input(2) is not p or where.outputs[0] is None):
            return None
        guard, p = [isnan, where], where.outputs[0]
    reader = _only_reader(graph, p)
    if reader is None or reader.op_type != "MatMul" or reader.inputs[0] is not p or reader.inputs[1] is p:
        return None
    return reader, guard


def _scores(graph: Graph, softmax: Node, s: Tensor) -> _Match | None:
    """Walk from the Softmax's input back to the MatMul of Q and K^T."""
    nodes: list[Node] = []
    scale, bias, keep, fill = 1.0, None, None, float("-inf")
    reader = softmax
    while True:
        node = _inner(graph, s, reader)
        if node is None:
            return None
        nodes.append(node)
        if node.op_type == "MatMul":
            break
        step = _score_step(node, s)
        if step is None:
            return None
        kind, value, s = step
        # Walking backwards: a scale met before a mask would scale the mask too.
        if kind == "scale":
            scale *= float(value)
        elif kind == "bias" and bias is None and scale == 1.0:
            bias = value
        elif kind == "keep" and keep is None and scale == 1.0:
            keep, fill = value
        else:
            return None
        reader = node
    q, keys_t = node.inputs[0], node.inputs[1]
    if q is None or keys_t is None or q.rank < 2 or keys_t.rank < 2:
        return None
    q, q_scale, q_nodes = _unscaled(graph, q, node)
    keys_t, k_scale, k_nodes = _unscaled(graph, keys_t, node)
    match = _Match(q=q, keys_t=keys_t, v=q, y=q, scale=scale * q_scale * k_scale, bias=bias, keep=keep, fill=fill)
    match.nodes = [*q_nodes, *k_nodes, *reversed(nodes)]
    return match


def _score_step(node: Node, s: Tensor) -> tuple[str, object, Tensor] | None:
    """One op between the scores' MatMul and the Softmax: ("scale", factor, its input), ("bias",
    mask, its input) or ("keep", (mask, fill), its input)."""
    a, b = node.input(0), node.input(1)
    out = node.outputs[0]
    if a is None or b is None or out is None or out.shape != s.shape:
        return None
    if node.op_type in ("Mul", "Div"):
        value = _scalar(b)
        if value is not None and value != 0.0:
            return "scale", value if node.op_type == "Mul" else 1.0 / value, a
        value = _scalar(a) if node.op_type == "Mul" else None
        return ("scale", value, b) if value is not None else None
    if node.op_type == "Add":
        scores, mask = (a, b) if a.shape == s.shape and a.producer is not None else (b, a)
        return ("bias", mask, scores) if mask.dtype == np.float32 and scores.shape == s.shape else None
    if node.op_type == "Where":
        fill = _scalar(node.input(2))
        if a.dtype == np.bool_ and b.shape == s.shape and fill is not None and fill <= NEGLIGIBLE:
            return "keep", (a, fill), b
    return None


def _unscaled(graph: Graph, t: Tensor, reader: Node) -> tuple[Tensor, float, list[Node]]:
    """t without the scalar Mul an exporter put on it for the MatMul alone."""
    node = _inner(graph, t, reader)
    if node is None or node.op_type != "Mul":
        return t, 1.0, []
    for operand, other in ((node.input(0), node.input(1)), (node.input(1), node.input(0))):
        value = _scalar(other)
        if value is not None and operand is not None and operand.shape == t.shape:
            return operand, value, [node]
    return t, 1.0, []


def _shapes_fit(m: _Match) -> bool:
    queries, head = m.q.shape[-2:]
    head_k, keys = m.keys_t.shape[-2:]
    keys_v = m.v.shape[-2]
    if head != head_k or keys != keys_v or m.y.shape[-2:] != (queries, m.v.shape[-1]):
        return False
    batch = m.y.shape[:-2]
    for t in (m.q, m.keys_t, m.v):
        dims = t.shape[:-2]
        if len(dims) > len(batch) or any(d not in (1, b) for d, b in zip(reversed(dims), reversed(batch))):
            return False
    return all(_broadcasts(mask.shape, (*batch, queries, keys)) for mask in (m.bias, m.keep) if mask is not None)


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    return len(shape) <= len(to) and all(d in (1, t) for d, t in zip(reversed(shape), reversed(to)))


def _causal_offset(mask: Tensor, fill: float, keep: bool, scores: tuple[int, int]) -> int | None:
    """The offset of a constant mask that is exactly a causal triangle: j seen where j <= i + offset."""
    if not mask.is_constant or mask.rank < 2 or mask.shape[-2:] != scores:
        return None
    data = np.asarray(mask.data)
    queries, keys = scores
    first = data.reshape(-1, queries, keys)
    if not (first == first[:1]).all():
        return None
    offset = keys - queries
    seen = np.arange(keys)[None, :] <= np.arange(queries)[:, None] + offset
    if keep:
        return offset if fill <= NEGLIGIBLE and np.array_equal(first[0], seen) else None
    values = first[0]
    return offset if (values[seen] == 0).all() and (values[~seen] <= NEGLIGIBLE).all() else None


def _absorb_transposes(graph: Graph, m: _Match, attrs: dict[str, object]) -> list[Tensor]:
    """Q, K^T and V read through the Transposes that made them, and Y written through the
    Transpose after it, where the pattern alone reads them: the kernel reads and writes strided
    views (K^T is packed per head inside it), so the copies go. Returns the node's inputs and output."""
    operands = []
    for name, t in (("q_perm", m.q), ("keys_perm", m.keys_t), ("v_perm", m.v)):
        producer = t.producer
        if (producer is not None and producer.op_type == "Transpose" and _only_reader(graph, t) in m.nodes
                and not any(t is other for other in (m.q, m.keys_t, m.v) if other is not t)):
            m.nodes.insert(0, producer)
            attrs[name] = list(producer.attr("perm", list(range(t.rank))[::-1]))
            t = producer.inputs[0]
        operands.append(t)
    y = m.y
    reader = _only_reader(graph, y)
    if reader is not None and reader.op_type == "Transpose" and reader.outputs[0] is not None:
        perm = list(reader.attr("perm", list(range(y.rank))[::-1]))
        if perm[-1] == y.rank - 1:  # rows stay contiguous
            m.nodes.append(reader)
            attrs["y_perm"] = perm
            y = reader.outputs[0]
    return [*operands, y]


def _replace(graph: Graph, m: _Match) -> None:
    attrs: dict[str, object] = {"scale": m.scale, "fill": m.fill}
    bias, keep = m.bias, m.keep
    for mask, is_keep in ((bias, False), (keep, True)):
        offset = _causal_offset(mask, m.fill, is_keep, (m.q.shape[-2], m.v.shape[-2])) if mask is not None else None
        if offset is not None and "causal_offset" not in attrs:
            attrs["causal_offset"] = offset
            bias, keep = (bias, None) if is_keep else (None, keep)
    last = m.nodes[-1]
    q, keys_t, v, y = _absorb_transposes(graph, m, attrs)
    attrs[FUSED_FROM] = [n.name for n in m.nodes]
    fused = Node(OP_TYPE, last.name, [q, keys_t, v, bias, keep], [y], attrs, INTERNAL_DOMAIN, 1)
    position = max(graph.nodes.index(n) for n in m.nodes)  # every input is ready there
    graph.add_node(fused)
    graph.nodes.insert(position + 1, graph.nodes.pop())
    graph.remove_nodes(m.nodes)
