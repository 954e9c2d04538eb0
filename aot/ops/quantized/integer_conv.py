"""ConvInteger and QLinearConv: integer convolutions, int32 accumulation of (x - x_zero_point) *
(w - w_zero_point) (plus QLinearConv's int32 bias), then QLinearConv requantises per channel.

Two forms, for constant weights and zero points (real models) and for the rest:

* packed (1-D and 2-D, constant w and w_zero_point): w - w_zero_point is stored narrow
  (integer_terms.narrow_weights) and x_zero_point * sum(w - w_zero_point) folded into an int32
  bias. The input is read through a copy whose padding holds x_zero_point, so padded taps add
  (x_zero_point - x_zero_point) * w = 0 as ONNX has it, and no tap is bounds-checked:
  - dot: a channels-last copy (int8 x as uint8 x + 128: integer_terms.unsigned_byte), each
    output a dot product over contiguous runs of (kernel column, channel), the weights packed
    [M][kh][kw][C/group] to match;
  - depthwise (one input channel per group): the planes (copied only to pad them), each output
    row a vector loop over pixels, the taps' weights scalar locals;
* direct (any rank, anything at run time): the loop nest with a bounds check per tap.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    INDEX,
    Assign,
    Buffer,
    Const,
    Declare,
    Expr,
    If,
    Load,
    Stmt,
    Store,
    Var,
    VecLoad,
    cast,
    const,
    ge,
    logical_and,
    lt,
)
from aot.kernel.vectorize import narrowed_store
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.conv.lowering import window_geometry
from aot.ops.quantized.integer_terms import (
    ACCUMULATOR,
    PerIndex,
    channel_locals,
    check_operand,
    check_per_channel,
    check_per_tensor,
    check_scale,
    check_zero_point,
    finite_constants,
    minus,
    multiplier_expr,
    narrow_weights,
    output_multiplier,
    per_channel,
    requantize,
    scalar,
    signed_byte,
    tap_pair_vectors,
    tap_sum,
    uniform,
    unsigned_byte,
    widened,
    wrap_int32,
)
from aot.ops.quantized.integer_tiles import fits, fits_pairs, tiled_conv
from aot.ops.quantized.masked_depthwise import float_start_fits, masked_depthwise, masked_period
from aot.ops.quantized.pixel_rows import pixel_rows, wasteful_pixel_lanes
from aot.ops.quantized.shifted_depthwise import shifted_depthwise, vector_lanes
from aot.ops.registry import register
from aot.ops.scratch import scratch_tensor

# Taps of a depthwise kernel summed as one expression per output; larger kernels take the dot form.
MAX_UNROLLED_TAPS = 49
# One-channel convolutions with up to this many taps run as 1x1 convolutions over their taps.
MAX_TAP_COLUMNS = 64
# Values of one chunk of a flat depthwise plane (_flat_depthwise), at most: 8 KiB of int32, in L1.
FLAT_DEPTHWISE_SUMS = 2048
# A flat depthwise loop runs over a multiple of this many pixels (the extra ones read the
# planes' slack and are discarded): a remainder is scalar code, and DS-CNN's 175-pixel planes
# left 15 pixels per channel to scalar requantisation.
FLAT_DEPTHWISE_STEP = 32
# Pixels per vector of armv7's depthwise tap pairs (integer_terms.tap_pair_vectors): a d register.
TAP_PAIR_LANES = 8
# Taps a float32 sum holds exactly: |x| <= 255 and |w - w_zero_point| <= 255, so each product is
# at most 65025 and 258 of them stay below 2**24, where float32 represents every integer.
EXACT_FLOAT_TAPS = 258
Finish = Callable[[Expr, Expr], Expr]  # (int32 accumulator, output channel) -> the output value
StoreAt = Callable[[list[Expr], Expr], Stmt]  # (output index, value) -> the store of it


@dataclass(frozen=True)
class IntegerConv:
    """A validated ConvInteger or QLinearConv."""

    x: Tensor
    w: Tensor
    y: Tensor
    x_zero_point: Tensor | None
    w_zero_point: Tensor | None
    bias: Tensor | None
    geometry: ConvGeometry


@register("ConvInteger")
def lower_conv_integer(node: Node, ctx: LoweringContext) -> None:
    conv = _integer_conv(node, x=0, w=1, x_zero_point=2, w_zero_point=3, bias=None)
    if conv.y.dtype != np.int32:
        raise fail(node, f"output {conv.y.name!r} has dtype {conv.y.dtype}; ConvInteger gives int32")
    # the accumulator may be a float32 holding an exact integer (masked_depthwise)
    _lower(node, ctx, conv, lambda kb: lambda acc, m: cast(acc, ACCUMULATOR))


@register("QLinearConv")
def lower_qlinear_conv(node: Node, ctx: LoweringContext) -> None:
    conv = _integer_conv(node, x=0, w=3, x_zero_point=2, w_zero_point=5, bias=8)
    scales = [required_input(node, i, what) for i, what in ((1, "x_scale"), (4, "w_scale"), (6, "y_scale"))]
    for t, what in zip(scales, ("x_scale", "w_scale", "y_scale")):
        check_scale(node, t, what)
    x_scale, w_scale, y_scale = scales
    y_zero_point = node.input(7)
    check_operand(node, conv.y, "output")
    check_zero_point(node, y_zero_point, conv.y, "y_zero_point")
    check_per_tensor(node, x_scale, "x_scale")
    check_per_tensor(node, y_scale, "y_scale")
    check_per_tensor(node, y_zero_point, "y_zero_point")
    check_per_channel(node, w_scale, conv.geometry.out_channels, "w_scale")
    if conv.bias is not None and conv.bias.dtype != np.int32:
        raise fail(node, f"bias {conv.bias.name!r} has dtype {conv.bias.dtype}; QLinearConv takes an int32 bias")
    dtype = conv.y.dtype.name

    def finish(kb: KernelBuilder) -> Finish:
        multiplier = _multiplier(node, ctx, kb, x_scale, w_scale, y_scale)
        zero_point = scalar(kb, y_zero_point, 0, dtype)
        finite = finite_constants(x_scale, w_scale, y_scale)
        return lambda acc, m: requantize(acc, multiplier(m), zero_point, dtype, finite)

    _lower(node, ctx, conv, finish)


def _multiplier(node: Node, ctx: LoweringContext, kb: KernelBuilder, x_scale: Tensor, w_scale: Tensor,
                y_scale: Tensor) -> PerIndex:
    """x_scale * w_scale / y_scale of an output channel, folded when the scales are constants."""
    if all(t.is_constant for t in (x_scale, w_scale, y_scale)):
        values = output_multiplier(*(np.asarray(t.data).reshape(-1) for t in (x_scale, w_scale, y_scale)))
        if uniform(values):
            return lambda m: const(float(values[0]), "float32")
        view = kb.input(ctx.constant(values, f"{node.name}_multiplier"))
        return lambda m: view.load([m])
    x_s, y_s = scalar(kb, x_scale, 1.0, "float32"), scalar(kb, y_scale, 1.0, "float32")
    w_s = per_channel(kb, w_scale, 1.0, "float32")
    return lambda m: multiplier_expr(x_s, w_s(m), y_s)


def _integer_conv(node: Node, x: int, w: int, x_zero_point: int, w_zero_point: int,
                  bias: int | None) -> IntegerConv:
    """The operands at these input positions, checked, with the convolution's geometry."""
    xt, wt = required_input(node, x, "x"), required_input(node, w, "w")
    y = node.outputs[0]
    assert y is not None
    check_operand(node, xt, "input")
    check_operand(node, wt, "weight")
    if xt.rank < 3 or wt.rank != xt.rank:
        raise fail(node, f"x of rank {xt.rank} and w of rank {wt.rank} do not form a convolution")
    x_zp, w_zp = node.input(x_zero_point), node.input(w_zero_point)
    check_zero_point(node, x_zp, xt, "x_zero_point")
    check_zero_point(node, w_zp, wt, "w_zero_point")
    check_per_tensor(node, x_zp, "x_zero_point")
    check_per_channel(node, w_zp, wt.shape[0], "w_zero_point")
    b = node.input(bias) if bias is not None else None
    geometry = window_geometry(node, xt, wt, b, y)
    return IntegerConv(xt, wt, y, x_zp, w_zp, b, geometry)


