"""Conv: N-d direct convolution with groups (incl. depthwise), strides, dilations and padding.

1-D and 2-D convolutions use the vectorisable row kernels of aot/ops/conv/rows.py; the loop nest
below (reduction innermost, a bounds check per tap) remains for 3-D and higher convolutions.
"""

from __future__ import annotations

from aot.ir.graph import Node
from aot.kernel.ir import INDEX, Assign, Const, Declare, Expr, If, Stmt, const, ge, logical_and, lt
from aot.lowering.context import LoweringContext
from aot.ops.attrs import conv_operands, fail, spatial_padding, window_output_size, window_steps
from aot.ops.conv.rows import lower_conv_rows
from aot.ops.conv.winograd import lower_conv_winograd, winograd_fits
from aot.ops.registry import register


@register("Conv")
def lower_conv(node: Node, ctx: LoweringContext) -> None:
    x, w, bias, y, nd = conv_operands(node, "convolution")
    batch, in_channels = x.shape[0], x.shape[1]
    out_channels, group_in = w.shape[0], w.shape[1]
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    if tuple(kernel) != tuple(w.shape[2:]):
        raise fail(node, f"kernel_shape {kernel} differs from the weight shape {list(w.shape[2:])}")
    groups = int(node.attr("group", 1))
    strides, dilations = window_steps(node, x.shape[2:])
    if groups <= 0 or in_channels != group_in * groups or out_channels % groups:
        raise fail(node, f"group={groups} does not divide X channels {in_channels} and W {list(w.shape)}")
    in_spatial = x.shape[2:]
    pad_begin, pad_end = spatial_padding(node, in_spatial, kernel, strides, dilations)
    out_spatial = window_output_size(node, in_spatial, kernel, strides, dilations, pad_begin, pad_end)
    if y.shape != (batch, out_channels, *out_spatial):
        expected = [batch, out_channels, *out_spatial]
        raise fail(node, f"output shape {list(y.shape)} differs from the computed {expected}")
    if bias is not None and bias.shape != (out_channels,):
        raise fail(node, f"bias shape {list(bias.shape)} should be [{out_channels}]")

    if (nd == 2 and w.is_constant and ctx.conv_algorithm != "direct" and min(pad_begin + pad_end) >= 0
            and winograd_fits(groups, in_channels, out_channels, kernel, strides, dilations, out_spatial, ctx.tiles,
                              y.dtype.name)
            and lower_conv_winograd(node, ctx, x, w, bias, pad_begin, pad_end)):
        return
    if nd <= 2 and lower_conv_rows(node, ctx, groups, kernel, strides, dilations, pad_begin, pad_end):
        return
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    xv, wv, yv = kb.input(x), kb.input(w), kb.output(final)
    bv = kb.input(bias) if bias is not None else None
    out_per_group = out_channels // groups
    dt = y.dtype.name

    def body(idx: list[Expr]) -> list[Stmt]:
        n, g, m, *o = idx
        oc = g * out_per_group + m
        acc = kb.var("acc", dt)

        def tap(red: list[Expr]) -> list[Stmt]:
            c, *k = red
            pos = [oi * s - pb + ki * d for oi, ki, s, pb, d in zip(o, k, strides, pad_begin, dilations)]
            inside: Expr = const(True, "bool")
            for p, size, pb, pe in zip(pos, in_spatial, pad_begin, pad_end):
                if pb > 0:
                    inside = logical_and(inside, ge(p, const(0, INDEX)))
                if pe > 0 or pb > 0:
                    inside = logical_and(inside, lt(p, const(size, INDEX)))
            update: Stmt = Assign(acc, acc + xv.load([n, g * group_in + c, *pos]) * wv.load([oc, c, *k]))
            always_inside = isinstance(inside, Const) and inside.value is True
            return [update] if always_inside else [If(inside, [update])]

        init = bv.load([oc]) if bv is not None else const(0.0, dt)
        out_index = [n, oc, *o]
        return [Declare(acc, init), *kb.loops([group_in, *kernel], tap, prefix="r"),
                yv.store(out_index, epilogue.apply(acc, out_index))]

    stmts = kb.loops([batch, groups, out_per_group, *out_spatial], body)
    ctx.emit(kb, stmts)
