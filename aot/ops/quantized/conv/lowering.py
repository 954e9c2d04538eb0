"""ConvInteger and QLinearConv: validation, then the form algorithm.py picks (or a --max-arena plan gives)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
from aot.lowering.registry import register
from aot.lowering.tiles import TileConfig
from aot.ops.attrs import fail, required_input
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.conv.lowering import conv_key
from aot.ops.quantized.conv.algorithm import IntegerConvForm, choose_integer_form, integer_conv_forms
from aot.ops.quantized.conv.depthwise import depthwise_conv, padded_planes
from aot.ops.quantized.conv.direct import direct_conv
from aot.ops.quantized.conv.dot import channels_last, dot_conv
from aot.ops.quantized.conv.flat_depthwise import flat_depthwise, tap_pairs
from aot.ops.quantized.conv.masked_depthwise import float_start_fits, masked_depthwise
from aot.ops.quantized.conv.operands import (
    Finish,
    IntegerConv,
    StoreAt,
    centred_weights,
    folded_bias,
    integer_conv_operands,
)
from aot.ops.quantized.conv.shifted_depthwise import shifted_depthwise
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
from aot.ops.quantized.integer_tiles import fits_pairs

# Input positions of each op's operands: x, w, x_zero_point, w_zero_point, bias.
_POSITIONS = {"ConvInteger": (0, 1, 2, 3, None), "QLinearConv": (0, 3, 2, 5, 8)}


def _operands(node: Node) -> IntegerConv:
    x, w, x_zero_point, w_zero_point, bias = _POSITIONS[node.op_type]
    return integer_conv_operands(node, x=x, w=w, x_zero_point=x_zero_point, w_zero_point=w_zero_point, bias=bias)


def integer_node_forms(node: Node, tiles: TileConfig) -> list[IntegerConvForm]:
    """The forms (algorithm.integer_conv_forms) the ConvInteger or QLinearConv `node` can take."""
    conv = _operands(node)
    weights = centred_weights(conv)
    return integer_conv_forms(conv.geometry.planar() if weights is not None else conv.geometry, weights, tiles)


@register("ConvInteger")
def lower_conv_integer(node: Node, ctx: LoweringContext) -> None:
    conv = _operands(node)
    if conv.y.dtype != np.int32:
        raise fail(node, f"output {conv.y.name!r} has dtype {conv.y.dtype}; ConvInteger gives int32")
    # the accumulator may be a float32 holding an exact integer (masked_depthwise)
    _lower(node, ctx, conv, lambda kb: lambda acc, m: cast(acc, ACCUMULATOR))


@register("QLinearConv")
def lower_qlinear_conv(node: Node, ctx: LoweringContext) -> None:
    conv = _operands(node)
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
    weights = centred_weights(conv)
    planar = conv.geometry.planar() if weights is not None else conv.geometry
    flat = _flat_output(epilogue, final)
    form = _form(node, ctx, planar, weights, flat=flat)
    if weights is None or form.kind == "direct":
        ctx.emit(kb, direct_conv(kb, conv, finish, store))
        return
    job = _Packed(node, ctx, kb, conv, weights, scalar(kb, conv.x_zero_point, 0, conv.x.dtype.name), finish, store,
                  overlap=not epilogue.inputs)
    if form.kind in ("tiles", "tap_columns"):
        ctx.emit(kb, _tiles(job, form, flat=flat))
    elif form.kind == "dot":
        ctx.emit(kb, _dot(job))
    else:
        ctx.emit(kb, _depthwise(job, form))


def _form(node: Node, ctx: LoweringContext, g: ConvGeometry, weights: np.ndarray | None, *,
          flat: bool) -> IntegerConvForm:
    """The form algorithm.py picks, or the one a --max-arena plan gives the node (one of
    integer_conv_forms, keyed by its output)."""
    chosen = choose_integer_form(g, weights, ctx.tiles, flat=flat)
    override = ctx.overrides.get(conv_key(node))
    if override is None or override == IntegerConvForm("fastest"):
        ctx.forms[conv_key(node)] = IntegerConvForm("fastest", picked=chosen.kind)
        return chosen
    if override not in integer_conv_forms(g, weights, ctx.tiles):
        raise ValueError(f"{node.describe()}: {override} is not one of its forms")
    assert isinstance(override, IntegerConvForm)
    ctx.forms[conv_key(node)] = override
    return override


def _flat_output(epilogue: Epilogue, final: Tensor) -> bool:
    """Whether the output may be stored at [n][m][0][pixel of the plane]: what the epilogue
    reads is the output's shape or constant over each plane."""
    return all(t.size == 1 or t.shape == final.shape or (t.rank >= 2 and t.shape[-2:] == (1, 1))
               for t in epilogue.inputs)


