"""Generators of large ONNX graphs for the compile-time scaling tests (tests/test_scaling.py).

The graphs are made of ops the lowering cannot fuse (Softmax, Transpose, MaxPool) so that each
node becomes its own kernel and the stages that scale with the number of kernels (import, passes,
lowering, scheduling, memory planning, C rendering) are what is measured.

    python -m tests.big_graphs KIND NODES OUT.onnx     (KIND: a key of KINDS)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes: list[onnx.NodeProto], x_shape: list[int], y: str, y_shape: list[int],
           inits: list[onnx.TensorProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)], inits or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="aot-tests")
    model.ir_version = 8
    return model


def softmax_chain(n: int, width: int = 16) -> onnx.ModelProto:
    """x -> Softmax -> Softmax -> ... (n nodes), each on a [1, width] tensor."""
    nodes = [helper.make_node("Softmax", [f"t{i}" if i else "x"], [f"t{i + 1}"], axis=-1) for i in range(n)]
    return _model(nodes, [1, width], f"t{n}", [1, width])


def mixed_chain(n: int) -> onnx.ModelProto:
    """A chain cycling Softmax, Transpose (swapping the two last axes), MaxPool (2x2 window, stride
    1, same padding: shape kept) over a [1, 2, 4, 4] tensor; no two Transposes meet, so none cancel."""
    ops: list[Callable[[str, str], onnx.NodeProto]] = [
        lambda a, b: helper.make_node("Softmax", [a], [b], axis=-1),
        lambda a, b: helper.make_node("Transpose", [a], [b], perm=[0, 1, 3, 2]),
        lambda a, b: helper.make_node("MaxPool", [a], [b], kernel_shape=[2, 2], pads=[0, 0, 1, 1]),
    ]
    nodes = [ops[i % 3](f"t{i}" if i else "x", f"t{i + 1}") for i in range(n)]
    return _model(nodes, [1, 2, 4, 4], f"t{n}", [1, 2, 4, 4])


def in_place_chain(n: int) -> onnx.ModelProto:
    """A chain cycling Softmax, Transpose, Neg over a [4, 4] tensor: each Neg is a kernel of its own
    (nothing to fuse into) that writes in place over the Transpose's output."""
    ops: list[Callable[[str, str], onnx.NodeProto]] = [
        lambda a, b: helper.make_node("Softmax", [a], [b], axis=-1),
        lambda a, b: helper.make_node("Transpose", [a], [b], perm=[1, 0]),
        lambda a, b: helper.make_node("Neg", [a], [b]),
    ]
    nodes = [ops[i % 3](f"t{i}" if i else "x", f"t{i + 1}") for i in range(n)]
    return _model(nodes, [4, 4], f"t{n}", [4, 4])


def _branches(count: int, width: int) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], list[str]]:
    """`count` branches off x, each Add (its own constant, so no two branches are alike) -> Softmax."""
    nodes, inits, outs = [], [], []
    for i in range(count):
        inits.append(numpy_helper.from_array(np.full([1, width], i / max(count, 1), np.float32), f"c{i}"))
        nodes.append(helper.make_node("Add", ["x", f"c{i}"], [f"a{i}"]))
        nodes.append(helper.make_node("Softmax", [f"a{i}"], [f"b{i}"], axis=-1))
        outs.append(f"b{i}")
    return nodes, inits, outs


def concat_wide(n: int, width: int = 4) -> onnx.ModelProto:
    """About n nodes: n // 2 branches (Add, Softmax) joined by one Concat."""
    nodes, inits, outs = _branches(max(n // 2, 1), width)
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=1))
    return _model(nodes, [1, width], "y", [1, width * len(outs)], inits)


def add_tree(n: int, width: int = 4) -> onnx.ModelProto:
    """About n nodes: n // 3 branches (Add, Softmax) summed pairwise by a balanced tree of Softmax(Add)
    (the Softmax keeps the tree's Adds from fusing into one long expression)."""
    nodes, inits, level = _branches(max(n // 3, 1), width)
    serial = 0
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[0::2], level[1::2]):
            nodes.append(helper.make_node("Add", [a, b], [f"s{serial}"]))
            nodes.append(helper.make_node("Softmax", [f"s{serial}"], [f"r{serial}"], axis=-1))
            nxt.append(f"r{serial}")
            serial += 1
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return _model(nodes, [1, width], level[0], [1, width], inits)


KINDS: dict[str, Callable[[int], onnx.ModelProto]] = {
    "chain": softmax_chain, "mixed": mixed_chain, "in_place": in_place_chain, "concat": concat_wide,
    "add_tree": add_tree,
}


def main(argv: list[str]) -> None:
    kind, count, out = argv
    onnx.save(KINDS[kind](int(count)), Path(out))


if __name__ == "__main__":
    main(sys.argv[1:])
