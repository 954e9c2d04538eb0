"""BatchNormalization in inference mode."""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node
from aot.kernel.ir import Expr, const, unary
from aot.lowering.context import LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.elementwise import emit_elementwise
from aot.ops.registry import register


@register("BatchNormalization")
def lower_batchnorm(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "X")
    params = [required_input(node, i, n) for i, n in enumerate(["scale", "B", "input_mean", "input_var"], 1)]
    y = node.outputs[0]
    assert y is not None
    if any(o is not None for o in node.outputs[1:]) or node.attr("training_mode", 0):
        raise fail(node, "training mode (running statistics outputs) is not supported; export in eval mode")
    if x.dtype.kind != "f" or x.rank < 2:
        raise fail(node, f"input {list(x.shape)} {x.dtype}: expected float N x C x ...")
    channels = x.shape[1]
    if any(p.size != channels for p in params):
        raise fail(node, f"scale/B/mean/var must each have {channels} values")
    eps = float(node.attr("epsilon", 1e-5))
    # Parameters broadcast along axis 1.
    per_channel = (channels,) + (1,) * (x.rank - 2)
    if all(p.is_constant for p in params):
        # y = x * a + b with a, b computed once at compile time, in float64 then rounded.
        scale, bias, mean, var = (p.data.astype(np.float64).reshape(-1) for p in params)  # type: ignore[union-attr]
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
        a_t = ctx.constant(a.astype(x.dtype).reshape(per_channel), f"{node.name}_scale")
        b_t = ctx.constant(b.astype(x.dtype).reshape(per_channel), f"{node.name}_shift")
        emit_elementwise(ctx, node, [x, a_t, b_t], y, lambda v: v[0] * v[1] + v[2])
        return
    reshaped = []
    for p in params:
        if p.shape != per_channel:
            view = ctx.graph.add_tensor(type(p)(f"{p.name}__bn{node.name}", p.dtype, per_channel))
            ctx.alias(view, p)
            reshaped.append(view)
        else:
            reshaped.append(p)

    def bn(v: list[Expr]) -> Expr:
        xv, scale, bias, mean, var = v
        return (xv - mean) * (scale / unary("sqrt", var + const(eps, xv.dtype))) + bias

    emit_elementwise(ctx, node, [x, *reshaped], y, bn)
