"""The pass pipeline. Each pass keeps the IR valid; the verifier runs after every pass."""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Graph
from aot.ir.verifier import verify_graph


def remove_dead_nodes(graph: Graph) -> None:
    """Nodes whose outputs reach no graph output do not need to run."""
    graph.prune()


PIPELINE: list[tuple[str, Callable[[Graph], None]]] = [
    ("remove_dead_nodes", remove_dead_nodes),
]


def run_passes(graph: Graph) -> Graph:
    verify_graph(graph)
    for _name, run in PIPELINE:
        run(graph)
        verify_graph(graph)
    return graph
