"""com.microsoft QLinearSoftmax: inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point; attributes
`opset` (required: whose ai.onnx Softmax it means, before 13 over the dims from `axis` on,
flattened, from 13 over the one axis) and `axis`. onnxruntime's schema gives axis the default
-1 whatever the opset (its kernel's fallback to 1 before opset 13 never runs), so aot does too.

Computed as onnxruntime's contrib kernel does, so that the results are its results:
- a 256-entry float32 table of exp over the possible differences d = max(row) - x, made once
  (in double, as exp((255 - d - 255 + shift) * X_scale) with shift = max(0, ln(FLT_MAX / D) - 5)
  / X_scale for a row of D values, then rounded to float32: the largest value is about
  FLT_MAX / (e^5 D), so the float32 sum of a row cannot overflow, and X_zero_point cancels out);
- a float32 sum of the row's table values, in row order;
- y = saturate(round_half_even(table[d] * floor(1 / Y_scale) / sum) + Y_zero_point): the
  output scale is taken as the integer floor(1 / Y_scale) (256 for the 1/256 the quantiser
  writes), as onnxruntime does.
"""

from __future__ import annotations

import math

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.ir.sizes import element_count
from aot.kernel.ir import INDEX, Assign, Declare, Expr, If, Stmt, cast, const, gt, unary
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, normalize_axis
from aot.ops.quantized.arithmetic import saturate
from aot.ops.quantized.tensor_params import (
    MS_DOMAIN,
    QuantParam,
    eight_bit_in_out,
    scale_param,
    zero_point_param,
)
from aot.ops.scratch import scratch_tensor

# ai.onnx Softmax changed from "flatten at axis" to "one axis" in opset 13.
ONE_AXIS_OPSET = 13
# onnxruntime keeps e^5 of float32 headroom below FLT_MAX / D for the row's sum.
RESERVED_EXPONENT = 5.0


def exp_shift(row_length: int) -> float:
    """max(0, ln(FLT_MAX / D) - 5): the exponent of the table's largest value, before it is
    divided by X_scale. FLT_MAX / D is a float32 quotient, as onnxruntime computes it."""
    quotient = np.float32(np.finfo(np.float32).max) / np.float32(row_length)
    return max(0.0, math.log(float(quotient)) - RESERVED_EXPONENT)


def exp_table(x_scale: float, row_length: int) -> np.ndarray:
    """table[k] = exp(-(255 - k) * X_scale) scaled up by e^shift, k = 255 - (max - x)."""
    scale = float(np.float32(x_scale))
    shift = exp_shift(row_length) / scale
    return np.array([math.exp(((k - 255.0) + shift) * scale) for k in range(256)]).astype(np.float32)


def _softmax_attributes(node: Node, x: Tensor) -> tuple[int, int, int, int]:
    """(outer, length, inner, axis) of the rows the node normalises, from its opset and axis."""
    if "opset" not in node.attrs:
        raise fail(node, "attribute 'opset' is required (the ai.onnx Softmax opset whose meaning applies)")
    opset = int(node.attr("opset"))
    if opset < 1:
        raise fail(node, f"opset {opset} is not an ai.onnx opset")
    if x.rank == 0:
        raise fail(node, f"X {x.name!r} is a scalar; softmax needs at least one axis")
    legacy = opset < ONE_AXIS_OPSET
    axis = normalize_axis(node, int(node.attr("axis", -1)), x.rank)
    outer = element_count(x.shape[:axis])
    if legacy:
        return outer, element_count(x.shape[axis:]), 1, axis
    return outer, x.shape[axis], element_count(x.shape[axis + 1:]), axis


def _constant_scale(node: Node, p: QuantParam, what: str) -> None:
    if p.tensor is None and not (math.isfinite(float(p.value)) and float(p.value) > 0):
        raise fail(node, f"{what} {p.value} must be a positive finite number")


def _table(node: Node, ctx: LoweringContext, kb: KernelBuilder, x_scale: QuantParam,
           length: int) -> tuple[View, list[Stmt]]:
    """The exp table as a compile-time constant, or, for an X_scale fed at run time, a scratch
    tensor the kernel fills first (in float64 with the C library's exp, as onnxruntime does)."""
    if x_scale.tensor is None:
        return kb.input(ctx.constant(exp_table(float(x_scale.value), length), f"{node.name}_exp_table")), []
    table = kb.output(scratch_tensor(ctx, node, (256,), "float32", "exp_table"))
    scale = cast(kb.input(x_scale.tensor).load_flat(const(0, INDEX)), "float64")
    shift = const(exp_shift(length), "float64") / scale

    def entry(k: list[Expr]) -> list[Stmt]:
        exponent = (cast(k[0], "float64") - const(255.0, "float64") + shift) * scale
        return [table.store(k, cast(unary("exp", exponent), "float32"))]

    return table, kb.loops([256], entry, prefix="t")


@register("QLinearSoftmax", domain=MS_DOMAIN)
def lower_qlinear_softmax(node: Node, ctx: LoweringContext) -> None:
    x, y, dtype = eight_bit_in_out(node)
    outer, length, inner, _ = _softmax_attributes(node, x)
    x_scale, y_scale = scale_param(node, 1, "X_scale"), scale_param(node, 3, "Y_scale")
    zero_point_param(node, 2, "X_zero_point", dtype)  # checked, but it cancels out of max - x
    y_zero = zero_point_param(node, 4, "Y_zero_point", dtype)
    _constant_scale(node, x_scale, "X_scale")
    _constant_scale(node, y_scale, "Y_scale")
    if not x.size:
        return
    kb = ctx.builder(node)
    table, build = _table(node, ctx, kb, x_scale, length)
    xv = View(kb.input(x).buffer, (outer, length, inner))
    yv = View(kb.output(y).buffer, (outer, length, inner))

    def scalar(p: QuantParam) -> Expr:
        return p.expr(lambda t: kb.input(t).load_flat(const(0, INDEX)))

    if y_scale.tensor is None:
        multiplier: Expr = const(float(np.floor(np.float32(1) / np.float32(y_scale.value))), "float32")
    else:
        multiplier = unary("floor", const(1.0, "float32") / scalar(y_scale))
    offset = cast(scalar(y_zero), "float32")

    def row(idx: list[Expr]) -> list[Stmt]:
        o, i = idx
        peak, base, total = kb.var("max", dtype), kb.var("base", INDEX), kb.var("sum", "float32")

        def exp_of(r: list[Expr]) -> Expr:  # table[255 - (max - x)]
            return table.load([base + cast(xv.load([o, r[0], i]), INDEX)])

        def store(r: list[Expr]) -> list[Stmt]:
            rounded = unary("round_even", exp_of(r) * multiplier / total)
            return [yv.store([o, r[0], i], saturate(rounded + offset, dtype))]

        stmts: list[Stmt] = [Declare(peak, xv.load([o, 0, i]))]
        stmts += kb.loops([length], lambda r: [
            If(gt(xv.load([o, r[0], i]), peak), [Assign(peak, xv.load([o, r[0], i]))])], prefix="r")
        stmts += [Declare(base, const(255, INDEX) - cast(peak, INDEX)), Declare(total, const(0.0, "float32"))]
        stmts += kb.loops([length], lambda r: [Assign(total, total + exp_of(r))], prefix="r")
        return stmts + kb.loops([length], store, prefix="r")

    ctx.emit(kb, [*build, *kb.loops([outer, inner], row)])
