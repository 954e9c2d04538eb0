"""Fold shape-computing subgraphs and constant expressions into initializers.

Exporters emit Shape -> Gather -> Concat -> Reshape chains, ConstantOfShape, Range and friends
that only compute sizes. Once every input shape is fixed they are constants. We evaluate them
with onnx's own reference implementation (so their meaning is the ONNX spec's, not a second
copy of ours), replace them by initializers and run shape inference again, until nothing changes.
What remains is a static graph of tensor ops.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from aot.errors import ModelLoadError
from aot.frontend.loader import default_opset, one_line

# Ops whose result is not a function of their inputs, or that carry subgraphs.
NEVER_FOLD = {
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli", "If", "Loop", "Scan", "SequenceConstruct", "SequenceEmpty", "Optional",
}
_MAX_ROUNDS = 32


def infer_shapes(model: onnx.ModelProto, source: str, strict: bool = False) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=strict, data_prop=True)
    except Exception as e:  # onnx raises InferenceError, ValidationError or RuntimeError
        raise ModelLoadError(f"{source}: shape inference failed: {one_line(str(e)) or type(e).__name__}") from e


def fold_static_subgraphs(model: onnx.ModelProto, source: str) -> onnx.ModelProto:
    for _ in range(_MAX_ROUNDS):
        model = infer_shapes(model, source)
        if not _fold_once(model, source):
            return model
    return infer_shapes(model, source)


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    graph = model.graph
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.HasField("shape"):
            dims = tt.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                shapes[vi.name] = tuple(int(d.dim_value) for d in dims)
    for init in graph.initializer:
        shapes[init.name] = tuple(int(d) for d in init.dims)
    return shapes


def _fold_once(model: onnx.ModelProto, source: str) -> bool:
    graph = model.graph
    opset = default_opset(model)
    constants = {t.name: t for t in graph.initializer}
    shapes = _static_shapes(model)
    kept: list[onnx.NodeProto] = []
    new_initializers: list[onnx.TensorProto] = []
    changed = False
    for node in graph.node:
        values = _try_fold(node, constants, shapes, opset, source)
        if values is None:
            kept.append(node)
            continue
        changed = True
        for name, value in zip(node.output, values):
            if not name:
                continue
            tensor = numpy_helper.from_array(np.asarray(value), name)
            constants[name] = tensor
            shapes[name] = tuple(np.asarray(value).shape)
            new_initializers.append(tensor)
    if not changed:
        return False
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_initializers)
    # Value infos of folded tensors would now shadow the initializers' own types.
    folded = {t.name for t in new_initializers}
    infos = [vi for vi in graph.value_info if vi.name not in folded]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return True


def _try_fold(
    node: onnx.NodeProto,
    constants: dict[str, onnx.TensorProto],
    shapes: dict[str, tuple[int, ...]],
    opset: int,
    source: str,
) -> list[np.ndarray] | None:
    if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLD:
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes:
        shape = shapes[node.input[0]]
        if node.op_type == "Size":
            return [np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        start, end = attrs.get("start", 0), attrs.get("end")
        return [np.array(shape[slice(start, end)], dtype=np.int64)]
    inputs = [name for name in node.input if name]
    if not all(name in constants for name in inputs):
        return None
    feeds = {name: numpy_helper.to_array(constants[name]) for name in inputs}
    try:
        return _evaluate(node, feeds, opset)
    except Exception as e:
        label = node.name or node.op_type
        raise ModelLoadError(
            f"{source}: node {label!r} ({node.op_type}): cannot evaluate its constant inputs: {e}"
        ) from e


def _evaluate(node: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> list[np.ndarray]:
    """Run one node with onnx's reference implementation at the model's opset; the result lists
    one value per entry of node.output (an empty array where the output is omitted).

    The node goes in a one-node model that imports the opset: given a bare NodeProto,
    ReferenceEvaluator ignores `opsets` and runs the newest version of the op, whose meaning may
    differ (Unsqueeze-13 reads axes from an input, Unsqueeze-1 from an attribute)."""
    outputs = [name for name in node.output if name]
    graph = helper.make_graph(
        [node], "fold",
        [helper.make_empty_tensor_value_info(name) for name in feeds],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    results = dict(zip(outputs, ReferenceEvaluator(model).run(None, feeds), strict=True))
    return [np.asarray(results[name]) if name else np.zeros(0) for name in node.output]
