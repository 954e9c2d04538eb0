"""com.microsoft MatMulNBits: a float product whose weights stay 4-bit or 8-bit in the package.

Y[..., n] = sum_k A[..., k] * (u[k, n] - z[k / block, n]) * s[k / block, n] (+ bias[n]), the codes
u, scales s and zero points z as aot/ops/quantized/weight_only_pack.py packs them. The
passes turn a DequantizeLinear of constant int4/int8 weights read by MatMul or Gemm into this op
too (aot/passes/quantized_ops.py), so both keep their quantised bytes.

The kernel is matmul_rows' row-blocked product (aot/ops/contraction/row_updates.py) with each
weight loaded as a byte, its nibble taken, converted and scaled in the innermost loop along N:
the codes are read in order, once per block of rows (once in all for a decode step's single row).
accuracy_level is ignored: the products are float32, as at level 0.
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, Load, binary, cast, const
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.contraction.row_updates import matmul_rows
from aot.ops.quantized.tensor_params import MS_DOMAIN
from aot.ops.quantized.weight_only_pack import PackedWeight, from_matmul_nbits
from aot.ops.registry import register

BITS = (4, 8)


def _constant(node: Node, index: int, what: str) -> np.ndarray | None:
    t = node.input(index)
    if t is None:
        return None
    if t.data is None:
        raise fail(node, f"{what} {t.name!r} must be a constant (an initializer)")
    return t.data


def packed_weight(node: Node) -> PackedWeight:
    """The node's weights checked against its attributes, packed for the kernel."""
    k, n = int(node.attr("K", 0)), int(node.attr("N", 0))
    bits, block = int(node.attr("bits", 4)), int(node.attr("block_size", 0))
    if bits not in BITS:
        raise fail(node, f"bits={bits}: MatMulNBits is implemented for 4 and 8 bits")
    if block < 1 or block * bits % 8:
        raise fail(node, f"block_size={block}: must be a positive number of whole bytes of {bits}-bit values")
    if k <= 0 or n <= 0:
        raise fail(node, f"attributes K={k} and N={n} must be positive")
    if node.input(4) is not None:
        raise fail(node, "g_idx (act-order weights) is not supported; quantize without act_order")
    blocks, blob = -(-k // block), block * bits // 8
    b = _constant(node, 1, "B")
    scales = _constant(node, 2, "scales")
    zero = _constant(node, 3, "zero_points")
    assert b is not None and scales is not None  # required_input checked them
    if b.dtype != np.uint8 or b.size != n * blocks * blob:
        raise fail(node, f"B {list(b.shape)} {b.dtype}: expected uint8 [{n}, {blocks}, {blob}] for K={k}, N={n}, "
                         f"bits={bits}, block_size={block}")
    if scales.size != n * blocks or scales.dtype.kind != "f":
        raise fail(node, f"scales {list(scales.shape)} {scales.dtype}: expected {n * blocks} floats")
    zero_bytes = n * (-(-blocks * bits // 8))
    if zero is not None and zero.size != (zero_bytes if zero.dtype == np.uint8 else n * blocks):
        raise fail(node, f"zero_points {list(zero.shape)} {zero.dtype}: does not match N={n} and "
                         f"{blocks} blocks of {bits} bits")
    return from_matmul_nbits(b, scales, zero, k=k, n=n, bits=bits, block=block)


@register("MatMulNBits", domain=MS_DOMAIN)
def lower_matmul_nbits(node: Node, ctx: LoweringContext) -> None:
    a = required_input(node, 0, "A")
    required_input(node, 1, "B")
    required_input(node, 2, "scales")
    y = node.outputs[0]
    assert y is not None
    if a.dtype != np.float32:
        raise fail(node, f"A has dtype {a.dtype}: MatMulNBits is implemented for float32")
    weight = packed_weight(node)
    if a.rank < 1 or a.shape[-1] != weight.k:
        raise fail(node, f"A {list(a.shape)}: its last dimension must be K={weight.k}")
    m = int(np.prod(a.shape[:-1], dtype=np.int64))
    if y.shape != (*a.shape[:-1], weight.n):
        raise fail(node, f"output {list(y.shape)} does not match A {list(a.shape)} and N={weight.n}")
    bias = node.input(5)
    if bias is not None and bias.size != weight.n:
        raise fail(node, f"bias {list(bias.shape)}: expected {weight.n} values")
    _emit(node, ctx, a, weight, bias, m)


def _emit(node: Node, ctx: LoweringContext, a: Tensor, weight: PackedWeight, bias: Tensor | None, m: int) -> None:
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    n, block = weight.n, weight.block
    av = View(kb.input(a).buffer, (m, weight.k))
    yv = View(kb.output(final).buffer, (m, n))
    codes = kb.input(ctx.constant(weight.codes, f"{node.name}_codes")).buffer
    scales = kb.input(ctx.constant(weight.scales, f"{node.name}_scales")).buffer
    zero = kb.input(ctx.constant(weight.zero, f"{node.name}_zero_points")).buffer \
        if isinstance(weight.zero, np.ndarray) else None
    bias_view = View(kb.input(bias).buffer, (n,)) if bias is not None else None
    rows = final.shape[:-1]

    def b_at(r: Expr, j: Expr) -> Expr:
        if weight.bits == 8:
            code = cast(Load(codes, r * n + j), "float32")
        else:
            byte = Load(codes, binary("div", r, const(2, INDEX)) * n + j)
            shift = cast(binary("mod", r, const(2, INDEX)) * 4, "uint8")
            code = cast(binary("bitand", binary("shr", byte, shift), const(15, "uint8")), "float32")
        at = binary("div", r, const(block, INDEX)) * n + j if weight.blocks > 1 else j
        z = Load(zero, at) if zero is not None else const(float(weight.zero), "float32")
        return (code - (cast(z, "float32") if z.dtype != "float32" else z)) * Load(scales, at)

    def finish(value: Expr, i: Expr, j: Expr) -> Expr:
        result = value + bias_view.load([j]) if bias_view is not None else value
        return epilogue.apply(result, [*_unflatten(i, rows), j])

    ctx.emit(kb, matmul_rows(kb, yv.buffer, "float32", m, n, weight.k, a_at=lambda i, r: av.load([i, r]),
                             b_at=b_at, y_at=lambda i, j: yv.index([i, j]), finish=finish))


def _unflatten(i: Expr, dims: tuple[int, ...]) -> list[Expr]:
    """The index into `dims` of flat row i (the epilogue indexes the output's own shape)."""
    out: list[Expr] = []
    stride = int(np.prod(dims, dtype=np.int64))
    for d in dims:
        stride //= d
        out.append(binary("mod", binary("div", i, const(stride, INDEX)), const(d, INDEX)))
    return out
