"""Checks the invariants every pass must keep. Run after import and after each pass in tests."""

from __future__ import annotations

from aot.ir.graph import Graph, Node, Tensor
from aot.ir.sizes import MAX_ELEMENTS

__all__ = ["MAX_ELEMENTS", "IRVerificationError", "verify_graph"]


class IRVerificationError(AssertionError):
    """The IR is inconsistent: a bug in aot, not in the user's model."""


def verify_graph(graph: Graph) -> None:
    problems: list[str] = []
    known = set(graph.tensors.values())
    available = set(graph.inputs) | set(graph.constants())
    readers: dict[Tensor, set[Node]] = {}  # tensor -> its consumers (a list scan per read is quadratic)
    for t in graph.tensors.values():
        if any(d <= 0 for d in t.shape) and t.size != 0:
            problems.append(f"{t!r} has a non-positive dimension")
        if t.size > MAX_ELEMENTS:
            problems.append(f"{t!r} has more than {MAX_ELEMENTS} elements")
        if t.is_constant and tuple(t.data.shape) != tuple(t.shape):
            problems.append(f"{t!r} data shape {t.data.shape} differs from its declared shape")
        if t.is_constant and t.data.dtype != t.dtype:
            problems.append(f"{t!r} data dtype {t.data.dtype} differs from its declared dtype")
    for node in graph.nodes:
        for t in node.inputs:
            if t is None:
                continue
            if t not in known:
                problems.append(f"{node!r} reads {t!r}, which is not in the graph")
            elif t not in available:
                problems.append(f"{node!r} reads {t!r} before it is produced")
            if t not in readers:
                readers[t] = set(t.consumers)
            if node not in readers[t]:
                problems.append(f"{t!r} does not list its consumer {node!r}")
        for t in node.outputs:
            if t is None:
                continue
            if t.producer is not node:
                problems.append(f"{t!r} does not name {node!r} as producer")
            if t in available:
                problems.append(f"{t!r} is produced twice")
            available.add(t)
    for t in graph.outputs:
        if t not in available:
            problems.append(f"graph output {t!r} is never produced")
    if problems:
        raise IRVerificationError("IR verification failed:\n  " + "\n  ".join(problems))
