"""The depthwise form over padded planes: per output channel its taps' weights as locals, each output row a
vector loop over pixels."""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    Buffer,
    Expr,
    Stmt,
    Store,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.conv.operands import Finish, filled
from aot.ops.quantized.integer_terms import (
    PerIndex,
    channel_locals,
    widened,
)
from aot.ops.scratch import scratch_tensor


def padded_planes(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, g: ConvGeometry,
            fill: Expr, slack: int | None = None) -> tuple[list[Stmt], View]:
    """The input viewed as [n][c][row][column], or, when the convolution pads (or `slack` is
    given), a copy of it with the padding filled with `fill` (the zero point), followed by
    `slack` more elements of `fill`."""
    (in_h, in_w), (top, left) = g.in_spatial, g.pad_begin
    src = View(kb.input(x).buffer, (g.batch, g.channels, in_h, in_w))
    if not g.padded and slack is None:
        return [], src
    hp, wp = g.padded_hw
    shape = (g.batch, g.channels, hp, wp)
    image = g.batch * g.channels * hp * wp
    planes = View(kb.output(scratch_tensor(ctx, node, (image + (slack or 0),), x.dtype, "padded")).buffer, shape)
    if g.padded:
        fills = filled(kb, planes.buffer, fill)
    else:  # the copy covers the planes: only the slack past them needs the zero point
        fills = kb.loops([slack or 0], lambda i: [Store(planes.buffer, i[0] + image, fill)], prefix="z")
    return fills + kb.loops(
        [g.batch, g.channels, in_h, in_w], lambda i: [planes.store([i[0], i[1], i[2] + top, i[3] + left],
                                                                   src.load(i))], prefix="s"), planes


def depthwise_conv(kb: KernelBuilder, g: ConvGeometry, planes: View, weights: Buffer, init: PerIndex, finish: Finish,
               store: Callable[[Expr, Expr, Expr, Expr, Expr], Stmt]) -> list[Stmt]:
    """One input channel per group: per output channel, its taps' weights and start as locals,
    then each output row a loop over pixels summing the taps (vectorised along the row)."""
    (k_h, k_w), (s_h, s_w), (d_h, d_w) = g.kernel, g.strides, g.dilations
    per_group = g.out_channels // g.groups
    (out_h, out_w), taps = g.out_spatial, [(kh, kw) for kh in range(k_h) for kw in range(k_w)]

    def channel(idx: list[Expr]) -> list[Stmt]:
        n, group, j = idx
        m = group * per_group + j
        decls, locals_, start = channel_locals(kb, weights, init, m, len(taps))

        def pixel(o: list[Expr]) -> list[Stmt]:
            oh, ow = o
            acc: Expr = start
            for (kh, kw), w in zip(taps, locals_):
                acc = acc + widened(planes.load([n, group, oh * s_h + kh * d_h, ow * s_w + kw * d_w])) * w
            return [store(n, m, oh, ow, finish(acc, m))]

        return decls + kb.loops([out_h, out_w], pixel, prefix="p")

    return kb.loops([g.batch, g.groups, per_group], channel)

