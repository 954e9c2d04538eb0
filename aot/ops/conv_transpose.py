"""ConvTranspose: N-d transposed convolution with groups, strides, dilations, padding,
output_padding and output_shape.

Written in gather form: each output element sums the input taps that the forward convolution
would have scattered onto it, so every output is stored once from a register accumulator (no
read-modify-write passes over Y, and no ordering between writers). Input position i reaches
output o through kernel tap k when i * stride = o + pad_begin - k * dilation.
"""

from __future__ import annotations

from aot.ir.graph import Node
from aot.kernel.ir import (
    INDEX,
    Assign,
    Const,
    Declare,
    Expr,
    If,
    Stmt,
    binary,
    const,
    eq,
    ge,
    logical_and,
    lt,
)
from aot.lowering.context import LoweringContext
from aot.ops.attrs import conv_operands, fail
from aot.ops.registry import register


def transpose_padding(node: Node, in_spatial: tuple[int, ...], out_spatial: tuple[int, ...], kernel: list[int],
                      strides: list[int], dilations: list[int], output_padding: list[int]) -> list[int]:
    """The begin pad of each spatial dim (the end pad is whatever makes the output size).

    Per the ONNX spec: explicit `pads`, or, with auto_pad SAME_* or an output_shape, the total
    padding (full size - output size) split in half, the odd element going to the end for
    SAME_UPPER and to the beginning otherwise."""
    nd = len(in_spatial)
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    full = [s * (size - 1) + op + (k - 1) * d + 1
            for size, k, s, d, op in zip(in_spatial, kernel, strides, dilations, output_padding)]
    if auto_pad == "VALID":
        return [0] * nd
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") or (auto_pad == "NOTSET" and node.attr("output_shape") is not None
                                                    and node.attr("pads") is None):
        begin = []
        for f, out in zip(full, out_spatial):
            # An output larger than the full result is extended at the end (never a negative
            # begin pad): what onnxruntime and onnx's reference compute.
            total = max(0, f - out)
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begin
    if auto_pad != "NOTSET":
        raise fail(node, f"unknown auto_pad {auto_pad!r}")
    pads = list(node.attr("pads", [0] * (2 * nd)))
    if len(pads) != 2 * nd:
        raise fail(node, f"pads has {len(pads)} values, expected {2 * nd}")
    return pads[:nd]


@register("ConvTranspose")
def lower_conv_transpose(node: Node, ctx: LoweringContext) -> None:
    x, w, bias, y, nd = conv_operands(node, "transposed convolution")
    batch, in_channels = x.shape[0], x.shape[1]
    groups = int(node.attr("group", 1))
    if groups <= 0 or w.shape[0] != in_channels or in_channels % groups:
        raise fail(node, f"W {list(w.shape)} does not fit X channels {in_channels} with group={groups}")
    group_in, out_per_group = in_channels // groups, w.shape[1]
    out_channels = out_per_group * groups
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    if tuple(kernel) != tuple(w.shape[2:]):
        raise fail(node, f"kernel_shape {kernel} differs from the weight shape {list(w.shape[2:])}")
    strides = list(node.attr("strides", [1] * nd))
    dilations = list(node.attr("dilations", [1] * nd))
    output_padding = list(node.attr("output_padding", [0] * nd))
    if not len(strides) == len(dilations) == len(output_padding) == nd:
        raise fail(node, f"strides/dilations/output_padding must each have {nd} values")
    in_spatial = x.shape[2:]
    if y.rank != x.rank or y.shape[:2] != (batch, out_channels):
        raise fail(node, f"output shape {list(y.shape)} should start with [{batch}, {out_channels}]")
    out_spatial = y.shape[2:]
    pad_begin = transpose_padding(node, in_spatial, out_spatial, kernel, strides, dilations, output_padding)
    if bias is not None and bias.shape != (out_channels,):
        raise fail(node, f"bias shape {list(bias.shape)} should be [{out_channels}]")

    kb = ctx.builder(node)
    xv, wv, yv = kb.input(x), kb.input(w), kb.output(y)
    bv = kb.input(bias) if bias is not None else None
    dt = y.dtype.name

    def body(idx: list[Expr]) -> list[Stmt]:
        n, g, m, *o = idx
        oc = g * out_per_group + m
        acc = kb.var("acc", dt)

        def tap(red: list[Expr]) -> list[Stmt]:
            c, *k = red
            ic = g * group_in + c
            cond: Expr = const(True, "bool")
            src: list[Expr] = []
            for oi, ki, s, d, pb, size, out, ks in zip(o, k, strides, dilations, pad_begin, in_spatial,
                                                       out_spatial, kernel):
                q = oi + (pb - ki * d) if pb else oi - ki * d
                # Only emit the checks the index ranges cannot rule out.
                q_min, q_max = pb - (ks - 1) * d, out - 1 + pb
                if q_min < 0:
                    cond = logical_and(cond, ge(q, const(0, INDEX)))
                if s > 1:
                    cond = logical_and(cond, eq(binary("mod", q, const(s, INDEX)), const(0, INDEX)))
                    q = binary("div", q, const(s, INDEX))
                if q_max // s >= size:
                    cond = logical_and(cond, lt(q, const(size, INDEX)))
                src.append(q)
            update: Stmt = Assign(acc, acc + xv.load([n, ic, *src]) * wv.load([ic, m, *k]))
            return [update] if isinstance(cond, Const) and cond.value is True else [If(cond, [update])]

        init = bv.load([oc]) if bv is not None else const(0.0, dt)
        return [Declare(acc, init), *kb.loops([group_in, *kernel], tap, prefix="r"), yv.store([n, oc, *o], acc)]

    ctx.emit(kb, kb.loops([batch, groups, out_per_group, *out_spatial], body))
