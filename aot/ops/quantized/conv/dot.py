"""The dot form: a channels-last copy of the input, each output a dot product over runs of (kernel column, channel)."""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    Assign,
    Buffer,
    Declare,
    Expr,
    Load,
    Stmt,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.conv.operands import Finish, filled
from aot.ops.quantized.integer_terms import (
    ACCUMULATOR,
    PerIndex,
    unsigned_byte,
    widened,
)
from aot.ops.scratch import scratch_tensor


def channels_last(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, g: ConvGeometry,
                   fill: Expr) -> tuple[list[Stmt], View]:
    """A copy of the input as [n][row][column][channel] with the padding filled with `fill`, in
    fill's type (uint8 for int8 x: then the copy holds x + 128)."""
    (in_h, in_w), (top, left) = g.in_spatial, g.pad_begin
    hp, wp = g.padded_hw
    src = View(kb.input(x).buffer, (g.batch, g.channels, in_h, in_w))
    image = kb.output(scratch_tensor(ctx, node, (g.batch, hp, wp, g.channels), fill.dtype, "channels_last"))
    fills = filled(kb, image.buffer, fill) if g.padded else []

    def copy(i: list[Expr]) -> list[Stmt]:
        value = src.load([i[0], i[3], i[1], i[2]])
        return [image.store([i[0], i[1] + top, i[2] + left, i[3]], value if value.dtype == fill.dtype else
                            unsigned_byte(value))]

    return fills + kb.loops([g.batch, in_h, in_w, g.channels], copy, prefix="s"), image


def dot_conv(kb: KernelBuilder, g: ConvGeometry, image: View, weights: Buffer, init: PerIndex, finish: Finish,
         store: Callable[[Expr, Expr, Expr, Expr, Expr], Stmt]) -> list[Stmt]:
    """Each output a dot product of the weights [kh][kw][c] with the window of the channels-last
    image; without groups or column dilation a window row (kw, c) is one contiguous run."""
    (k_h, k_w), (s_h, s_w), (d_h, d_w) = g.kernel, g.strides, g.dilations
    per_group, group_in = g.out_channels // g.groups, g.group_in
    run = k_w * group_in if d_w == 1 and group_in == g.channels else group_in

    def output(idx: list[Expr]) -> list[Stmt]:
        n, oh, ow, group, j = idx
        m = group * per_group + j
        acc = kb.var("acc", ACCUMULATOR)

        def step(red: list[Expr]) -> list[Stmt]:
            kh, kw, r = red
            x_at = image.index([n, oh * s_h + kh * d_h, ow * s_w + kw * d_w, group * group_in]) + r
            w_at = ((m * k_h + kh) * k_w + kw) * group_in + r
            return [Assign(acc, acc + widened(Load(image.buffer, x_at)) * widened(Load(weights, w_at)))]

        reduction = kb.loops([k_h, 1 if run > group_in else k_w, run], step, prefix="r")
        return [Declare(acc, init(m)), *reduction, store(n, m, oh, ow, finish(acc, m))]

    return kb.loops([g.batch, *g.out_spatial, g.groups, per_group], output)