def _lower(node: Node, ctx: LoweringContext, conv: IntegerConv, finish_for: Callable[[KernelBuilder], Finish]) -> None:
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    yv = kb.output(final)

    def store(idx: list[Expr], value: Expr) -> Stmt:
        return yv.store(idx, epilogue.apply(value, idx))

    finish = finish_for(kb)
    g = conv.geometry
    packed = conv.w.is_constant and (conv.w_zero_point is None or conv.w_zero_point.is_constant) \
        and g.nd <= 2 and min(g.pad_begin + g.pad_end) >= 0
    if packed:
        ctx.emit(kb, _packed(node, ctx, kb, conv, finish, store, _flat_output(epilogue, final),
                             not epilogue.inputs))
    else:
        ctx.emit(kb, _direct(kb, conv, finish, store))


def _flat_output(epilogue: Epilogue, final: Tensor) -> bool:
    """Whether the output may be stored at [n][m][0][pixel of the plane]: what the epilogue
    reads is the output's shape or constant over each plane."""
    return all(t.size == 1 or t.shape == final.shape or (t.rank >= 2 and t.shape[-2:] == (1, 1))
               for t in epilogue.inputs)


def _direct(kb: KernelBuilder, conv: IntegerConv, finish: Finish, store: StoreAt) -> list[Stmt]:
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


