"""The register-tile forms: the int8 tiles (integer_tiles.py) over the input's quad image, over the taps
of a one-channel convolution, or as rows of a matrix product over the input itself (pixel_rows.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node
from aot.kernel.ir import (
    INDEX,
    Expr,
    Stmt,
    const,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.conv.operands import Finish, IntegerConv, StoreAt, constant_start, filled
from aot.ops.quantized.integer_terms import (
    PerIndex,
    scalar,
)
from aot.ops.quantized.integer_tiles import tiled_conv
from aot.ops.quantized.pixel_rows import pixel_rows, wasteful_pixel_lanes
from aot.ops.scratch import scratch_tensor


def tap_columns(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: View, g: ConvGeometry,
                 fill: Expr) -> tuple[list[Stmt], View, ConvGeometry]:
    """A convolution of one input channel as a 1x1 convolution over its taps (im2col): a copy
    [n][tap][out row][out column] of what each tap reads (`fill`, the zero point, where it
    reads padding), with the geometry of that 1x1 convolution. Its quad image then holds four
    taps per lane; read directly, one channel filled one byte of four (DS-CNN's 10x4 stride-2
    first conv: 31% of its int8 run)."""
    (k_h, k_w), (s_h, s_w), (d_h, d_w) = g.kernel, g.strides, g.dilations
    (in_h, in_w), (top, left), (out_h, out_w) = g.in_spatial, g.pad_begin, g.out_spatial
    shape = (g.batch, k_h * k_w, out_h, out_w)
    columns = View(kb.output(scratch_tensor(ctx, node, shape, np.dtype(x.buffer.dtype), "tap_columns")).buffer, shape)

    def inside(k: int, s: int, d: int, before: int, size: int, out: int) -> range:
        """The outputs o whose tap k reads inside the input: 0 <= o * s + k * d - before < size."""
        return range(max(0, -((k * d - before) // s)), min(out, (size - 1 - k * d + before) // s + 1))

    # One loop nest per tap over the outputs it reads inside the input: a bounds test per
    # element kept the copy scalar and branchy (DS-CNN: a fifth of its int8 run).
    copies: list[Stmt] = []
    for kh in range(k_h):
        rows = inside(kh, s_h, d_h, top, in_h, out_h)
        for kw in range(k_w):
            cols = inside(kw, s_w, d_w, left, in_w, out_w)
            if rows and cols:
                copies += kb.loops([g.batch, len(rows), len(cols)], lambda i, kh=kh, kw=kw, rows=rows, cols=cols: [
                    columns.store([i[0], const(kh * k_w + kw, INDEX), i[1] + rows.start, i[2] + cols.start], x.load([
                        i[0], const(0, INDEX), (i[1] + rows.start) * s_h + (kh * d_h - top),
                        (i[2] + cols.start) * s_w + (kw * d_w - left)]))], prefix="s")

    fills = filled(kb, columns.buffer, fill) if g.padded else []
    geometry = dataclasses.replace(g, channels=k_h * k_w, in_spatial=(out_h, out_w), kernel=(1, 1), strides=(1, 1),
                                   dilations=(1, 1), pad_begin=(0, 0), pad_end=(0, 0))
    return fills + copies, columns, geometry


def tiled_form(node: Node, ctx: LoweringContext, kb: KernelBuilder, conv: IntegerConv, g: ConvGeometry, x: View,
           weights: np.ndarray, x_zp: Expr, *, init: Callable[[], PerIndex], finish: Finish, store: StoreAt,
           flat: bool, overlap: bool) -> list[Stmt]:
    """The int8 register tile (integer_tiles.py) over input `x` ([n][c][h][w] of geometry `g`).
    A 1x1 convolution without stride or padding over rows narrower than a tile runs over the
    plane as one row, when the output (and what the epilogue reads) may be indexed flat."""
    (out_h, out_w), one_row = g.out_spatial, conv.geometry.nd == 1
    pointwise = g.kernel == (1, 1) and g.strides == (1, 1) and not g.padded
    lanes = ctx.tiles.int8_dot.int32_lanes(ctx.tiles.lanes)
    flattened = pointwise and flat and out_h > 1 and out_w < (16 if lanes == 4 else 2 * lanes)
    if flattened:
        g = dataclasses.replace(g, in_spatial=(1, out_h * out_w), out_spatial=(1, out_h * out_w))

    def out_store(n: Expr, m: Expr, oh: Expr, ow: Expr, value: Expr) -> Stmt:
        if one_row:
            return store([n, m, ow], value)
        if flattened:  # pixel ow of the plane: row 0 and column ow, or row ow of a one-column plane
            return store([n, m, const(0, INDEX), ow] if out_w > 1 else [n, m, ow, const(0, INDEX)], value)
        return store([n, m, oh, ow], value)

    # Without vpdpbusd each step needs four more registers (the operands' even and odd bytes):
    # measured on AVX2, 12 accumulators spilled to the stack, 8 did not. NEON's step splits each
    # operand vector and each weight quad into two registers of 16-bit values: of its 32
    # registers, 16 accumulators (4 vectors x 4 channels) run fewer instructions under qemu than
    # 12 (4 x 3), spills and all (`python -m benchmarks.arm` on the int8 ResNet-8).
    one_step = ctx.tiles.int8_dot.one_instruction  # no registers for its parts
    accumulators = ctx.tiles.accumulators if one_step else ctx.tiles.accumulators * 2 // 3
    pixels, columns = out_h * out_w, weights.reshape(g.out_channels, -1)
    if pointwise and g.batch == 1 and (flattened or out_h == 1) and \
            wasteful_pixel_lanes(pixels, lanes, accumulators, g.out_channels):
        # integer_gemm reads x itself: the start with x's own zero point
        start = constant_start(conv, columns.sum(axis=1), scalar(kb, conv.x_zero_point, 0, conv.x.dtype.name))
        zero = const(0, INDEX)
        rows = None if start is None else pixel_rows(node, ctx, kb, x, start, columns, pixels, finish,
                                                     store=lambda m, p, value: out_store(zero, m, zero, p, value))
        if rows is not None:
            return rows
    return tiled_conv(node, ctx, kb, g, x, weights, x_zp, init(), finish=finish, store=out_store, lanes=lanes,
                      accumulators=accumulators, overlap=overlap)

