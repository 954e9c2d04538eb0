"""ConvInteger and QLinearConv: validation, then the form algorithm.py picks (or a --max-arena plan gives)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    Expr,
    Stmt,
    cast,
    const,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.quantized.conv.depthwise import depthwise_conv, padded_planes
from aot.ops.quantized.conv.direct import direct_conv
from aot.ops.quantized.conv.dot import channels_last, dot_conv
from aot.ops.quantized.conv.flat_depthwise import flat_depthwise, tap_pairs
from aot.ops.quantized.conv.masked_depthwise import float_start_fits, masked_depthwise, masked_period
from aot.ops.quantized.conv.operands import (
    MAX_TAP_COLUMNS,
    MAX_UNROLLED_TAPS,
    Finish,
    IntegerConv,
    StoreAt,
    folded_bias,
    integer_conv_operands,
    sums_in_float,
)
from aot.ops.quantized.conv.shifted_depthwise import shifted_depthwise, vector_lanes
from aot.ops.quantized.conv.tiles import tap_columns, tiled_form
from aot.ops.quantized.integer_terms import (
    ACCUMULATOR,
    PerIndex,
    check_operand,
    check_per_channel,
    check_per_tensor,
    check_scale,
    check_zero_point,
    finite_constants,
    multiplier_expr,
    narrow_weights,
    output_multiplier,
    per_channel,
    requantize,
    scalar,
    signed_byte,
    uniform,
    unsigned_byte,
)
from aot.ops.quantized.integer_tiles import fits, fits_pairs
from aot.ops.registry import register


@register("ConvInteger")
def lower_conv_integer(node: Node, ctx: LoweringContext) -> None:
    conv = integer_conv_operands(node, x=0, w=1, x_zero_point=2, w_zero_point=3, bias=None)
    if conv.y.dtype != np.int32:
        raise fail(node, f"output {conv.y.name!r} has dtype {conv.y.dtype}; ConvInteger gives int32")
    # the accumulator may be a float32 holding an exact integer (masked_depthwise)
    _lower(node, ctx, conv, lambda kb: lambda acc, m: cast(acc, ACCUMULATOR))


@register("QLinearConv")
def lower_qlinear_conv(node: Node, ctx: LoweringContext) -> None:
    conv = integer_conv_operands(node, x=0, w=3, x_zero_point=2, w_zero_point=5, bias=8)
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
        ctx.emit(kb, direct_conv(kb, conv, finish, store))


def _flat_output(epilogue: Epilogue, final: Tensor) -> bool:
    """Whether the output may be stored at [n][m][0][pixel of the plane]: what the epilogue
    reads is the output's shape or constant over each plane."""
    return all(t.size == 1 or t.shape == final.shape or (t.rank >= 2 and t.shape[-2:] == (1, 1))
               for t in epilogue.inputs)


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
        lanes = vector_lanes(g, ctx.tiles.lanes) if sums_in_float(ctx) and flat else None
        if lanes is not None and masked_period(g, lanes) is not None:
            bias = None if conv.bias is None else conv.bias.data
            float_start = (conv.bias is None or conv.bias.is_constant) and float_start_fits(
                weights.reshape(m_count, taps), None if bias is None else np.asarray(bias))
            init = folded_bias(node, ctx, kb, conv, sums, const(0, ACCUMULATOR))  # the copies hold x - x_zp
            return masked_depthwise(node, ctx, kb, g, conv.x, x_zp, packed, init, float_start, finish, out_store,
                                    lanes, overlap)
        init = folded_bias(node, ctx, kb, conv, sums, x_zp)
        if lanes is not None:
            return shifted_depthwise(node, ctx, kb, g, conv.x, x_zp, packed, init, finish, out_store, lanes,
                                     overlap)
        # On Arm a strided convolution of one input channel (a first layer whose weights do not
        # fit the tiles) keeps depthwise_conv: the flat form ran more instructions under qemu there
        # (DS-CNN's 10x4 stride-2 conv on rpi3). Strided depthwise convolutions take it, which
        # runs fewer instructions on VWW's four (`python -m benchmarks.arm` on the int8 VWW).
        if ctx.tiles.lanes > 1 and (sums_in_float(ctx) or g.strides == (1, 1) or g.groups > 1):
            return flat_depthwise(node, ctx, kb, g, conv.x, x_zp, packed, init, finish, out_store,
                                   tap_pairs(ctx, conv, weights))
        copy, planes = padded_planes(node, ctx, kb, conv.x, g, x_zp)
        return copy + depthwise_conv(kb, g, planes, packed, init, finish, out_store)
    x_fill = x_zp
    dot = ctx.tiles.int8_dot
    if tiled and (dot.signed_bytes and not dot.pairwise or (dot.signed_when_pairs_fit and fits_pairs(weights))):
        # the copy holds signed bytes (uint8 x - 128) for a step of signed bytes by signed bytes
        x_zp = signed_byte(x_zp)
    elif conv.x.dtype == np.int8:  # the copy holds x + 128 (integer_terms.unsigned_byte)
        x_zp = unsigned_byte(x_zp)
    if tiled:
        def folded() -> PerIndex:  # made only where the tiles read it (pixel_rows folds its own)
            return folded_bias(node, ctx, kb, conv, sums, x_zp)

        x = View(kb.input(conv.x).buffer, (g.batch, g.channels, *g.in_spatial))
        if g.channels == 1 and 1 < taps <= MAX_TAP_COLUMNS:
            copy, columns, tap_g = tap_columns(node, ctx, kb, x, g, x_fill)
            return copy + tiled_form(node, ctx, kb, conv, tap_g, columns, weights.reshape(m_count, taps, 1, 1), x_zp,
                                 folded, finish, store, flat, overlap)
        return tiled_form(node, ctx, kb, conv, g, x, weights, x_zp, folded, finish, store, flat, overlap)
    packed_w = narrow_weights(np.ascontiguousarray(weights.transpose(0, 2, 3, 1)))  # [M][kh][kw][C/group]
    packed = kb.input(ctx.constant(packed_w, conv.w.name)).buffer
    copy, image = channels_last(node, ctx, kb, conv.x, g, x_zp)
    return copy + dot_conv(kb, g, image, packed, folded_bias(node, ctx, kb, conv, sums, x_zp), finish, out_store)

