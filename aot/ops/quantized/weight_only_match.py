"""Float MatMul/Gemm over DequantizeLinear(constant int4/uint4/int8/uint8 weight) as MatMulNBits.

The weight-only quantised models that onnxruntime.quantization and exporters write keep float
activations and dequantise constant integer weights: per tensor, per output column (axis of N)
or in blocks along K (opset 21's block_size). Folded, those weights would ship as float32; as a
MatMulNBits node (aot/ops/quantized/weight_only.py) they stay in their bytes. What this does
not match (a Gemm with transA, a C per element) may still read 8-bit weights in the float
product's own tiles (aot/ops/quantized/weights.py).
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Graph, Node, Tensor
from aot.ops.quantized.tensor_params import MS_DOMAIN
from aot.ops.quantized.weight_only_pack import matmul_nbits_arrays

# Integer weight types by name (int4/uint4 are ml_dtypes types): (bits, offset to unsigned codes).
WEIGHT_CODES = {"int8": (8, 128), "uint8": (8, 0), "int4": (4, 8), "uint4": (4, 0)}


def _weight_dequantize(b: Tensor | None) -> Node | None:
    node = b.producer if b is not None else None
    if node is None or node.op_type != "DequantizeLinear" or b is None or b.rank != 2:
        return None
    values, scale, zero = node.input(0), node.input(1), node.input(2)
    if values is None or scale is None or values.data is None or scale.data is None or scale.dtype != np.float32:
        return None
    if values.dtype.name not in WEIGHT_CODES or zero is not None and zero.data is None:
        return None
    return node


def _blocked(dq: Node, k_axis: int, k: int, n: int) -> tuple[int, np.ndarray, np.ndarray | None] | None:
    """(block, scales [n_blocks, N], zero points [n_blocks, N] or None) in the weight's [K, N]
    orientation, or None for a layout the kernel does not read (scales along K per row)."""
    scale = dq.input(1).data
    zero = dq.input(2).data if dq.input(2) is not None else None
    block = int(dq.attr("block_size", 0))
    axis = int(dq.attr("axis", 1)) % 2
    blocks = -(-k // block) if block > 0 else 0
    blocked_shape = (blocks, n) if k_axis == 0 else (n, blocks)
    if block == 0 and (scale.size == 1 or axis != k_axis and scale.size == n):
        block = k
    elif not (block > 0 and axis == k_axis and scale.shape == blocked_shape):
        return None

    def spread(p: np.ndarray) -> np.ndarray:
        if p.ndim < 2:
            return np.broadcast_to(p.reshape(1, -1), (1, n))
        return p if k_axis == 0 else p.T

    return block, np.asarray(spread(scale), np.float32), None if zero is None else np.asarray(spread(zero))


def weight_only_node(graph: Graph, node: Node) -> Node | None:
    """The MatMulNBits that computes `node` (a MatMul, or a Gemm without transA) from its
    dequantised weight's integers, or None where it does not apply."""
    a, b = node.input(0), node.input(1)
    dq = _weight_dequantize(b)
    if a is None or a.dtype != np.float32 or a.rank < 1 or dq is None:
        return None
    assert b is not None
    transposed = node.op_type == "Gemm" and bool(int(node.attr("transB", 0)))
    k, n = (b.shape[1], b.shape[0]) if transposed else b.shape
    if a.shape[-1] != k or node.op_type == "Gemm" and (a.rank != 2 or int(node.attr("transA", 0))):
        return None
    bias = _gemm_bias(graph, node, n) if node.op_type == "Gemm" else None
    if bias is False:
        return None
    layout = _blocked(dq, 1 if transposed else 0, k, n)
    if layout is None:
        return None
    block, scales, zero = layout
    values = dq.input(0)
    bits, offset = WEIGHT_CODES[values.dtype.name]
    codes = values.data.astype(np.int32) + offset
    codes = codes.T if transposed else codes
    zero_codes = (zero.astype(np.int32) + offset) if zero is not None else np.full(scales.shape, offset, np.int32)
    block += block % 2 if bits == 4 else 0  # a whole byte per block: the padding rows are never read
    scales = scales * np.float32(node.attr("alpha", 1.0)) if node.op_type == "Gemm" else scales
    arrays = matmul_nbits_arrays(codes.astype(np.uint8), scales.astype(np.float32),
                                 zero_codes.astype(np.uint8), bits=bits, block=block)
    inputs: list[Tensor | None] = [a]
    for data, what in zip(arrays, ("codes", "scales", "zero_points")):
        inputs.append(graph.add_constant(data, f"{values.name}_{what}") if data is not None else None)
    inputs += [None, bias if isinstance(bias, Tensor) else None]
    attrs = {"K": k, "N": n, "bits": bits, "block_size": block}
    return Node("MatMulNBits", node.name, inputs, list(node.outputs), attrs, MS_DOMAIN, 1)


