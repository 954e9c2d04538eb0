"""The pass pipeline, in its fixed order. Each pass keeps the IR valid; the verifier runs after
every pass. (Folding of everything computable from constants and shapes happens in the frontend,
with onnx's reference evaluator, before the graph IR exists.)"""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Graph
from aot.ir.verifier import verify_graph
from aot.passes.cse import eliminate_common_subexpressions
from aot.passes.fold_affine import fold_affine_into_weights
from aot.passes.fuse_attention import fuse_attention
from aot.passes.gelu import recognise_gelu
from aot.passes.layout_cancel import cancel_layout_ops
from aot.passes.quantized_ops import integer_ops
from aot.passes.remove_identity import remove_identities


def remove_dead_nodes(graph: Graph) -> None:
    """Nodes whose outputs reach no graph output do not need to run."""
    graph.prune()


PIPELINE: list[tuple[str, Callable[[Graph], None]]] = [
    ("remove_dead_nodes", remove_dead_nodes),
    ("remove_identities", remove_identities),          # Identity / inference Dropout
    ("integer_ops", integer_ops),                      # QDQ groups -> QLinearConv, QLinearMatMul ...
    ("cancel_layout_ops", cancel_layout_ops),          # Transpose∘Transpose, view∘view, no-op views
    ("eliminate_common_subexpressions", eliminate_common_subexpressions),  # duplicate constants and nodes
    ("fold_affine_into_weights", fold_affine_into_weights),  # BatchNorm / Mul / Add into Conv, Gemm, MatMul
    ("fuse_attention", fuse_attention),                # MatMul, Softmax, MatMul -> one attention kernel
    ("recognise_gelu", recognise_gelu),                # Div, Erf, Add, Mul, Mul -> Gelu
    ("remove_dead_nodes", remove_dead_nodes),
]


def run_passes(graph: Graph) -> Graph:
    verify_graph(graph)
    for _name, run in PIPELINE:
        run(graph)
        verify_graph(graph)
    return graph
