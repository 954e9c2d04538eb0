"""Output shapes and types of the com.microsoft ops aot compiles, which onnx's shape inference
does not know (it has no com.microsoft schemas and leaves their outputs unsized).

onnxruntime.quantization writes these ops in QOperator format (QLinearAdd, QLinearConcat,
QGemm ...). Each rule below gives a node's output type from its inputs' static types, the way
onnxruntime's schemas infer them; shape_folding.py applies them in one pass in graph order,
with the ai.onnx nodes after them (a DequantizeLinear, a Flatten) inferred one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import onnx
from onnx import helper

from aot.errors import ModelLoadError, NodeError
from aot.frontend.loader import ONNXRUNTIME_DEFAULT_DOMAIN_OPS
from aot.ir.graph import Node
from aot.ops.attrs import spatial_padding, window_output_size, window_steps

MS_DOMAIN = "com.microsoft"
# A tensor's static type: (ONNX element type, shape).
StaticType = tuple[int, tuple[int, ...]]
# A rule gets the node, how errors name it (its name, or op type and position) and its inputs' types.
Rule = Callable[[onnx.NodeProto, str, list[StaticType | None]], StaticType]


class _Unsized(Exception):
    """The rule needs an input whose type is not known yet."""


def _known(inputs: list[StaticType | None], index: int) -> StaticType:
    found = inputs[index] if index < len(inputs) else None
    if found is None:
        raise _Unsized
    return found


def _attrs(node: onnx.NodeProto) -> dict:
    """The node's attributes, strings as text (as the importer gives them to the lowerings)."""
    values = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return {k: v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for k, v in values.items()}


def _where(node: onnx.NodeProto, label: str) -> str:
    return f"node {label!r} ({node.op_type})"


def _broadcast(node: onnx.NodeProto, label: str, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(a, b))
    except ValueError:
        raise NodeError(_where(node, label), f"inputs of shapes {list(a)} and {list(b)} do not broadcast") from None


