"""ConvTranspose in gather form, the form for every case the phase tiles (tiled.py) do not
cover: weights that are runtime inputs, 3-D and higher, non-float32 types.

Each output element sums the input taps that the forward convolution would have scattered onto
it, so every output is stored once from a register accumulator (no read-modify-write passes over
Y, and no ordering between writers). Input position i reaches output o through kernel tap k when
i * stride = o + pad_begin - k * dilation.
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
from aot.ops.attrs import required_input
from aot.ops.conv_transpose.geometry import TransposeGeometry


def lower_gather(node: Node, ctx: LoweringContext, geo: TransposeGeometry) -> None:
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    xv, wv, yv = kb.input(x), kb.input(w), kb.output(final)
    bv = kb.input(bias) if bias is not None else None
    dt = final.dtype.name
    group_in, out_per_group = geo.group_in, geo.per_group

    def body(idx: list[Expr]) -> list[Stmt]:
        n, g, m, *o = idx
        oc = g * out_per_group + m
        acc = kb.var("acc", dt)

        def tap(red: list[Expr]) -> list[Stmt]:
            c, *k = red
            ic = g * group_in + c
            cond: Expr = const(True, "bool")
            src: list[Expr] = []
            for oi, ki, s, d, pb, size, out, ks in zip(o, k, geo.strides, geo.dilations, geo.pad_begin,
                                                       geo.in_spatial, geo.out_spatial, geo.kernel):
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
        index = [n, oc, *o]
        return [Declare(acc, init), *kb.loops([group_in, *geo.kernel], tap, prefix="r"),
                yv.store(index, epilogue.apply(acc, index))]

    ctx.emit(kb, kb.loops([geo.batch, geo.groups, out_per_group, *geo.out_spatial], body))
