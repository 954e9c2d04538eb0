"""The graph IR every pass and the lowering work on.

A Graph is a topologically ordered list of Nodes over Tensors. Every tensor has a dtype and a
static shape; constants carry their data. Nodes keep the name of the ONNX node they came from so
that errors and generated comments can point back at the user's model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aot.ir.sizes import element_count


@dataclass(eq=False)
class Tensor:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    data: np.ndarray | None = None
    producer: Node | None = None
    consumers: list[Node] = field(default_factory=list)

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    @property
    def size(self) -> int:
        return element_count(self.shape)  # a Python int: np.prod in int64 wraps

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        kind = "const " if self.is_constant else ""
        return f"Tensor({kind}{self.name!r}, {self.dtype}, {list(self.shape)})"


# The names of ONNX's default operator set (ai.onnx); every other domain (com.microsoft ...) is
# named with its ops.
DEFAULT_DOMAINS = ("", "ai.onnx")


def qualified_op_type(domain: str, op_type: str) -> str:
    """How aot names an op: `Conv` for the default domain, `com.microsoft::QLinearAdd` for others
    (op names are unique only within a domain)."""
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}::{op_type}"


@dataclass(eq=False)
class Node:
    op_type: str
    name: str
    inputs: list[Tensor | None]
    outputs: list[Tensor | None]  # None where an optional output is omitted
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    opset: int = 0

    def describe(self) -> str:
        """How error messages refer to this node: its ONNX name and op type."""
        return f"node {self.name!r} ({self.op_type})"

    @property
    def qualified_op(self) -> str:
        """The op type with its domain where that is not the default one (see qualified_op_type)."""
        return qualified_op_type(self.domain, self.op_type)

    def input(self, i: int) -> Tensor | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def __repr__(self) -> str:
        return f"Node({self.op_type} {self.name!r})"


class Graph:
    """Nodes in topological order, with graph inputs, outputs and every tensor by name."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.nodes: list[Node] = []
        self.tensors: dict[str, Tensor] = {}
        self.source_node_count = 0  # nodes in the ONNX model this graph came from
        self.unsupported: dict[str, list[str]] = {}  # op type -> node names (kept only for inspect)
        self.unknown_shapes: list[str] = []  # tensors after unsupported ops (inspect only)
        # Their type as ONNX declares or infers it, for inspect: dtype name or "?", dims (ints,
        # dim names or "?") or None for an unknown rank.
        self.declared_types: dict[str, tuple[str, list[int | str] | None]] = {}
        # Graph inputs bound at compile time (--input-value), by name; they are constants now.
        self.bound_inputs: dict[str, np.ndarray] = {}

    def add_tensor(self, tensor: Tensor) -> Tensor:
        if tensor.name in self.tensors:
            raise ValueError(f"duplicate tensor name {tensor.name!r}")
        self.tensors[tensor.name] = tensor
        return tensor

    def add_node(self, node: Node) -> Node:
        for t in node.inputs:
            if t is not None:
                t.consumers.append(node)
        for t in node.outputs:
            if t is not None:
                t.producer = node
        self.nodes.append(node)
        return node

    def remove_node(self, node: Node) -> None:
        for t in node.inputs:
            if t is not None and node in t.consumers:
                t.consumers.remove(node)
        for t in node.outputs:
            if t is not None and t.producer is node:
                t.producer = None
        self.nodes.remove(node)

    def remove_nodes(self, nodes: Iterable[Node]) -> None:
        """remove_node for many nodes at once: each tensor's consumers and the node list are
        filtered once (a list.remove per node and per read tensor is quadratic when a pass drops
        thousands of nodes, or the readers of a tensor read by thousands)."""
        nodes = list(nodes)
        gone = set(nodes)
        if not gone:
            return
        read = dict.fromkeys(t for n in nodes for t in n.inputs if t is not None)
        for t in read:
            t.consumers[:] = [c for c in t.consumers if c not in gone]
        for n in nodes:
            for t in n.outputs:
                if t is not None and t.producer is n:
                    t.producer = None
        self.nodes[:] = [n for n in self.nodes if n not in gone]

    def replace_all_uses(self, old: Tensor, new: Tensor) -> None:
        """Point every consumer of `old` (and the graph outputs) at `new`."""
        for consumer in list(old.consumers):
            consumer.inputs = [new if t is old else t for t in consumer.inputs]
            new.consumers.append(consumer)
        old.consumers.clear()
        self.outputs = [new if t is old else t for t in self.outputs]

    def replace_uses(self, pairs: Sequence[tuple[Tensor, Tensor]]) -> None:
        """replace_all_uses for many (old, new) pairs at once, where a `new` may itself be an old
        one (chains end at the last): each consumer's inputs are rewritten once. Replacing one
        tensor at a time rewrites a consumer's whole input list each time, quadratic for a Concat
        of thousands of Identity outputs."""
        target = dict(pairs)
        if not target:
            return

        def final(t: Tensor) -> Tensor:
            while t in target:
                t = target[t]
            return t

        old_tensors = list(target)
        consumers = dict.fromkeys(c for old in old_tensors for c in old.consumers)
        for c in consumers:
            c.inputs = [final(t) if t is not None and t in target else t for t in c.inputs]
        for old in old_tensors:
            final(old).consumers.extend(old.consumers)
            old.consumers.clear()
        self.outputs = [final(t) if t in target else t for t in self.outputs]

    def set_input(self, node: Node, index: int, tensor: Tensor | None) -> None:
        """Rewire one input of `node`, keeping consumer lists right."""
        while len(node.inputs) <= index:
            node.inputs.append(None)
        old = node.inputs[index]
        node.inputs[index] = tensor
        if old is not None and old not in node.inputs and node in old.consumers:
            old.consumers.remove(node)
        if tensor is not None and node not in tensor.consumers:
            tensor.consumers.append(node)

    def set_output(self, node: Node, index: int, tensor: Tensor) -> None:
        old = node.outputs[index]
        if old is not None and old.producer is node:
            old.producer = None
        node.outputs[index] = tensor
        tensor.producer = node

    def unique_name(self, hint: str) -> str:
        name, n = hint, 1
        while name in self.tensors:
            name = f"{hint}_{n}"
            n += 1
        return name

    def add_constant(self, data: np.ndarray, hint: str) -> Tensor:
        data = np.require(data, requirements="C")  # (ascontiguousarray would make 0-d arrays 1-d)
        return self.add_tensor(Tensor(self.unique_name(hint), data.dtype, tuple(data.shape), data=data))

    def is_output(self, tensor: Tensor) -> bool:
        return any(t is tensor for t in self.outputs)

    def constants(self) -> Iterable[Tensor]:
        return (t for t in self.tensors.values() if t.is_constant)

    def prune(self) -> None:
        """Drop nodes whose outputs nobody reads and tensors nothing refers to. One walk from the
        last node back: a node is live when a graph output or a live node reads one of its
        outputs (its readers come after it, so they are decided first)."""
        live_outputs = set(self.outputs)
        live: set[Node] = set()
        for node in reversed(self.nodes):
            if any(t is not None and (t in live_outputs or any(c in live for c in t.consumers))
                   for t in node.outputs):
                live.add(node)
        self.remove_nodes(n for n in self.nodes if n not in live)
        referenced: set[Tensor] = set(self.inputs) | live_outputs
        for node in self.nodes:
            referenced.update(t for t in node.inputs if t is not None)
            referenced.update(t for t in node.outputs if t is not None)
        self.tensors = {k: t for k, t in self.tensors.items() if t in referenced}