@dataclass(frozen=True)
class _Packed:
    """A convolution with constant weights, as its packed forms take it: `weights` are
    w - w_zero_point (operands.centred_weights), `x_zp` the input's zero point."""

    node: Node
    ctx: LoweringContext
    kb: KernelBuilder
    conv: IntegerConv
    weights: np.ndarray
    x_zp: Expr
    finish: Finish
    store: StoreAt
    overlap: bool  # the output may be stored twice (its epilogue reads no other tensor)

    @property
    def g(self) -> ConvGeometry:
        return self.conv.geometry.planar()

    @property
    def sums(self) -> np.ndarray:
        return self.weights.reshape(self.g.out_channels, -1).sum(axis=1)

    def out_store(self, n: Expr, m: Expr, oh: Expr, ow: Expr, value: Expr) -> Stmt:
        one_row = self.conv.geometry.nd == 1  # the output has no row index
        return self.store([n, m, ow] if one_row else [n, m, oh, ow], value)


def _depthwise(job: _Packed, form: IntegerConvForm) -> list[Stmt]:
    """The depthwise forms: the taps' weights packed narrow, summed in float32 over copies per
    stride phase (masked, shifted), over one padded plane at a time (flat) or over the planes."""
    node, ctx, kb, conv, g = job.node, job.ctx, job.kb, job.conv, job.g
    m_count, taps = g.out_channels, g.kernel[0] * g.kernel[1]
    packed = kb.input(ctx.constant(narrow_weights(job.weights.reshape(m_count, taps)), conv.w.name)).buffer
    if form.kind == "masked_depthwise":
        bias = None if conv.bias is None else conv.bias.data
        float_start = (conv.bias is None or conv.bias.is_constant) and float_start_fits(
            job.weights.reshape(m_count, taps), None if bias is None else np.asarray(bias))
        init = folded_bias(node, ctx, kb, conv, job.sums, const(0, ACCUMULATOR))  # the copies hold x - x_zp
        return masked_depthwise(node, ctx, kb, g, conv.x, job.x_zp, packed, init, float_start=float_start,
                                finish=job.finish, store=job.out_store, lanes=form.lanes, overlap=job.overlap)
    init = folded_bias(node, ctx, kb, conv, job.sums, job.x_zp)
    if form.kind == "shifted_depthwise":
        return shifted_depthwise(node, ctx, kb, g, conv.x, job.x_zp, packed, init, finish=job.finish,
                                 store=job.out_store, lanes=form.lanes, overlap=job.overlap)
    if form.kind == "flat_depthwise":
        return flat_depthwise(node, ctx, kb, g, conv.x, job.x_zp, packed, init, finish=job.finish, store=job.out_store,
                              pairs=tap_pairs(ctx, conv, job.weights))
    copy, planes = padded_planes(node, ctx, kb, conv.x, g, job.x_zp)
    return copy + depthwise_conv(kb, g, planes, packed, init, job.finish, job.out_store)


def _tiles(job: _Packed, form: IntegerConvForm, *, flat: bool) -> list[Stmt]:
    """The int8 tiles over the input (or its taps' columns), which holds signed bytes for a step
    of signed bytes (uint8 x - 128) and unsigned ones for the others (int8 x + 128)."""
    node, ctx, kb, conv, g, weights = job.node, job.ctx, job.kb, job.conv, job.g, job.weights
    x_zp = x_fill = job.x_zp
    dot = ctx.tiles.int8_dot
    if dot.signed_bytes and not dot.pairwise or (dot.signed_when_pairs_fit and fits_pairs(weights)):
        x_zp = signed_byte(x_zp)
    elif conv.x.dtype == np.int8:  # the copy holds x + 128 (integer_terms.unsigned_byte)
        x_zp = unsigned_byte(x_zp)

    def folded() -> PerIndex:  # made only where the tiles read it (pixel_rows folds its own)
        return folded_bias(node, ctx, kb, conv, job.sums, x_zp)

    x = View(kb.input(conv.x).buffer, (g.batch, g.channels, *g.in_spatial))
    if form.kind == "tap_columns":
        taps = g.kernel[0] * g.kernel[1]
        copy, columns, tap_g = tap_columns(node, ctx, kb, x, g, x_fill)
        return copy + tiled_form(node, ctx, kb, conv, tap_g, columns, weights.reshape(g.out_channels, taps, 1, 1),
                                 x_zp, init=folded, finish=job.finish, store=job.store, flat=flat, overlap=job.overlap)
    return tiled_form(node, ctx, kb, conv, g, x, weights, x_zp, init=folded, finish=job.finish, store=job.store,
                      flat=flat, overlap=job.overlap)


def _dot(job: _Packed) -> list[Stmt]:
    """Dot products over a channels-last copy (int8 x as uint8 x + 128), the weights packed
    [M][kh][kw][C/group] to match."""
    node, ctx, kb, conv, g = job.node, job.ctx, job.kb, job.conv, job.g
    x_zp = unsigned_byte(job.x_zp) if conv.x.dtype == np.int8 else job.x_zp
    packed_w = narrow_weights(np.ascontiguousarray(job.weights.transpose(0, 2, 3, 1)))
    packed = kb.input(ctx.constant(packed_w, conv.w.name)).buffer
    copy, image = channels_last(node, ctx, kb, conv.x, g, x_zp)
    return copy + dot_conv(kb, g, image, packed, folded_bias(node, ctx, kb, conv, job.sums, x_zp), job.finish,
                           job.out_store)
