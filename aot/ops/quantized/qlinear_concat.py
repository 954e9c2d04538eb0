"""com.microsoft QLinearConcat: inputs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per
part; each part requantised to the output's scale and zero point on its way into its slice of
the output (dequantize, then quantize: onnxruntime's table per part is the same composition), or
copied as it is when its scale and zero point are the output's."""

from __future__ import annotations

import math

from aot.ir.graph import Node
from aot.kernel.ir import Expr, Stmt, const
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, normalize_axis
from aot.ops.quantized.arithmetic import dequantize, quantize
from aot.ops.quantized.tensor_params import MS_DOMAIN, QuantParam, eight_bit, scale_param, zero_point_param


@register("QLinearConcat", domain=MS_DOMAIN)
def lower_qlinear_concat(node: Node, ctx: LoweringContext) -> None:
    y = node.outputs[0]
    assert y is not None
    dtype = eight_bit(node, y, "output")
    if (len(node.inputs) - 2) % 3 or len(node.inputs) < 5:
        raise fail(node, f"has {len(node.inputs)} inputs; QLinearConcat takes Y_scale, Y_zero_point and then "
                         "(X, X_scale, X_zero_point) for each part")
    axis = normalize_axis(node, int(node.attr("axis", 0)), y.rank)
    y_scale = scale_param(node, 0, "Y_scale")
    y_zero = zero_point_param(node, 1, "Y_zero_point", dtype)
    kb = ctx.builder(node)
    out = kb.output(y)

    def scalar(p: QuantParam) -> Expr:
        return p.expr(lambda t: kb.input(t).load_flat(const(0, "index")))

    body: list[Stmt] = []
    offset = 0
    for first in range(2, len(node.inputs), 3):
        x = node.inputs[first]
        if x is None:
            raise fail(node, f"input {first} (a part to concatenate) is missing")
        if x.dtype.name != dtype:
            raise fail(node, f"input {x.name!r} has dtype {x.dtype}, the output {y.dtype}")
        x_scale = scale_param(node, first + 1, f"scale of {x.name!r}")
        x_zero = zero_point_param(node, first + 2, f"zero point of {x.name!r}", dtype)
        if x.size:
            # Each part's run from `axis` on is contiguous in both: one loop over it, which the
            # compilers vectorise (over SqueezeNet's 55-wide rows gcc's 64-byte vectors never ran).
            run = (math.prod(x.shape[axis:]),)
            src = View(kb.input(x).buffer, x.shape[:axis] + run)
            slot = View(out.buffer, x.shape[:axis] + run, out.strides[:axis] + (1,), offset * out.strides[axis])
            same = x_scale.same_as(y_scale) and x_zero.same_as(y_zero)

            def value(idx: list[Expr], src: View = src, s: QuantParam = x_scale, z: QuantParam = x_zero,
                      same: bool = same) -> Expr:
                if same:
                    return src.load(idx)
                return quantize(dequantize(src.load(idx), scalar(s), scalar(z)), scalar(y_scale), scalar(y_zero), dtype)

            body += kb.loops(list(src.shape), lambda idx, slot=slot, value=value: [slot.store(idx, value(idx))])
        offset += x.shape[axis]
    if offset != y.shape[axis]:
        raise fail(node, f"inputs add up to {offset} along axis {axis}, output has {y.shape[axis]}")
    ctx.emit(kb, body)