def _binary(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    """QLinearAdd, QLinearMul: A (0) and B (3) broadcast; C of their type."""
    a, b = _known(inputs, 0), _known(inputs, 3)
    return a[0], _broadcast(node, label, a[1], b[1])


def _unary(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    return _known(inputs, 0)


def _bias_gelu(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    """BiasGelu: B broadcast over A."""
    a, b = _known(inputs, 0), _known(inputs, 1)
    return a[0], _broadcast(node, label, a[1], b[1])


def _concat(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    """QLinearConcat: Y_scale, Y_zero_point, then (X, scale, zero point) per input."""
    parts = [_known(inputs, i) for i in range(2, len(inputs), 3)]
    if not parts:
        raise NodeError(_where(node, label), "has no inputs to concatenate")
    rank = len(parts[0][1])
    axis = int(_attrs(node).get("axis", 0))
    if not -rank <= axis < max(rank, 1):
        raise NodeError(_where(node, label), f"axis {axis} is out of range for rank {rank}")
    axis %= max(rank, 1)
    first = parts[0][1]
    for _, shape in parts[1:]:
        if len(shape) != rank or any(s != f for d, (s, f) in enumerate(zip(shape, first)) if d != axis):
            raise NodeError(_where(node, label), f"input shapes {[list(p[1]) for p in parts]} differ off axis {axis}")
    out = list(first)
    out[axis] = sum(shape[axis] for _, shape in parts)
    return parts[0][0], tuple(out)


def _spatial(node: onnx.NodeProto, label: str, shape: tuple[int, ...]) -> tuple[tuple[int, ...], bool]:
    if len(shape) < 3:
        raise NodeError(_where(node, label), f"input rank {len(shape)}: expected N x C x spatial...")
    channels_last = int(_attrs(node).get("channels_last", 0)) == 1
    return (shape[1:-1] if channels_last else shape[2:]), channels_last


def _with_spatial(shape: tuple[int, ...], spatial: tuple[int, ...], channels_last: bool) -> tuple[int, ...]:
    if channels_last:
        return (shape[0], *spatial, shape[-1])
    return (shape[0], shape[1], *spatial)


def _global_pool(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    elem, shape = _known(inputs, 0)
    spatial, channels_last = _spatial(node, label, shape)
    return elem, _with_spatial(shape, (1,) * len(spatial), channels_last)


def _average_pool(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    """QLinearAveragePool: the ONNX pool window arithmetic (aot/ops/attrs.py), channels first or last."""
    elem, shape = _known(inputs, 0)
    spatial, channels_last = _spatial(node, label, shape)
    view = Node(node.op_type, label, [], [], _attrs(node), node.domain)  # errors name it as the importer does
    kernel = [int(k) for k in view.attr("kernel_shape", [])]
    if len(kernel) != len(spatial) or any(not 1 <= k < 2**31 for k in kernel):
        raise NodeError(_where(node, label), f"kernel_shape {kernel} does not match {len(spatial)} spatial dimensions")
    strides, dilations = window_steps(view, spatial)
    begin, end = spatial_padding(view, spatial, kernel, strides, dilations)
    out = window_output_size(view, spatial, kernel, strides, dilations, begin, end)
    if min(out, default=1) < 1:
        raise NodeError(_where(node, label), f"window {kernel} does not fit the input's spatial shape {list(spatial)}")
    return elem, _with_spatial(shape, out, channels_last)


def _gemm(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    """QGemm: Y = A' B' of shape [M, N]; quantised like y_zero_point (8) if given, else float."""
    (_, a), (_, b) = _known(inputs, 0), _known(inputs, 3)
    if len(a) != 2 or len(b) != 2:
        raise NodeError(_where(node, label), f"A {list(a)} and B {list(b)} must be matrices")
    attrs = _attrs(node)
    m, k = (a[1], a[0]) if int(attrs.get("transA", 0)) else a
    k_b, n = (b[1], b[0]) if int(attrs.get("transB", 0)) else b
    if k != k_b:
        raise NodeError(_where(node, label), f"A {list(a)} and B {list(b)} do not multiply "
                                             f"(transA {attrs.get('transA', 0)}, transB {attrs.get('transB', 0)})")
    elem = _known(inputs, 8)[0] if len(node.input) > 8 and node.input[8] else onnx.TensorProto.FLOAT
    return elem, (m, n)


def _matmul_nbits(node: onnx.NodeProto, label: str, inputs: list[StaticType | None]) -> StaticType:
    """MatMulNBits: Y = A B with B [K, N] quantised: A's shape with its last dimension N."""
    elem, a = _known(inputs, 0)
    attrs = _attrs(node)
    k, n = int(attrs.get("K", 0)), int(attrs.get("N", 0))
    if not a or a[-1] != k:
        raise NodeError(_where(node, label), f"A {list(a)}: its last dimension must be K={k}")
    return elem, (*a[:-1], n)


RULES: dict[str, Rule] = {
    "QLinearAdd": _binary, "QLinearMul": _binary,
    "QLinearSigmoid": _unary, "QLinearLeakyRelu": _unary, "QLinearSoftmax": _unary,
    "QLinearConcat": _concat,
    "QLinearGlobalAveragePool": _global_pool, "QLinearAveragePool": _average_pool,
    "QGemm": _gemm,
    "MatMulNBits": _matmul_nbits,
    "FastGelu": _unary, "QuickGelu": _unary, "BiasGelu": _bias_gelu,
    "SkipLayerNormalization": _unary, "SkipSimplifiedLayerNormalization": _unary,
    "RotaryEmbedding": _unary, "SimplifiedLayerNormalization": _unary,
}


_A = onnx.AttributeProto
# The attributes of each op and their types (onnxruntime's schemas); the onnx checker knows no
# com.microsoft schema, so nothing else checks them before the lowerings read them.
ATTRIBUTE_TYPES: dict[str, dict[str, int]] = {
    "QLinearConcat": {"axis": _A.INT},
    "QLinearLeakyRelu": {"alpha": _A.FLOAT},
    "QLinearSoftmax": {"axis": _A.INT, "opset": _A.INT},
    "QLinearGlobalAveragePool": {"channels_last": _A.INT},
    "QLinearAveragePool": {"auto_pad": _A.STRING, "ceil_mode": _A.INT, "channels_last": _A.INT,
                           "count_include_pad": _A.INT, "kernel_shape": _A.INTS, "pads": _A.INTS, "strides": _A.INTS},
    "QGemm": {"alpha": _A.FLOAT, "transA": _A.INT, "transB": _A.INT},
    "MatMulNBits": {"K": _A.INT, "N": _A.INT, "bits": _A.INT, "block_size": _A.INT, "accuracy_level": _A.INT},
    "QuickGelu": {"alpha": _A.FLOAT},
    "SkipLayerNormalization": {"epsilon": _A.FLOAT},
    "SkipSimplifiedLayerNormalization": {"epsilon": _A.FLOAT},
    "SimplifiedLayerNormalization": {"axis": _A.INT, "epsilon": _A.FLOAT, "stash_type": _A.INT},
    "RotaryEmbedding": {"interleaved": _A.INT, "num_heads": _A.INT, "rotary_embedding_dim": _A.INT,
                        "is_packed_batching": _A.INT, "scale": _A.FLOAT},
}


def _check_attribute_types(node: onnx.NodeProto, label: str, source: str) -> None:
    expected = ATTRIBUTE_TYPES.get(node.op_type, {})
    for attr in node.attribute:
        wanted = expected.get(attr.name)
        if wanted is not None and attr.type != wanted:
            raise ModelLoadError(f"{source}: {_where(node, label)}: attribute {attr.name!r} is "
                                 f"{_A.AttributeType.Name(attr.type)}, expected {_A.AttributeType.Name(wanted)}")


def static_type(type_proto: onnx.TypeProto) -> StaticType | None:
    """(element type, shape) of a tensor type with a known element type and static shape."""
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    tt = type_proto.tensor_type
    if not tt.elem_type or not all(d.HasField("dim_value") and d.dim_value >= 0 for d in tt.shape.dim):
        return None
    return tt.elem_type, tuple(int(d.dim_value) for d in tt.shape.dim)


def has_rule(node: onnx.NodeProto) -> bool:
    contrib = node.domain == MS_DOMAIN or (node.domain in ("", "ai.onnx")
                                           and node.op_type in ONNXRUNTIME_DEFAULT_DOMAIN_OPS)
    return contrib and node.op_type in RULES and bool(node.output) and bool(node.output[0])


def _statistics_shape(node: onnx.NodeProto, label: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The per-row statistics of a normalization: the input's shape with 1 for each normalised axis."""
    axis = int(_attrs(node).get("axis", -1)) if node.op_type == "SimplifiedLayerNormalization" else -1
    if not shape or not -len(shape) <= axis < len(shape):
        raise NodeError(_where(node, label), f"axis {axis} is out of range for input shape {list(shape)}")
    axis %= len(shape)
    return (*shape[:axis], *(1,) * (len(shape) - axis))


def contrib_extra_output_types(node: onnx.NodeProto, label: str, types: Mapping[str, onnx.TypeProto],
                               source: str) -> dict[str, onnx.TypeProto]:
    """The types of a contrib normalization's optional outputs past the first (mean, inv_std_var,
    input_skip_bias_sum), by name, once its input's type is known; {} for other ops."""
    skip = ((1, "stat"), (2, "stat"), (3, "sum"))
    extra = {"SimplifiedLayerNormalization": ((1, "stat"),), "SkipLayerNormalization": skip,
             "SkipSimplifiedLayerNormalization": skip}.get(node.op_type, ())
    known = static_type(types[node.input[0]]) if node.input and node.input[0] in types else None
    if known is None or not has_rule(node):
        return {}
    found = {}
    for position, kind in extra:
        if position < len(node.output) and node.output[position]:
            if kind == "sum":
                found[node.output[position]] = helper.make_tensor_type_proto(known[0], list(known[1]))
            else:
                try:
                    stats = _statistics_shape(node, label, known[1])
                except NodeError as e:
                    raise ModelLoadError(f"{source}: {e}") from e
                found[node.output[position]] = helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, list(stats))
    return found


def contrib_output_type(node: onnx.NodeProto, label: str, types: Mapping[str, onnx.TypeProto],
                        source: str) -> onnx.TypeProto | None:
    """The type of output 0 of a node with a rule (has_rule) from its inputs' `types`, or None
    while one it needs is not statically known. A static type already in `types` for the output
    (a graph output's declared one) must be that one."""
    _check_attribute_types(node, label, source)
    inputs = [static_type(types[name]) if name in types else None for name in node.input]
    try:
        computed = RULES[node.op_type](node, label, inputs)
    except _Unsized:
        return None
    except NodeError as e:
        raise ModelLoadError(f"{source}: {e}") from e
    name = node.output[0]
    declared = static_type(types[name]) if name in types else None
    if declared is not None and declared != computed:
        raise ModelLoadError(f"{source}: {_where(node, label)}: output {name!r} is declared {_type_text(declared)} but "
                             f"the node computes {_type_text(computed)}")
    return helper.make_tensor_type_proto(computed[0], list(computed[1]))


def _type_text(t: StaticType) -> str:
    return f"{onnx.TensorProto.DataType.Name(t[0]).lower()} {list(t[1])}"