def _gemm_bias(graph: Graph, node: Node, n: int) -> Tensor | None | bool:
    """Gemm's beta * C as a bias of N values (None: no C), or False for a C that is not one."""
    c = node.input(2)
    beta = float(node.attr("beta", 1.0))
    if c is None or beta == 0.0:
        return None
    if c.size != n or c.rank > 2 or c.rank == 2 and c.shape[0] != 1 or c.dtype != np.float32:
        return False
    if beta == 1.0:
        return c
    if c.data is None:
        return False
    return graph.add_constant((np.float32(beta) * c.data).reshape(n).astype(np.float32), f"{c.name}_times_beta")


def dequantized_gather(graph: Graph, node: Node) -> list[Node] | None:
    """Gather(DequantizeLinear(constant 8-bit table [V, D]), indices) along axis 0, the table
    scaled per tensor or per row: the gather of the integers, converted and scaled after it
    (Cast, Sub, Mul, with per-row scales and zero points gathered by the same indices), so the
    table stays 8-bit in the package."""
    table, indices, out = node.input(0), node.input(1), node.outputs[0]
    dq = _weight_dequantize(table)
    if dq is None or indices is None or out is None or int(node.attr("axis", 0)) % 2 != 0:
        return None
    values, scale, zero = dq.input(0), dq.input(1), dq.input(2)
    per_row = scale.size != 1
    if WEIGHT_CODES[values.dtype.name][0] != 8 or int(dq.attr("block_size", 0)) \
            or per_row and (int(dq.attr("axis", 1)) % 2 != 0 or scale.size != values.shape[0]):
        return None
    rows = values.shape[0]

    def tensor(hint: str, dtype: np.dtype) -> Tensor:
        return graph.add_tensor(Tensor(graph.unique_name(f"{out.name}_{hint}"), np.dtype(dtype), out.shape))

    def per_index(data: np.ndarray, hint: str) -> Tensor:
        """A per-row parameter gathered like the table's rows, or a per-tensor one as it is."""
        column = graph.add_constant(data.astype(np.float32).reshape(rows, 1) if per_row
                                    else data.astype(np.float32).reshape(()), f"{values.name}_{hint}")
        if not per_row:
            return column
        gathered = graph.add_tensor(Tensor(graph.unique_name(f"{out.name}_{hint}"), np.dtype(np.float32),
                                           (*indices.shape, 1)))
        nodes.append(Node("Gather", f"{node.name}_{hint}", [column, indices], [gathered], {"axis": 0}, "", 13))
        return gathered

    nodes: list[Node] = []
    codes, real = tensor("codes", values.dtype), tensor("float_codes", np.float32)
    nodes += [Node("Gather", node.name, [values, indices], [codes], {"axis": 0}, "", 13),
              Node("Cast", f"{node.name}_float", [codes], [real], {"to": 1}, "", 13)]
    if zero is not None and np.any(zero.data):
        shifted = tensor("shifted", np.float32)
        nodes.append(Node("Sub", f"{node.name}_zero_point", [real, per_index(zero.data, "zero_point")], [shifted],
                          {}, "", 14))
        real = shifted
    nodes.append(Node("Mul", f"{node.name}_scale", [real, per_index(scale.data, "scale")], [out], {}, "", 14))
    return nodes
