"""onnxruntime as an exact reference for int8 models on x86 hosts without VNNI.

There onnxruntime multiplies uint8 activations by int8 weights with vpmaddubsw, which sums two
products in 16 bits and saturates (255 * 127 * 2 > 32767): its int8 Conv and MatMul results then
differ from the ONNX definition, by up to 16 quantisation steps on the example (onnxruntime's
quantisation guide mentions it: "reduce_range" or uint8 weights avoid it). Its uint8 x uint8
kernels widen to 16 bits first and are exact. So for the reference run every int8 tensor is
re-encoded as uint8: value + 128, zero point + 128. Every quantised op reads its integers only
as differences from their zero point, and the ops that move bytes (reshapes, pools of maxima,
concatenations) commute with the shift, so the re-encoded graph computes the same real values
with onnxruntime's exact kernels. A graph with any other use of an int8 tensor is left as it is.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

# Ops that read int8 inputs only relative to a zero point given beside them, or move their bytes
# unchanged (a maximum, a nearest-neighbour resize and a copy commute with adding 128).
_AFFINE_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger",
    "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearConcat",
    "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSoftmax", "QGemm",
})
_BYTE_MOVES = frozenset({
    "MaxPool", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Concat", "Slice", "Split",
    "Identity", "Gather", "DepthToSpace", "SpaceToDepth", "Expand", "Tile",
})
# The integer products onnxruntime runs with vpmaddubsw: directly, or fused from DequantizeLinear
# into a float Conv/MatMul/Gemm (QDQ graphs). A graph without them needs no re-encoding (and its
# other int8 kernels, such as QLinearAveragePool, round a few values differently for uint8).
_PRODUCTS = frozenset({"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "QGemm"})
_FLOAT_PRODUCTS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
# (value input, zero point input) pairs whose zero point may be left out (then 0: 128 after the shift)
_OPTIONAL_ZERO_POINTS = {"DequantizeLinear": ((0, 2),), "MatMulInteger": ((0, 2), (1, 3)),
                         "ConvInteger": ((0, 2), (1, 3))}


@functools.cache
def onnxruntime_int8_saturates() -> bool:
    """Whether onnxruntime's uint8 x int8 kernels on this machine can saturate: an x86 CPU
    without AVX-512 VNNI or AVX-VNNI (Linux's /proc/cpuinfo; elsewhere assumed exact)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return bool(flags) and "avx512_vnni" not in flags and "avx_vnni" not in flags


@dataclass(frozen=True)
class Reencoded:
    """A model whose int8 tensors are uint8, and the graph inputs and outputs that moved."""

    model: onnx.ModelProto
    inputs: frozenset[str]
    outputs: frozenset[str]

    def feeds(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {n: _to_unsigned(v) if n in self.inputs else v for n, v in inputs.items()}

    def result(self, name: str, value: np.ndarray) -> np.ndarray:
        return _to_signed(value) if name in self.outputs else value


def _to_unsigned(a: np.ndarray) -> np.ndarray:
    return np.asarray(np.asarray(a).astype(np.int16) + 128).astype(np.uint8)


def _to_signed(a: np.ndarray) -> np.ndarray:
    return np.asarray(np.asarray(a).astype(np.int16) - 128).astype(np.int8)


def _int8_tensors(model: onnx.ModelProto) -> set[str]:
    """Names of the int8 tensors: initializers, graph inputs, inferred values, and outputs of the
    ops onnx's shape inference does not know (com.microsoft), typed like their zero point."""
    graph = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - unknown ops: fall back on the declared types
        inferred = graph
    int8 = {t.name for t in graph.initializer if t.data_type == TensorProto.INT8}
    for vi in (*inferred.input, *inferred.value_info, *inferred.output):
        if vi.type.tensor_type.elem_type == TensorProto.INT8:
            int8.add(vi.name)
    for node in graph.node:  # in topological order, as ONNX requires
        if node.op_type == "Constant" and any(a.t.data_type == TensorProto.INT8 for a in node.attribute):
            int8.update(node.output)
        elif _output_is_int8(node, int8):
            int8.update(o for o in node.output if o)
    return int8


# The output zero point's input of the com.microsoft ops: the output has its type. Left out, the
# output has the first input's type (QGemm without y_scale gives float).
_CONTRIB_OUTPUT_ZERO_POINT = {"QLinearAdd": 7, "QLinearMul": 7, "QLinearSigmoid": 4, "QLinearLeakyRelu": 4,
                              "QLinearConcat": 1, "QLinearGlobalAveragePool": 4, "QLinearAveragePool": 4,
                              "QLinearSoftmax": 4, "QGemm": 8}


def _output_is_int8(node: onnx.NodeProto, int8: set[str]) -> bool:
    """For the ops onnx's shape inference leaves untyped or may: byte moves and com.microsoft's."""
    if node.op_type in _BYTE_MOVES:
        return bool(node.input) and node.input[0] in int8
    if node.domain != "com.microsoft":
        return False
    index = _CONTRIB_OUTPUT_ZERO_POINT.get(node.op_type)
    if index is None:
        return False
    if len(node.input) > index and node.input[index]:
        return node.input[index] in int8
    if node.op_type == "QGemm" and not (len(node.input) > 7 and node.input[7]):
        return False
    return bool(node.input) and node.input[0] in int8


def reencode_int8(model: onnx.ModelProto) -> Reencoded | None:
    """The model with every int8 tensor stored as uint8 + 128, or None when it has no int8
    product or uses an int8 tensor in a way the shift would change."""
    int8 = _int8_tensors(model)
    graph = model.graph
    if not _has_saturating_product(graph, int8):
        return None
    initializers = {t.name: t for t in graph.initializer}
    for node in graph.node:
        used = [i for i, name in enumerate(node.input) if name in int8]
        if not used:
            continue
        if node.op_type not in _AFFINE_OPS and node.op_type not in _BYTE_MOVES:
            return None
        if node.op_type in _BYTE_MOVES and node.op_type != "Concat" and used != [0]:
            return None  # an int8 index or shape
        if node.op_type == "QuantizeLinear" and any(a.name == "output_dtype" for a in node.attribute):
            return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for t in g.initializer:
        if t.name in int8:
            t.CopyFrom(numpy_helper.from_array(_to_unsigned(numpy_helper.to_array(t)), t.name))
    for node in g.node:
        if node.op_type == "Constant" and node.output[0] in int8:
            for a in node.attribute:
                if a.t.data_type == TensorProto.INT8:
                    a.t.CopyFrom(numpy_helper.from_array(_to_unsigned(numpy_helper.to_array(a.t)), a.t.name))
        for value, zero_point in _OPTIONAL_ZERO_POINTS.get(node.op_type, ()):
            if len(node.input) > value and node.input[value] in int8 and (
                    len(node.input) <= zero_point or not node.input[zero_point]):
                shape = _zero_point_shape(node, initializers)
                if shape is None:
                    return None
                name = f"{node.input[value]}_aot_zero_point_{len(g.initializer)}"
                g.initializer.append(numpy_helper.from_array(np.full(shape, 128, np.uint8), name))
                while len(node.input) < zero_point:
                    node.input.append("")
                if len(node.input) == zero_point:
                    node.input.append(name)
                else:
                    node.input[zero_point] = name
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.name in int8 and vi.type.tensor_type.elem_type == TensorProto.INT8:
            vi.type.tensor_type.elem_type = TensorProto.UINT8
    return Reencoded(out, frozenset(i.name for i in g.input if i.name in int8),
                     frozenset(o.name for o in g.output if o.name in int8))


def _has_saturating_product(graph: onnx.GraphProto, int8: set[str]) -> bool:
    float_products = {i for n in graph.node if n.op_type in _FLOAT_PRODUCTS for i in n.input}
    for node in graph.node:
        reads_int8 = any(name in int8 for name in node.input)
        if reads_int8 and node.op_type in _PRODUCTS:
            return True
        if reads_int8 and node.op_type == "DequantizeLinear" and node.output[0] in float_products:
            return True
    return False


def _zero_point_shape(node: onnx.NodeProto, initializers: Mapping[str, TensorProto]) -> tuple[int, ...] | None:
    """A DequantizeLinear zero point has its scale's shape; the integer products take a scalar."""
    if node.op_type != "DequantizeLinear":
        return ()
    scale = initializers.get(node.input[1])
    return tuple(scale.dims) if scale is not None else None


def reference_model(model: onnx.ModelProto) -> Reencoded | None:
    """The re-encoded model where this machine's onnxruntime would saturate, else None."""
    return reencode_int8(model) if onnxruntime_int8_saturates() else None
