"""ONNX ModelProto (static after folding) -> graph IR."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

import aot.ops  # noqa: F401  (importing the package registers every op is_supported looks up)
from aot.errors import InputShapeError, ModelLoadError, NodeError, UnsupportedError
from aot.frontend.initializers import initializer_array
from aot.frontend.input_shapes import apply_input_shapes, runtime_inputs
from aot.frontend.input_values import InputValue, bind_input_values
from aot.frontend.loader import default_opset, load_onnx, upgrade_opset
from aot.frontend.shape_folding import (
    check_declared_outputs,
    fold_static_subgraphs,
    forget_stale_shapes,
    infer_shapes,
    node_label,
)
from aot.frontend.type_constraints import check_graph_io_types, check_type_constraints
from aot.ir.graph import Graph, Node, Tensor, qualified_op_type
from aot.ir.sizes import too_many_elements
from aot.lowering.registry import constant_inputs, is_supported
from aot.ops.attrs import graph_inputs_behind


def load_graph(
    path: str | os.PathLike[str], input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    allow_unsupported: bool = False, input_values: Mapping[str, InputValue] | None = None,
) -> Graph:
    """Load an ONNX file and return its static graph IR."""
    model = load_onnx(path)
    return import_model(model, input_shapes, source=str(path), name=Path(path).stem,
                        allow_unsupported=allow_unsupported, input_values=input_values)


def import_model(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    source: str = "<model>",
    name: str = "model",
    allow_unsupported: bool = False,
    input_values: Mapping[str, InputValue] | None = None,
) -> Graph:
    """The static graph IR of `model`. Unsupported ops are all reported at once; with
    `allow_unsupported` (for `aot inspect`) they are kept as nodes and listed in graph.unsupported.
    `input_values` (--input-value) bind graph inputs to constants before anything else reads the
    model, so the shapes they decide are static; graph.bound_inputs holds them."""
    model_copy = upgrade_opset(model, source)
    if model_copy is model:
        model_copy = onnx.ModelProto()
        model_copy.CopyFrom(model)
    check_graph_io_types(model_copy, source)
    bound = bind_input_values(model_copy, input_values or {})
    both = sorted(set(bound) & set(input_shapes or {}))
    if both:
        raise InputShapeError(f"--input-shape {both[0]}=...: input {both[0]!r} is bound by --input-value, "
                              "which gives its shape")
    apply_input_shapes(model_copy, input_shapes or {})
    stored_shapes = forget_stale_shapes(model_copy)
    folded = fold_static_subgraphs(model_copy, source, stored=stored_shapes)
    check_declared_outputs(folded, source)
    unsupported = find_unsupported(folded)
    if unsupported and not allow_unsupported:
        raise UnsupportedError(f"{source}: {describe_unsupported(unsupported, default_opset(folded))}",
                               unsupported=unsupported)
    check_type_constraints(folded, source)
    graph = _build_graph(folded, source, name, lenient=bool(unsupported))
    graph.source_node_count = len(model.graph.node)
    graph.unsupported = unsupported
    graph.bound_inputs = bound
    return graph


def _unbound_input_hint(proto: onnx.NodeProto, inputs: list[Tensor | None]) -> str:
    """When an input the op needs at compile time comes from a graph input: the option that binds it."""
    for index in constant_inputs(proto.op_type, proto.domain):
        tensor = inputs[index] if index < len(inputs) else None
        sources = graph_inputs_behind(tensor) if tensor is not None else []
        if sources:
            via = "is the graph input" if sources == [tensor.name] else "is computed from the graph input"
            return (f"; its input {index} (tensor {tensor.name!r}) {via} {sources[0]!r}: give its value with "
                    f"--input-value {sources[0]}=... (FILE.npy, 1,2,3 or a number)")
    return ""


def find_unsupported(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Every op type aot cannot compile, with the names of the nodes using it."""
    missing: dict[str, list[str]] = {}
    for i, node in enumerate(model.graph.node):
        if not is_supported(node.domain, node.op_type):
            missing.setdefault(qualified_op_type(node.domain, node.op_type), []).append(node_label(node, i))
    return missing