def _packed(node: Node, ctx: LoweringContext, kb: KernelBuilder, conv: IntegerConv, finish: Finish,
            store: StoreAt, flat: bool, overlap: bool) -> list[Stmt]:
    """The packed forms (module docstring): the weights' constants, the input's copy, the loops."""
    g = conv.geometry.planar()
    assert conv.w.data is not None
    m_count = g.out_channels
    w_zp = np.zeros(m_count, np.int64) if conv.w_zero_point is None else \
        np.broadcast_to(np.asarray(conv.w_zero_point.data, np.int64).reshape(-1), (m_count,))
    weights = np.asarray(conv.w.data, np.int64).reshape(m_count, g.group_in, *g.kernel)
    weights = weights - w_zp.reshape(-1, 1, 1, 1)
    x_zp = scalar(kb, conv.x_zero_point, 0, conv.x.dtype.name)
    sums = weights.reshape(m_count, -1).sum(axis=1)
    taps = g.kernel[0] * g.kernel[1]
    one_row = conv.geometry.nd == 1  # the output has no row index

    def out_store(n: Expr, m: Expr, oh: Expr, ow: Expr, value: Expr) -> Stmt:
        return store([n, m, ow] if one_row else [n, m, oh, ow], value)

    # A convolution of one input channel (a model's first layer) takes the tile too: its rows
    # are the depthwise form's vector loop, which short rows keep scalar (DS-CNN's 10x4 stride-2
    # conv over 5-pixel rows: 46% of the model's time in that form).
    tiled = g.groups == 1 and ctx.tiles.int8_dot.vectorised and fits(weights)
    if g.group_in == 1 and taps <= MAX_UNROLLED_TAPS and not tiled:
        packed = kb.input(ctx.constant(narrow_weights(weights.reshape(m_count, taps)), conv.w.name)).buffer
        lanes = vector_lanes(g, ctx.tiles.lanes) if _sums_in_float(ctx) and flat else None
        if lanes is not None and masked_period(g, lanes) is not None:
            bias = None if conv.bias is None else conv.bias.data
            float_start = (conv.bias is None or conv.bias.is_constant) and float_start_fits(
                weights.reshape(m_count, taps), None if bias is None else np.asarray(bias))
            init = _folded_bias(node, ctx, kb, conv, sums, const(0, ACCUMULATOR))  # the copies hold x - x_zp
            return masked_depthwise(node, ctx, kb, g, conv.x, x_zp, packed, init, float_start, finish, out_store,
                                    lanes, overlap)
        init = _folded_bias(node, ctx, kb, conv, sums, x_zp)
        if lanes is not None:
            return shifted_depthwise(node, ctx, kb, g, conv.x, x_zp, packed, init, finish, out_store, lanes,
                                     overlap)
        # On Arm a strided convolution of one input channel (a first layer whose weights do not
        # fit the tiles) keeps _depthwise: the flat form ran more instructions under qemu there
        # (DS-CNN's 10x4 stride-2 conv on rpi3). Strided depthwise convolutions take it, which
        # runs fewer instructions on VWW's four (`python -m benchmarks.arm` on the int8 VWW).
        if ctx.tiles.lanes > 1 and (_sums_in_float(ctx) or g.strides == (1, 1) or g.groups > 1):
            return _flat_depthwise(node, ctx, kb, g, conv.x, x_zp, packed, init, finish, out_store,
                                   _tap_pairs(ctx, conv, weights))
        copy, planes = _planes(node, ctx, kb, conv.x, g, x_zp)
        return copy + _depthwise(kb, g, planes, packed, init, finish, out_store)
    x_fill = x_zp
    dot = ctx.tiles.int8_dot
    if tiled and (dot.signed_bytes and not dot.pairwise or (dot.signed_when_pairs_fit and fits_pairs(weights))):
        # the copy holds signed bytes (uint8 x - 128) for a step of signed bytes by signed bytes
        x_zp = signed_byte(x_zp)
    elif conv.x.dtype == np.int8:  # the copy holds x + 128 (integer_terms.unsigned_byte)
        x_zp = unsigned_byte(x_zp)
    if tiled:
        def folded() -> PerIndex:  # made only where the tiles read it (pixel_rows folds its own)
            return _folded_bias(node, ctx, kb, conv, sums, x_zp)

        x = View(kb.input(conv.x).buffer, (g.batch, g.channels, *g.in_spatial))
        if g.channels == 1 and 1 < taps <= MAX_TAP_COLUMNS:
            copy, columns, tap_g = _tap_columns(node, ctx, kb, x, g, x_fill)
            return copy + _tiled(node, ctx, kb, conv, tap_g, columns, weights.reshape(m_count, taps, 1, 1), x_zp,
                                 folded, finish, store, flat, overlap)
        return _tiled(node, ctx, kb, conv, g, x, weights, x_zp, folded, finish, store, flat, overlap)
    packed_w = narrow_weights(np.ascontiguousarray(weights.transpose(0, 2, 3, 1)))  # [M][kh][kw][C/group]
    packed = kb.input(ctx.constant(packed_w, conv.w.name)).buffer
    copy, image = _channels_last(node, ctx, kb, conv.x, g, x_zp)
    return copy + _dot(kb, g, image, packed, _folded_bias(node, ctx, kb, conv, sums, x_zp), finish, out_store)


