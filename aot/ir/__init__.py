"""Graph IR: tensors with static shapes and nodes that keep their ONNX origin."""

from aot.ir.graph import Graph, Node, Tensor

__all__ = ["Graph", "Node", "Tensor"]
