"""The operands of ConvInteger and QLinearConv, checked, and what every form of the convolution shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    Buffer,
    Const,
    Expr,
    Stmt,
    Store,
    const,
)
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext
from aot.lowering.tiles import TileConfig
from aot.ops.attrs import fail, required_input
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.conv.lowering import window_geometry
from aot.ops.quantized.integer_terms import (
    ACCUMULATOR,
    PerIndex,
    check_operand,
    check_per_channel,
    check_per_tensor,
    check_zero_point,
    uniform,
    widened,
    wrap_int32,
)

# Taps of a depthwise kernel summed as one expression per output; larger kernels take the dot form.
MAX_UNROLLED_TAPS = 49
# One-channel convolutions with up to this many taps run as 1x1 convolutions over their taps.
MAX_TAP_COLUMNS = 64
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


def integer_conv_operands(node: Node, x: int, w: int, x_zero_point: int, w_zero_point: int,
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


def constant_start(conv: IntegerConv, weight_sums: np.ndarray, x_zp: Expr) -> np.ndarray | None:
    """bias - x_zero_point * sum(w - w_zero_point) per output channel (int64, unwrapped), where the
    zero point and the bias are constants; None otherwise."""
    if not isinstance(x_zp, Const) or not (conv.bias is None or conv.bias.is_constant):
        return None
    values = -int(x_zp.value) * weight_sums
    return values if conv.bias is None else values + np.asarray(conv.bias.data, np.int64).reshape(-1)


def folded_bias(node: Node, ctx: LoweringContext, kb: KernelBuilder, conv: IntegerConv, weight_sums: np.ndarray,
                 x_zp: Expr) -> PerIndex:
    """The accumulator's start per output channel: bias - x_zero_point * sum(w - w_zero_point),
    one int32 constant when bias and zero point are constants, else computed from them."""
    bias = conv.bias
    values = constant_start(conv, weight_sums, x_zp)
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


def filled(kb: KernelBuilder, buffer: Buffer, fill: Expr) -> list[Stmt]:
    return kb.loops([buffer.size], lambda i: [Store(buffer, i[0], fill)], prefix="z")


def sums_in_float(tiles: TileConfig) -> bool:
    """Whether flat depthwise sums are float32 (flat_depthwise): where the vector int8 step
    multiplies unsigned by signed bytes, which has no widening multiply-add of signed bytes
    (x86 with AVX2 or later; Arm keeps integer sums, smlal)."""
    dot = tiles.int8_dot
    return dot.vectorised and not dot.signed_bytes



def centred_weights(conv: IntegerConv) -> np.ndarray | None:
    """w - w_zero_point per output channel as int64 [M][C/group][kh][kw] of the planar geometry,
    where the packed forms can run: constant weights and zero points, 1-D or 2-D, no cropping;
    else None (the direct form)."""
    g = conv.geometry
    if not (conv.w.is_constant and (conv.w_zero_point is None or conv.w_zero_point.is_constant)
            and g.nd <= 2 and min(g.pad_begin + g.pad_end) >= 0):
        return None
    planar = g.planar()
    m_count = planar.out_channels
    w_zp = np.zeros(m_count, np.int64) if conv.w_zero_point is None else \
        np.broadcast_to(np.asarray(conv.w_zero_point.data, np.int64).reshape(-1), (m_count,))
    weights = np.asarray(conv.w.data, np.int64).reshape(m_count, planar.group_in, *planar.kernel)
    return weights - w_zp.reshape(-1, 1, 1, 1)