def _tap_columns(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: View, g: ConvGeometry,
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

    fills = _filled(kb, columns.buffer, fill) if g.padded else []
    geometry = dataclasses.replace(g, channels=k_h * k_w, in_spatial=(out_h, out_w), kernel=(1, 1), strides=(1, 1),
                                   dilations=(1, 1), pad_begin=(0, 0), pad_end=(0, 0))
    return fills + copies, columns, geometry


def _tiled(node: Node, ctx: LoweringContext, kb: KernelBuilder, conv: IntegerConv, g: ConvGeometry, x: View,
           weights: np.ndarray, x_zp: Expr, init: Callable[[], PerIndex], finish: Finish, store: StoreAt,
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
        start = _constant_start(conv, columns.sum(axis=1), scalar(kb, conv.x_zero_point, 0, conv.x.dtype.name))
        zero = const(0, INDEX)
        rows = None if start is None else pixel_rows(node, ctx, kb, x, start, columns, pixels, finish,
                                                     lambda m, p, value: out_store(zero, m, zero, p, value))
        if rows is not None:
            return rows
    return tiled_conv(node, ctx, kb, g, x, weights, x_zp, init(), finish, out_store, lanes, accumulators, overlap)


def _constant_start(conv: IntegerConv, weight_sums: np.ndarray, x_zp: Expr) -> np.ndarray | None:
    """bias - x_zero_point * sum(w - w_zero_point) per output channel (int64, unwrapped), where the
    zero point and the bias are constants; None otherwise."""
    if not isinstance(x_zp, Const) or not (conv.bias is None or conv.bias.is_constant):
        return None
    values = -int(x_zp.value) * weight_sums
    return values if conv.bias is None else values + np.asarray(conv.bias.data, np.int64).reshape(-1)


def _folded_bias(node: Node, ctx: LoweringContext, kb: KernelBuilder, conv: IntegerConv, weight_sums: np.ndarray,
                 x_zp: Expr) -> PerIndex:
    """The accumulator's start per output channel: bias - x_zero_point * sum(w - w_zero_point),
    one int32 constant when bias and zero point are constants, else computed from them."""
    bias = conv.bias
    values = _constant_start(conv, weight_sums, x_zp)
    if values is not None:
        folded = wrap_int32(values)
        if uniform(folded):
            return lambda m: const(int(folded[0]), ACCUMULATOR)
        view = kb.input(ctx.constant(folded, f"{node.name}_bias"))
        return lambda m: view.load([m])
    sums = kb.input(ctx.constant(wrap_int32(weight_sums), f"{node.name}_weight_sums"))
    bias_view = kb.input(bias) if bias is not None else None

    def start(m: Expr) -> Expr:
        correction = widened(x_zp) * sums.load([m])
        return bias_view.load([m]) - correction if bias_view is not None else -correction

    return start


def _planes(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, g: ConvGeometry,
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
        fills = _filled(kb, planes.buffer, fill)
    else:  # the copy covers the planes: only the slack past them needs the zero point
        fills = kb.loops([slack or 0], lambda i: [Store(planes.buffer, i[0] + image, fill)], prefix="z")
    return fills + kb.loops(
        [g.batch, g.channels, in_h, in_w], lambda i: [planes.store([i[0], i[1], i[2] + top, i[3] + left],
                                                                   src.load(i))], prefix="s"), planes


def _channel_plane(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, g: ConvGeometry, fill: Expr,
                   slack: int | None) -> tuple[View, list[Stmt], Callable[[Expr, Expr], tuple[list[Stmt], list[Expr]]]]:
    """_planes one plane at a time: a scratch of one padded plane (and `slack` elements after
    it), the statements that fill it with `fill` once (the padding and the slack keep it: each
    channel's copy writes the inside only), and for image n and channel c the statements that
    copy that plane in, with the index prefix of the plane in the view; the input itself,
    uncopied, when the convolution neither pads nor needs slack. One plane, not the whole padded
    image: DS-CNN's int8 arena held 12 KB of padded planes at once."""
    (in_h, in_w), (top, left) = g.in_spatial, g.pad_begin
    src = View(kb.input(x).buffer, (g.batch, g.channels, in_h, in_w))
    if not g.padded and slack is None:
        return src, [], lambda n, c: ([], [n, c])
    hp, wp = g.padded_hw
    plane = View(kb.output(scratch_tensor(ctx, node, (hp * wp + (slack or 0),), x.dtype, "padded")).buffer,
                 (1, 1, hp, wp))
    zero = const(0, INDEX)

    def copy(n: Expr, c: Expr) -> tuple[list[Stmt], list[Expr]]:
        rows = kb.loops([in_h, in_w], lambda i: [plane.store([zero, zero, i[0] + top, i[1] + left],
                                                             src.load([n, c, i[0], i[1]]))], prefix="s")
        return rows, [zero, zero]

    return plane, _filled(kb, plane.buffer, fill), copy


def _channels_last(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, g: ConvGeometry,
                   fill: Expr) -> tuple[list[Stmt], View]:
    """A copy of the input as [n][row][column][channel] with the padding filled with `fill`, in
    fill's type (uint8 for int8 x: then the copy holds x + 128)."""
    (in_h, in_w), (top, left) = g.in_spatial, g.pad_begin
    hp, wp = g.padded_hw
    src = View(kb.input(x).buffer, (g.batch, g.channels, in_h, in_w))
    image = kb.output(scratch_tensor(ctx, node, (g.batch, hp, wp, g.channels), fill.dtype, "channels_last"))
    fills = _filled(kb, image.buffer, fill) if g.padded else []

    def copy(i: list[Expr]) -> list[Stmt]:
        value = src.load([i[0], i[3], i[1], i[2]])
        return [image.store([i[0], i[1] + top, i[2] + left, i[3]], value if value.dtype == fill.dtype else
                            unsigned_byte(value))]

    return fills + kb.loops([g.batch, in_h, in_w, g.channels], copy, prefix="s"), image


def _filled(kb: KernelBuilder, buffer: Buffer, fill: Expr) -> list[Stmt]:
    return kb.loops([buffer.size], lambda i: [Store(buffer, i[0], fill)], prefix="z")


def _depthwise(kb: KernelBuilder, g: ConvGeometry, planes: View, weights: Buffer, init: PerIndex, finish: Finish,
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


def _flat_depthwise(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, x: Tensor, x_zp: Expr,
                    weights: Buffer, init: PerIndex, finish: Finish,
                    store: Callable[[Expr, Expr, Expr, Expr, Expr], Stmt], pairs: bool = False) -> list[Stmt]:
    """_depthwise over each plane as one long row, per chunk of output rows: the chunk's input
    rows are copied from the padded planes to float32 "phase planes" (PhasePlanes), where tap (kh, kw) of output pixel p
    (row p / width, column p % width) is at p + a constant, so the whole chunk is one vector loop
    per tap, including the columns past each output row and the pixels up to a whole
    FLAT_DEPTHWISE_STEP, whose results are discarded. The finished values (requantised) go to a
    scratch row, and a second loop stores the real pixels, so that small planes (DS-CNN's 25x5)
    do not run as short loops nor strided convs (VWW's) as strided loads.

    On x86 the phase planes hold floats and the taps are summed in float32: every product and
    partial sum is an integer below 2**24 (EXACT_FLOAT_TAPS), so the sum is the int32 one
    exactly, and a vector of floats takes one multiply-add per tap where int8 lanes took a
    widening, a 32-bit multiply and an add (`python -m benchmarks.int8` on DS-CNN)."""
    assert g.kernel[0] * g.kernel[1] <= EXACT_FLOAT_TAPS
    per_group = g.out_channels // g.groups
    out_h, out_w = g.out_spatial
    phases = PhasePlanes(g)
    rows = max(1, min(out_h, FLAT_DEPTHWISE_SUMS // phases.width))  # output rows per chunk
    span = _whole_steps(rows * phases.width)
    dtype = finish(const(0, ACCUMULATOR), const(0, INDEX)).dtype
    finished = kb.output(scratch_tensor(ctx, node, (span,), np.dtype(dtype), "finished")).buffer
    plane = span + phases.reach
    # Float sums where int8 lanes need a widening and a 32-bit multiply per tap (x86); the ARM
    # targets keep integer planes: their compilers' widening multiply-adds (smlal) ran fewer
    # instructions under qemu than the float form (LLVM, DS-CNN rpi4: 2.77M against 3.13M).
    in_float = _sums_in_float(ctx)
    in_vectors = _hand_vectorised(ctx)
    # Integer sums at unit stride read the padded planes themselves (the single phase), past
    # whose end a slack of the zero point covers the last chunk's discarded pixels.
    direct = not in_float and g.strides == (1, 1)
    slack = (g.kernel[1] - 1) * g.dilations[1] + FLAT_DEPTHWISE_STEP - 1
    planes, fills, plane_copy = _channel_plane(node, ctx, kb, x, g, x_zp, slack if direct else None)
    element = "float32" if in_float else x.dtype.name
    floats = None if direct else kb.output(scratch_tensor(ctx, node, (len(phases.used) * plane,), np.dtype(element),
                                                          "phase_planes")).buffer
    sums = kb.output(scratch_tensor(ctx, node, (span,), np.dtype(ACCUMULATOR), "sums")).buffer \
        if _split_sums(ctx, pairs) else None

    def chunk(n: Expr, m: Expr, at: list[Expr], locals_: list[Var], start: Var, row0: Expr,
              count: int) -> list[Stmt]:
        if floats is None:
            base, read, copies = planes.index([*at, row0, const(0, INDEX)]), planes.buffer, []
        else:
            base, read = const(0, INDEX), floats
            copies = [stmt for k, phase in enumerate(phases.used)
                      for stmt in phases.copy(kb, planes, *at, row0, count, phase, floats, k * plane)]

        def taps(at: Expr, lanes: int = 1) -> list[Expr]:
            """Pixel `at`'s taps (Loads), or those of `lanes` pixels from it (VecLoads: armv7's pairs)."""
            starts = [base + at + phases.used.index(phase) * plane + offset for phase, offset in phases.taps]
            return [Load(read, i) if lanes == 1 else VecLoad(read, i, lanes) for i in starts]

        def output(i: list[Expr]) -> list[Stmt]:
            oh, ow = i
            return [store(n, m, row0 + oh, ow, Load(finished, oh * phases.width + ow))]

        summed = lambda i: tap_sum(taps(i[0]), locals_, start, in_float, pairs)  # noqa: E731
        in_pairs = lambda at: tap_pair_vectors(kb, taps(at, TAP_PAIR_LANES), locals_, start, sums, at)  # noqa: E731

        computed = _finished_pixels(kb, _whole_steps(count * phases.width), summed, lambda value: finish(value, m),
                                    finished, sums, in_vectors, in_pairs if in_vectors and pairs else None)
        return copies + computed + kb.loops([count, out_w], output, prefix="q")

    def channel(n: Expr, m: Expr, at: list[Expr]) -> list[Stmt]:
        body, locals_, start = channel_locals(kb, weights, init, m, len(phases.taps),
                                               "float32" if in_float else "int8" if pairs else ACCUMULATOR)
        return body + blocks(kb, out_h, rows, lambda row0, count: chunk(n, m, at, locals_, start, row0, count), "c")

    def group_planes(idx: list[Expr]) -> list[Stmt]:
        n, group = idx
        copy, at = plane_copy(n, group)
        return copy + kb.loops([per_group], lambda j: channel(n, group * per_group + j[0], at), prefix="j")

    # Positions no chunk writes (past a phase's last column or row) feed discarded sums only;
    # zeroed once, they are finite numbers whatever ran before.
    zero = [] if floats is None else kb.loops([floats.size], lambda i: [Store(floats, i[0], const(0, element))],
                                              prefix="z")
    return fills + zero + kb.loops([g.batch, g.groups], group_planes)


@dataclass(frozen=True)
class PhasePlanes:
    """The padded input plane split by stride phase: phase (ph, pw) holds the padded pixels
    (s_h * r + ph, s_w * c + pw) at [r][c], rows `width` long. Output pixel (oh, ow) reads tap
    (kh, kw) in phase ((kh * d_h) % s_h, (kw * d_w) % s_w) at row oh + (kh * d_h) // s_h, column
    ow + (kw * d_w) // s_w: at a constant offset from oh * width + ow. Unit stride: one phase,
    the padded plane itself."""

    g: ConvGeometry

    @property
    def width(self) -> int:
        return -(-self.g.padded_hw[1] // self.g.strides[1])

    @property
    def taps(self) -> list[tuple[tuple[int, int], int]]:
        """(phase, offset in the phase's plane) of each tap, in the weights' order."""
        (k_h, k_w), (s_h, s_w), (d_h, d_w) = self.g.kernel, self.g.strides, self.g.dilations
        return [(((kh * d_h) % s_h, (kw * d_w) % s_w), (kh * d_h) // s_h * self.width + (kw * d_w) // s_w)
                for kh in range(k_h) for kw in range(k_w)]

    @property
    def used(self) -> list[tuple[int, int]]:
        return sorted({phase for phase, _ in self.taps})

    @property
    def reach(self) -> int:
        return max(offset for _, offset in self.taps)

    def extent(self, phase: tuple[int, int]) -> tuple[int, int]:
        """(rows past a chunk's output rows, columns) of `phase` that some output reads."""
        offsets = [offset for p, offset in self.taps if p == phase]
        return max(offsets) // self.width, self.g.out_spatial[1] + max(o % self.width for o in offsets)

    def copy(self, kb: KernelBuilder, planes: View, n: Expr, c: Expr, row0: Expr, count: int,
             phase: tuple[int, int], floats: Buffer, base: int) -> list[Stmt]:
        """`phase`'s rows that output rows row0 .. row0 + count - 1 read, as floats at `base`,
        from the padded planes ([n][c][row][column]): with unit stride one run of whole rows."""
        (ph, pw), (s_h, s_w) = phase, self.g.strides
        extra, columns = self.extent(phase)
        start = planes.index([n, c, row0 * s_h + ph, const(pw, INDEX)])
        if (s_h, s_w) == (1, 1) and columns == self.width:
            return kb.loops([(count + extra) * self.width], lambda i: [Store(floats, base + i[0], cast(
                Load(planes.buffer, start + i[0]), floats.dtype))], prefix="f")
        row_step = s_h * self.g.padded_hw[1]
        return kb.loops([count + extra, columns], lambda i: [Store(floats, base + i[0] * self.width + i[1], cast(
            Load(planes.buffer, start + i[0] * row_step + i[1] * s_w), floats.dtype))], prefix="f")


def _finished_pixels(kb: KernelBuilder, extent: int, summed: Callable[[list[Expr]], Expr],
                     finish_at: Callable[[Expr], Expr], finished: Buffer, sums: Buffer | None,
                     in_vectors: bool, summed_in_vectors: Callable[[Expr], list[Stmt]] | None = None) -> list[Stmt]:
    """The loop over pixels [0, extent) that stores each one's tap sum (`summed`) requantised
    (`finish_at`) into `finished`: as vectors of 4 pixels where `in_vectors`, and with a `sums`
    row (_split_sums) the sums first, in a loop of their own, written as vectors of
    TAP_PAIR_LANES pixels by `summed_in_vectors` where given."""
    def pixel(i: list[Expr]) -> list[Stmt]:
        return [Store(finished, i[0], finish_at(summed(i)))]

    if sums is not None:
        requantised = _pixels_in_vectors(kb, extent, lambda i: [Store(finished, i[0], finish_at(Load(sums, i[0])))])
        if requantised is not None:
            if summed_in_vectors is not None:
                return kb.loops([extent // TAP_PAIR_LANES], lambda i: summed_in_vectors(i[0] * TAP_PAIR_LANES),
                                prefix="p") + requantised
            return kb.loops([extent], lambda i: [Store(sums, i[0], summed(i))], prefix="p") + requantised
    vectors = _pixels_in_vectors(kb, extent, pixel) if in_vectors else None
    return vectors or kb.loops([extent], pixel, prefix="p")


def _split_sums(ctx: LoweringContext, pairs: bool) -> bool:
    """Whether _flat_depthwise sums its taps in a loop of their own before requantising. Where
    the compilers vectorise no float loop (armv7 NEON), the requantisation is written as vectors
    of 4 pixels (_hand_vectorised), after the sums of a row: with tap pairs (`pairs`) written out as
    vectors of 8 pixels (integer_terms.tap_pair_vectors: vmull.s8, vmlal.s8, vaddw.s16 by
    weights in d registers), where gcc's own vectors of 16 keep each weight in a q register and
    spill them and LLVM's go through the stack; else the integer loop gcc (vectorises_loops)
    vectorises itself; LLVM's sums stay in the vectors of 4. aarch64's compilers vectorise the
    whole loop themselves, in fewer instructions than vectors written out. `python -m
    benchmarks.arm --targets rpi3 rpi4` on the int8 DS-CNN and VWW counts each form."""
    return _hand_vectorised(ctx) and (pairs or ctx.tiles.vectorises_loops)


def _hand_vectorised(ctx: LoweringContext) -> bool:
    """Whether _flat_depthwise writes its loop as vectors of 4 pixels: a pairwise int8 step on a
    target whose compilers vectorise no float loop (armv7 NEON)."""
    return ctx.tiles.int8_dot.pairwise and not ctx.tiles.compilers_vectorise_floats


def _tap_pairs(ctx: LoweringContext, conv: IntegerConv, weights: np.ndarray) -> bool:
    """Whether _flat_depthwise's integer sums add two taps' products in int16 first
    (integer_terms.tap_sum, tap_pair_vectors): int8 input, no weight -128, integer sums (Arm)."""
    return conv.x.dtype == np.int8 and fits_pairs(weights) and not _sums_in_float(ctx)


def _sums_in_float(ctx: LoweringContext) -> bool:
    """Whether flat depthwise sums are float32 (_flat_depthwise): where the vector int8 step
    multiplies unsigned by signed bytes, which has no widening multiply-add of signed bytes
    (x86 with AVX2 or later; Arm keeps integer sums, smlal)."""
    dot = ctx.tiles.int8_dot
    return dot.vectorised and not dot.signed_bytes


class _NoVectorForm(Exception):
    """A pixel's store has no lane-wise form."""


def _pixels_in_vectors(kb: KernelBuilder, extent: int, pixel: Callable[[list[Expr]], list[Stmt]],
                       lanes: int = 4) -> list[Stmt] | None:
    """The loop `pixel(i)` over [0, extent) (a multiple of `lanes`) as a loop over vectors of
    `lanes` pixels, each pixel's requantised int8 store one NarrowStore (kernel/vectorize), or
    None where the store has no such form."""
    def vector(i: list[Expr]) -> list[Stmt]:
        first, second = pixel([i[0] * lanes]), pixel([i[0] * lanes + 1])
        stored = narrowed_store(first[0], second[0], lanes) if len(first) == len(second) == 1 else None
        if stored is None:
            raise _NoVectorForm
        return [stored]

    try:
        return kb.loops([extent // lanes], vector, prefix="p")
    except _NoVectorForm:
        return None


def _whole_steps(count: int) -> int:
    """`count` rounded up to whole FLAT_DEPTHWISE_STEPs."""
    return -(-count // FLAT_DEPTHWISE_STEP) * FLAT_DEPTHWISE_STEP


def _dot(kb: KernelBuilder, g: ConvGeometry, image: View, weights: Buffer, init: PerIndex, finish: Finish,
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
