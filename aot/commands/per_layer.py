"""Per-layer comparison: which node first goes wrong.

A debug variant of the model is compiled in which every float tensor a node produces is also a
graph output, so each is written to memory and returned (fused kernels break up at those
outputs, so every node's own result is visible). onnxruntime runs the same variant; the outputs
are compared in the model's node order and the first node whose error exceeds the tolerance is
the culprit. Works on the host and, for a --target, under qemu-user.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from aot.commands.verify import OutputComparison, compare, onnxruntime_outputs, random_inputs
from aot.frontend.input_shapes import apply_input_shapes
from aot.frontend.input_values import InputValue, bind_input_values
from aot.frontend.loader import load_onnx
from aot.frontend.shape_folding import fold_static_subgraphs, forget_stale_shapes


@dataclass
class LayerResult:
    node: str
    op: str
    tensor: str
    comparison: OutputComparison


def with_every_tensor_as_output(model: onnx.ModelProto, input_shapes: Mapping[str, tuple[int, ...]] | None,
                                source: str = "<model>",
                                input_values: Mapping[str, InputValue] | None = None) -> onnx.ModelProto:
    debug = onnx.ModelProto()
    debug.CopyFrom(model)
    # Bound inputs are initializers of the debug model itself, so onnxruntime runs it with them too.
    bind_input_values(debug, input_values or {})
    apply_input_shapes(debug, input_shapes or {})
    # The compiler's own inference (sizes checked, no onnx data propagation: see shape_folding),
    # on a copy: the debug model keeps every node.
    probe = onnx.ModelProto()
    probe.CopyFrom(debug)
    stored = forget_stale_shapes(probe)
    inferred = fold_static_subgraphs(probe, source, keep_nodes=True, stored=stored)
    types = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    present = {o.name for o in debug.graph.output}
    for node in debug.graph.node:
        for name in node.output:
            info = types.get(name)
            if not name or name in present or info is None:
                continue
            if info.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
                continue  # shape arithmetic and masks: compared through the float tensors they feed
            debug.graph.output.append(info)
            present.add(name)
    return debug


def compare_layers(model_path: str | os.PathLike[str], input_shapes: Mapping[str, tuple[int, ...]] | None,
                   build: Any, inputs: dict[str, np.ndarray] | Callable[[list[dict[str, Any]]], dict[str, np.ndarray]]
                   | None = None, tolerance: float = 1e-4,
                   seed: int = 0, backend: str = "c", target: str | None = None, *, conv_algorithm: str = "auto",
                   input_values: Mapping[str, InputValue] | None = None,
                   ) -> tuple[list[LayerResult], LayerResult | None]:
    """`build(package)` returns something with .run(inputs) (the host or a target under qemu).
    `inputs` may be a function of the compiled package's input specs (a checked .npz reader)."""
    import tempfile

    from aot.compiler import compile as compile_model

    model = load_onnx(model_path)
    debug = with_every_tensor_as_output(model, input_shapes, str(model_path), input_values)
    package = compile_model(debug, input_shapes, name=f"{os.path.basename(str(model_path)).split('.')[0]}_debug",
                            backend=backend, target=target, conv_algorithm=conv_algorithm)
    if callable(inputs):
        inputs = inputs(package.inputs)
    inputs = inputs if inputs is not None else random_inputs(package, seed)
    ours = build(package).run(inputs)
    with tempfile.TemporaryDirectory(prefix="aot-per-layer-") as tmp:
        path = os.path.join(tmp, "debug.onnx")
        onnx.save(debug, path)
        names = [o["name"] for o in package.outputs]
        reference = onnxruntime_outputs(path, inputs, names)
    producers = {out: (node.name or f"{node.op_type}#{i}", node.op_type)
                 for i, node in enumerate(model.graph.node) for out in node.output}
    order = {out: i for i, node in enumerate(model.graph.node) for out in node.output}
    results = []
    for name in sorted(names, key=lambda n: order.get(n, len(order))):
        node, op = producers.get(name, ("(graph input)", ""))
        results.append(LayerResult(node, op, name, compare(name, ours[name], reference[name], tolerance)))
    culprit = next((r for r in results if not r.comparison.passed), None)
    return results, culprit
