"""Common subexpression elimination: identical constants are stored once, identical nodes
(same op, same inputs, same attributes) run once."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from aot.ir.graph import Graph, Tensor


def _freeze(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def merge_duplicate_constants(graph: Graph) -> None:
    seen: dict[tuple[str, tuple[int, ...], str], Tensor] = {}
    replacements = []
    for t in sorted(graph.constants(), key=lambda t: t.name):
        assert t.data is not None
        key = (t.dtype.str, t.shape, hashlib.sha256(t.data.tobytes()).hexdigest())
        keep = seen.setdefault(key, t)
        if keep is not t and not graph.is_output(t):
            replacements.append((t, keep))
    graph.replace_uses(replacements)
    graph.prune()


def eliminate_common_subexpressions(graph: Graph) -> None:
    merge_duplicate_constants(graph)
    seen: dict[Any, list[Tensor | None]] = {}
    removed = []
    # Uses are rewritten once at the end (Graph.replace_uses); until then a node's inputs are
    # read through `kept`, so a duplicate of a duplicate's reader is found in the same sweep.
    kept: dict[Tensor, Tensor | None] = {}
    replacements: list[tuple[Tensor, Tensor]] = []
    for node in graph.nodes:
        inputs = [kept.get(t, t) if t is not None else None for t in node.inputs]
        key = (node.domain, node.op_type, tuple(inputs),
               _freeze(node.attrs))
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node.outputs
            continue
        if len(earlier) != len(node.outputs) or any(
                t is not None and (graph.is_output(t) or earlier[i] is None) for i, t in enumerate(node.outputs)):
            continue
        for i, t in enumerate(node.outputs):
            if t is not None:
                kept[t] = earlier[i]
                replacements.append((t, earlier[i]))  # type: ignore[arg-type]
        removed.append(node)
    graph.replace_uses(replacements)
    graph.remove_nodes(removed)
    graph.prune()
