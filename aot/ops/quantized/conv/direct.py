"""The direct form: every output's taps summed in a loop nest with a bounds check per tap; no scratch."""

from __future__ import annotations

from aot.kernel.ir import (
    INDEX,
    Assign,
    Const,
    Declare,
    Expr,
    If,
    Stmt,
    const,
    ge,
    logical_and,
    lt,
)
from aot.lowering.builder import KernelBuilder
from aot.ops.quantized.conv.operands import Finish, IntegerConv, StoreAt
from aot.ops.quantized.integer_terms import (
    ACCUMULATOR,
    minus,
    per_channel,
    scalar,
)


def direct_conv(kb: KernelBuilder, conv: IntegerConv, finish: Finish, store: StoreAt) -> list[Stmt]:
    """Every output's taps summed in a loop nest, each (x - x_zero_point) * (w - w_zero_point)
    computed in int32; a tap in the padding is skipped (it adds 0)."""
    g = conv.geometry
    xv, wv = kb.input(conv.x), kb.input(conv.w)
    x_zp = scalar(kb, conv.x_zero_point, 0, conv.x.dtype.name)
    w_zp = per_channel(kb, conv.w_zero_point, 0, conv.w.dtype.name)
    bias = kb.input(conv.bias) if conv.bias is not None else None
    per_group = g.out_channels // g.groups

    def body(idx: list[Expr]) -> list[Stmt]:
        n, group, m, *o = idx
        oc = group * per_group + m
        acc = kb.var("acc", ACCUMULATOR)

        def tap(red: list[Expr]) -> list[Stmt]:
            c, *k = red
            pos = [oi * s - pb + ki * d for oi, ki, s, pb, d in zip(o, k, g.strides, g.pad_begin, g.dilations)]
            inside: Expr = const(True, "bool")
            for p, size, pb, pe in zip(pos, g.in_spatial, g.pad_begin, g.pad_end):
                if pb > 0:
                    inside = logical_and(inside, ge(p, const(0, INDEX)))
                if pe > 0 or pb > 0:
                    inside = logical_and(inside, lt(p, const(size, INDEX)))
            product = minus(xv.load([n, group * g.group_in + c, *pos]), x_zp) * minus(wv.load([oc, c, *k]), w_zp(oc))
            update: Stmt = Assign(acc, acc + product)
            return [update] if isinstance(inside, Const) and inside.value is True else [If(inside, [update])]

        init = bias.load([oc]) if bias is not None else const(0, ACCUMULATOR)
        return [Declare(acc, init), *kb.loops([g.group_in, *g.kernel], tap, prefix="r"),
                store([n, oc, *o], finish(acc, oc))]

    return kb.loops([g.batch, g.groups, per_group, *g.out_spatial], body)

