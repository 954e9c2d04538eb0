"""ONNX frontend: load, check, fix shapes, fold shape subgraphs and import into the graph IR."""

from aot.frontend.importer import import_model, load_graph

__all__ = ["import_model", "load_graph"]
