"""com.microsoft QLinearGlobalAveragePool and QLinearAveragePool, channels first or, with
channels_last=1, last; inputs X, X_scale, X_zero_point, Y_scale, Y_zero_point.

Each accumulates as onnxruntime does, so that the results are its results:
- the global pool sums the plane in int32, less zero_point x plane, and requantises the sum by
  one multiplier, X_scale / (Y_scale x plane), rounding half to even;
- the windowed pool sums the dequantised taps in float32, in window order, divides by the count
  (the window's taps inside the image, or the whole window with count_include_pad) and
  quantizes sum / count / Y_scale + Y_zero_point.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Assign, Declare, Expr, If, Load, Stmt, Store, cast, const, ge, logical_and, lt, unary
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, spatial_padding, window_output_size, window_steps
from aot.ops.contraction.row_updates import blocks
from aot.ops.quantized.arithmetic import dequantize, saturate
from aot.ops.quantized.tensor_params import (
    MS_DOMAIN,
    QuantParam,
    eight_bit_in_out,
    scale_param,
    zero_point_param,
)
from aot.ops.scratch import scratch_tensor

# Channels of a channels-first window pool summed side by side.
CHAINS = 8


def _operands(node: Node) -> tuple[Tensor, Tensor, str, list[QuantParam], bool]:
    """X, Y, their dtype, [X_scale, X_zero_point, Y_scale, Y_zero_point] and channels_last."""
    x, y, dtype = eight_bit_in_out(node)
    if x.rank < 3:
        raise fail(node, f"input rank {x.rank}: expected N x C x spatial... (or N x spatial... x C)")
    channels_last = int(node.attr("channels_last", 0))
    if channels_last not in (0, 1):
        raise fail(node, f"channels_last {channels_last} must be 0 or 1")
    params = [scale_param(node, 1, "X_scale"), zero_point_param(node, 2, "X_zero_point", dtype),
              scale_param(node, 3, "Y_scale"), zero_point_param(node, 4, "Y_zero_point", dtype)]
    return x, y, dtype, params, bool(channels_last)


@register("QLinearGlobalAveragePool", domain=MS_DOMAIN)
def lower_qlinear_global_average_pool(node: Node, ctx: LoweringContext) -> None:
    x, y, dtype, params, channels_last = _operands(node)
    batch = x.shape[0]
    channels = x.shape[-1] if channels_last else x.shape[1]
    plane = math.prod(x.shape[1:-1] if channels_last else x.shape[2:])
    kb = ctx.builder(node)
    x_scale, x_zero, y_scale, y_zero = (p.expr(lambda t: kb.input(t).load_flat(const(0, INDEX))) for p in params)
    src = kb.input(x)
    xv = View(src.buffer, (batch, plane, channels) if channels_last else (batch, channels, plane))
    yv = View(kb.output(y).buffer, (batch, channels))
    multiplier = x_scale / (y_scale * const(float(plane), "float32"))
    bias = -(cast(x_zero, "int32") * const(plane, "int32"))

    def body(idx: list[Expr]) -> list[Stmt]:
        n, c = idx
        acc = kb.var("acc", "int32")
        total = kb.loops([plane], lambda r: [Assign(acc, acc + cast(
            xv.load([n, r[0], c] if channels_last else [n, c, r[0]]), "int32"))], prefix="r")
        rounded = unary("round_even", cast(acc, "float32") * multiplier)
        return [Declare(acc, bias), *total, yv.store(idx, saturate(rounded + cast(y_zero, "float32"), dtype))]

    ctx.emit(kb, kb.loops([batch, channels], body))


@register("QLinearAveragePool", domain=MS_DOMAIN)
def lower_qlinear_average_pool(node: Node, ctx: LoweringContext) -> None:
    x, y, dtype, params, channels_last = _operands(node)
    spatial = x.shape[1:-1] if channels_last else x.shape[2:]
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    if len(kernel) != len(spatial) or any(not 1 <= k < 2**31 for k in kernel):
        raise fail(node, f"kernel_shape {kernel} does not match {len(spatial)} spatial dimensions")
    strides, dilations = window_steps(node, spatial)
    if any(d != 1 for d in dilations):
        raise fail(node, f"dilations {dilations}: QLinearAveragePool has no dilated windows")
    pad_begin, pad_end = spatial_padding(node, spatial, kernel, strides, dilations)
    out_spatial = window_output_size(node, spatial, kernel, strides, dilations, pad_begin, pad_end)
    if tuple(y.shape[1:-1] if channels_last else y.shape[2:]) != out_spatial:
        raise fail(node, f"output shape {list(y.shape)} differs from the spatial {list(out_spatial)} its window "
                         f"{kernel} (strides {strides}, pads {pad_begin + pad_end}) gives")
    include_pad = int(node.attr("count_include_pad", 0)) == 1
    kb = ctx.builder(node)
    x_scale, x_zero, y_scale, y_zero = (p.expr(lambda t: kb.input(t).load_flat(const(0, INDEX))) for p in params)
    xv, yv = kb.input(x), kb.output(y)
    batch, channels = x.shape[0], (x.shape[-1] if channels_last else x.shape[1])
    table, real = _dequantized_taps(node, ctx, kb, params[0], params[1], dtype, x_scale, x_zero)

    # Taps can fall outside the image only in the padding, or past the end in ceil_mode.
    guard_low = [pb > 0 for pb in pad_begin]
    guard_high = [(o - 1) * s - pb + k > size
                  for o, s, pb, k, size in zip(out_spatial, strides, pad_begin, kernel, spatial)]

    def layout(n: Expr, c: Expr, where: list[Expr]) -> list[Expr]:
        return [n, *where, c] if channels_last else [n, c, *where]

    def window(n: Expr, cs: list[Expr], o: list[Expr]) -> list[Stmt]:
        """The outputs at `o` of channels `cs`, each summed in window order by a chain of its own."""
        accs, count = [kb.var("acc", "float32") for _ in cs], kb.var("cnt", "float32")

        def tap(k: list[Expr]) -> list[Stmt]:
            pos = [oi * s - pb + ki for oi, ki, s, pb in zip(o, k, strides, pad_begin)]
            checks = [ge(p, const(0, INDEX)) for p, lo in zip(pos, guard_low) if lo]
            checks += [lt(p, const(size, INDEX)) for p, size, hi in zip(pos, spatial, guard_high) if hi]
            step: list[Stmt] = [Assign(acc, acc + real(xv.load(layout(n, c, pos)))) for acc, c in zip(accs, cs)]
            if not include_pad:
                step.append(Assign(count, count + const(1.0, "float32")))
            if not checks:
                return step
            inside = checks[0]
            for check in checks[1:]:
                inside = logical_and(inside, check)
            return [If(inside, step)]

        divisor: Expr = const(float(math.prod(kernel)), "float32") if include_pad else count
        stmts: list[Stmt] = [Declare(acc, const(0.0, "float32")) for acc in accs]
        if not include_pad:
            stmts.append(Declare(count, const(0.0, "float32")))
        stmts += kb.loops(kernel, tap, prefix="r")
        for acc, c in zip(accs, cs):
            quantized = saturate(unary("round_even", acc / divisor / y_scale + cast(y_zero, "float32")), dtype)
            stmts.append(yv.store(layout(n, c, o), quantized))
        return stmts

    if channels_last:
        body = kb.loops([batch, *out_spatial, channels], lambda i: window(i[0], [i[-1]], i[1:-1]))
    else:
        # CHAINS channels at a time: one channel's sum is a chain of dependent additions (the
        # window order is onnxruntime's), so independent chains side by side fill the adder.
        body = kb.loops([batch], lambda n: blocks(kb, channels, CHAINS, lambda first, count: kb.loops(
            list(out_spatial), lambda o: window(n[0], [first + j for j in range(count)], o)), "b"))
    ctx.emit(kb, table + body)


def _dequantized_taps(node: Node, ctx: LoweringContext, kb: KernelBuilder, scale: QuantParam, zero: QuantParam,
                      dtype: str, scale_expr: Expr, zero_expr: Expr) -> tuple[list[Stmt], Callable[[Expr], Expr]]:
    """How a tap's real value is read, and what fills what it reads: with constant parameters, a
    256-entry table of (q - zp) * scale, each entry one product as onnxruntime computes it (the
    window sum is then additions only: with the product in the loop, a compiler contracting
    `acc + (q - zp) * scale` into one FMA rounds differently, as clang does under
    -ffp-contract=fast); else dequantised in the loop. The kernel fills the table in its
    scratch when it starts (256 products, against one lookup per tap): as a constant it was a
    KiB of weights, DS-CNN's int8 package past 0.3 of the float one's."""
    if scale.tensor is not None or zero.tensor is not None:
        return [], lambda q: dequantize(q, scale_expr, zero_expr)
    low = int(np.iinfo(dtype).min)
    table = kb.output(scratch_tensor(ctx, node, (256,), np.float32, "dequantized_taps")).buffer
    fill = kb.loops([256], lambda i: [Store(table, i[0], dequantize(
        cast(i[0] + const(low, INDEX), "int32"), const(float(scale.value), "float32"), const(zero.value, "int32")))],
        prefix="t")
    return fill, lambda q: Load(table, cast(q, INDEX) - const(low, INDEX))
