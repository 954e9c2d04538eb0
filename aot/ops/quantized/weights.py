"""Weights kept quantised: a float Gemm or MatMul whose weights are `DequantizeLinear(int8
constant)` reads the int8 values and converts them in its register tiles, instead of storing
the weights expanded to float32 (a weight-only int8 model would ship 4x its size).

The product is linear in the weights, so the scale comes out of the reduction:
    sum_k a[k] * (w[k][j] - zp[j]) * s[j]  =  s[j] * sum_k a[k] * (w[k][j] - zp[j])
with s and zp per tensor or per output column. The kernel sums a * (w - zp), the difference
stored as int8 where it fits (symmetric int8 weights, uint8 weights around 128) else int16, and
multiplies by s[j] before the epilogue.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor

QUANTIZED_WEIGHT_TYPES = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16))


@dataclass(frozen=True)
class QuantizedWeight:
    values: np.ndarray  # w - zero_point, int8 where every value fits, else int16; w's shape
    scale: np.ndarray  # one float32 per index along `axis`, or a single one
    axis: int | None  # None: per tensor


def _dequantized_constant(t: Tensor | None) -> tuple[Tensor, Tensor, Tensor | None, int | None] | None:
    """(values, scale, zero point, axis or None per tensor) of the DequantizeLinear of constant
    8/16-bit values with constant parameters, per tensor or per axis (not in blocks), that makes
    `t`: the checks alone, without touching the weights' data."""
    node = t.producer if t is not None else None
    if node is None or node.op_type != "DequantizeLinear" or int(node.attr("block_size", 0)):
        return None
    values, scale, zero = node.input(0), node.input(1), node.input(2)
    if values is None or scale is None or not values.is_constant or not scale.is_constant:
        return None
    if zero is not None and not zero.is_constant or values.dtype not in QUANTIZED_WEIGHT_TYPES:
        return None
    axis = None if scale.size == 1 else int(node.attr("axis", 1)) % max(values.rank, 1)
    return values, scale, zero, axis


def quantized_weight(t: Tensor | None) -> QuantizedWeight | None:
    """`t` as a weight kept quantised (see _dequantized_constant), its integers computed; None
    otherwise."""
    found = _dequantized_constant(t)
    if found is None:
        return None
    values, scale, zero, axis = found
    assert values.data is not None and scale.data is not None
    zero_data = np.zeros(scale.shape, np.int32) if zero is None or zero.data is None else zero.data
    spread = [1] * values.rank
    if axis is not None:
        spread[axis] = -1
    difference = values.data.astype(np.int32) - zero_data.astype(np.int32).reshape(spread if axis is not None else ())
    narrow = np.int8 if difference.min(initial=0) >= -128 and difference.max(initial=0) <= 127 else np.int16
    return QuantizedWeight(difference.astype(narrow), scale.data.astype(np.float32).reshape(-1), axis)


def column_scales(weight: QuantizedWeight, column_axis: int, columns: int) -> np.ndarray | None:
    """The scale of each of the product's `columns` output columns, when the weight's scale is
    per tensor or along `column_axis`; None when it varies along the reduction instead."""
    if weight.axis is None:
        return np.full(columns, weight.scale[0], np.float32)
    return weight.scale if weight.axis == column_axis and weight.scale.size == columns else None


def kept_quantized(node: Node) -> bool:
    """Whether this DequantizeLinear's every reader takes its weights quantised (MatMul's and
    Gemm's B, scaled per tensor or per output column): then it computes nothing itself. Decided
    from shapes and attributes only (the lowerings ask it for every such node)."""
    out = node.outputs[0] if node.outputs else None
    if out is None or not out.consumers or _dequantized_constant(out) is None:
        return False
    return all(_reads_quantized(reader, out) for reader in out.consumers)


def _reads_quantized(reader: Node, weight: Tensor) -> bool:
    if reader.input(1) is not weight or weight in reader.inputs[:1] or weight in reader.inputs[2:]:
        return False
    found = _dequantized_constant(weight)
    if found is None or weight.rank != 2 or reader.inputs[0] is None or reader.inputs[0].dtype != np.float32:
        return False
    _, scale, _, axis = found
    if reader.op_type == "MatMul":
        column_axis = 1
    elif reader.op_type == "Gemm":
        column_axis = 0 if int(reader.attr("transB", 0)) else 1
    else:
        return False
    return axis is None or (axis == column_axis and scale.size == weight.shape[column_axis])
