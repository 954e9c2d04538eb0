"""Every node's tensor types checked against its op's ONNX schema before lowering.

onnx's lenient shape inference (the one that accepts what it cannot size) lets a model through
whose types break an op's constraints: an Add of int32 and float, a Conv with an int64 bias, a
Relu declared to give uint32. The lowerings assume the schema holds, so such a model failed
inside them with an internal error. Here each type variable of a schema (T, T1 ...) must stand
for one type among the node's inputs and outputs, and that type must be one the schema allows;
tensors whose type is not known are skipped.
"""

from __future__ import annotations

import onnx
from onnx import defs

from aot.errors import ModelLoadError
from aot.frontend.loader import default_opset
from aot.frontend.shape_folding import node_label, onnx_type_name


def _known_types(model: onnx.ModelProto) -> dict[str, int]:
    graph = model.graph
    types = {t.name: t.data_type for t in graph.initializer}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    return types


def _type_text(elem_type: int) -> str:
    return f"tensor({onnx_type_name(elem_type)})"


def _bindings(params: list, names: list[str]) -> list[tuple[str, str]]:
    """(type variable or concrete type, tensor name) for each actual argument."""
    pairs = []
    for i, name in enumerate(names):
        if not params:
            break
        param = params[min(i, len(params) - 1)]
        if i >= len(params) and param.option != defs.OpSchema.FormalParameterOption.Variadic:
            break
        if name:
            pairs.append((param.type_str, name))
    return pairs


def check_type_constraints(model: onnx.ModelProto, source: str) -> None:
    types = _known_types(model)
    opset = default_opset(model)
    for index, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            schema = defs.get_schema(node.op_type, opset, node.domain)
        except defs.SchemaError:
            continue  # an unknown op is reported as unsupported
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        bound: dict[str, tuple[str, int]] = {}
        pairs = _bindings(list(schema.inputs), list(node.input)) + _bindings(list(schema.outputs), list(node.output))
        for variable, name in pairs:
            if name not in types:
                continue
            actual = types[name]
            where = f"{source}: node {node_label(node, index)!r} ({node.op_type})"
            if variable in allowed and allowed[variable] and _type_text(actual) not in allowed[variable]:
                raise ModelLoadError(f"{where}: {name!r} is {_type_text(actual)}, which {node.op_type} does not take "
                                     f"there (it takes {', '.join(sorted(allowed[variable]))})")
            if variable not in allowed:  # a concrete type, such as Reshape's tensor(int64) shape
                if variable.startswith("tensor(") and _type_text(actual) != variable:
                    raise ModelLoadError(f"{where}: {name!r} is {_type_text(actual)}; {node.op_type} needs {variable}")
                continue
            first = bound.setdefault(variable, (name, actual))
            if first[1] != actual:
                raise ModelLoadError(f"{where}: {first[0]!r} is {_type_text(first[1])} but {name!r} is "
                                     f"{_type_text(actual)}; {node.op_type} needs them of one type")


# Element types no kernel or C API entry of aot computes with, and what to do instead.
_UNCOMPILABLE_TYPES = {
    onnx.TensorProto.STRING: "strings (tokenize in the application and pass the token ids)",
    onnx.TensorProto.COMPLEX64: "complex numbers",
    onnx.TensorProto.COMPLEX128: "complex numbers",
}


def check_graph_io_types(model: onnx.ModelProto, source: str) -> None:
    """Refuse a graph input or output of a type aot cannot compute with, naming it."""
    graph = model.graph
    for kind, infos in (("input", graph.input), ("output", graph.output)):
        for vi in infos:
            elem_type = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
            if elem_type in _UNCOMPILABLE_TYPES:
                raise ModelLoadError(f"{source}: {kind} {vi.name!r} is a tensor of {_UNCOMPILABLE_TYPES[elem_type]}: "
                                     "aot compiles numeric tensors only")