def describe_unsupported(missing: dict[str, list[str]], opset: int) -> str:
    parts = []
    for op in sorted(missing):
        names = missing[op]
        shown = ", ".join(repr(n) for n in names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        parts.append(f"{op} ({len(names)} node{'s' if len(names) > 1 else ''}: {shown})")
    return f"{len(missing)} unsupported op type{'s' if len(missing) > 1 else ''} at opset {opset}: " + "; ".join(parts)


def _value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    graph = model.graph
    return {vi.name: vi.type for vi in list(graph.input) + list(graph.value_info) + list(graph.output)}


def _tensor_from_type(name: str, type_proto: onnx.TypeProto) -> tuple[np.dtype, tuple[int, ...]] | None:
    if not type_proto.HasField("tensor_type"):
        return None
    tt = type_proto.tensor_type
    if not tt.HasField("shape") or tt.elem_type == 0:
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except Exception:
        return None
    return dtype, tuple(dims)


def _declared_type(type_proto: onnx.TypeProto | None) -> tuple[str, list[int | str] | None]:
    """What ONNX declares or infers of a tensor aot cannot size: its dtype ("?" if unknown) and
    dims (a dim_value, a dim_param or "?"; None when the rank is unknown)."""
    if type_proto is None or not type_proto.HasField("tensor_type"):
        return "?", None
    tt = type_proto.tensor_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name if tt.elem_type else "?"
    except Exception:  # an elem_type numpy has no dtype for (bfloat16, float8 ...)
        dtype = "?"
    if not tt.HasField("shape"):
        return dtype, None
    return dtype, [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def _attr_value(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    return value


def _build_graph(model: onnx.ModelProto, source: str, name: str, lenient: bool = False) -> Graph:
    """With `lenient` (inspecting a model with unsupported ops), tensors whose shape cannot be
    known get shape () and are listed in graph.unknown_shapes instead of failing."""
    graph = Graph(name)
    opset = default_opset(model)
    types = _value_types(model)
    for init in model.graph.initializer:
        data = initializer_array(init, source)
        graph.add_tensor(Tensor(init.name, data.dtype, tuple(data.shape), data=data))
    for vi in runtime_inputs(model):
        info = _tensor_from_type(vi.name, vi.type)
        if info is None:
            raise ModelLoadError(f"{source}: input {vi.name!r} is not a tensor with a static shape")
        why = too_many_elements(info[1])
        if why is not None:
            raise ModelLoadError(f"{source}: input {vi.name!r}: {why}")
        graph.inputs.append(graph.add_tensor(Tensor(vi.name, info[0], info[1])))
    strict_checked = False
    used = {name for n in model.graph.node for name in n.input} | {vi.name for vi in model.graph.output}
    for index, proto in enumerate(model.graph.node):
        label = node_label(proto, index)
        inputs: list[Tensor | None] = []
        for in_name in proto.input:
            if not in_name:
                inputs.append(None)
            elif in_name in graph.tensors:
                inputs.append(graph.tensors[in_name])
            else:
                raise ModelLoadError(
                    f"{source}: node {label!r} ({proto.op_type}) reads {in_name!r}, which no node produces")
        outputs: list[Tensor | None] = []
        for out_name in proto.output:
            if not out_name or out_name not in used:
                outputs.append(None)  # omitted, or produced but never read: nothing to compute
                continue
            info = _tensor_from_type(out_name, types[out_name]) if out_name in types else None
            if info is None and lenient:
                graph.unknown_shapes.append(out_name)
                graph.declared_types[out_name] = _declared_type(types.get(out_name))
                info = (np.dtype(np.float32), ())
            if info is None:
                if not strict_checked:
                    strict_checked = True
                    infer_shapes(model, source, strict=True)  # raises with onnx's reason, if it has one
                raise NodeError(
                    f"{source}: node {label!r} ({proto.op_type})",
                    f"output {out_name!r} has no static shape after shape inference and folding"
                    + _unbound_input_hint(proto, inputs),
                )
            dtype, shape = info
            why = too_many_elements(shape)
            if why is not None:
                raise NodeError(f"{source}: node {label!r} ({proto.op_type})", f"output {out_name!r}: {why}")
            if out_name in graph.tensors:
                raise ModelLoadError(f"{source}: tensor {out_name!r} is produced twice")
            outputs.append(graph.add_tensor(Tensor(out_name, dtype, shape)))
        # Trailing omitted outputs carry no information.
        while outputs and outputs[-1] is None:
            outputs.pop()
        attrs = {a.name: _attr_value(a) for a in proto.attribute}
        graph.add_node(Node(proto.op_type, label, inputs, outputs, attrs, proto.domain, opset))  # type: ignore[arg-type]
    for vi in model.graph.output:
        if vi.name not in graph.tensors:
            raise ModelLoadError(f"{source}: graph output {vi.name!r} is never produced")
        graph.outputs.append(graph.tensors[vi.name])
    graph.prune()
    return graph
