"""Conv as a direct loop nest: N-d, with groups (incl. depthwise), strides, dilations and padding,
the reduction innermost and a bounds check per tap. 1-D and 2-D convolutions have faster
algorithms (algorithm.py); this one remains for 3-D and higher and for negative padding.
"""

from __future__ import annotations

from aot.ir.graph import Node
from aot.kernel.ir import INDEX, Assign, Const, Declare, Expr, If, Stmt, const, ge, logical_and, lt
from aot.lowering.context import LoweringContext
from aot.ops.attrs import required_input
from aot.ops.conv.geometry import ConvGeometry


def lower_conv_direct(node: Node, ctx: LoweringContext, geometry: ConvGeometry) -> None:
    """Emit the Conv `node` (validated) as the loop nest over every output and tap."""
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    batch, groups, out_channels = geometry.batch, geometry.groups, geometry.out_channels
    group_in, kernel, in_spatial = geometry.group_in, list(geometry.kernel), geometry.in_spatial
    strides, dilations = geometry.strides, geometry.dilations
    pad_begin, pad_end, out_spatial = geometry.pad_begin, geometry.pad_end, geometry.out_spatial
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    xv, wv, yv = kb.input(x), kb.input(w), kb.output(final)
    bv = kb.input(bias) if bias is not None else None
    out_per_group = out_channels // groups
    dt = final.dtype.name

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
