"""BatchNormalization in inference mode: per-channel y = x * a + b (an elementwise form, so it
fuses into the epilogue of the Conv/Gemm before it when the graph pass did not fold it away)."""

from __future__ import annotations

from aot.ir.affine import batchnorm_affine
from aot.ir.graph import Node
from aot.kernel.ir import Expr, const, unary
from aot.lowering.context import LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.elementwise import Form, elementwise


@elementwise("BatchNormalization")
def batchnorm_form(node: Node, ctx: LoweringContext) -> Form:
    x = required_input(node, 0, "X")
    params = [required_input(node, i, n) for i, n in enumerate(["scale", "B", "input_mean", "input_var"], 1)]
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
        a, b = batchnorm_affine(*(p.data for p in params), eps)  # type: ignore[misc]
        a_t = ctx.constant(a.astype(x.dtype).reshape(per_channel), f"{node.name}_scale")
        b_t = ctx.constant(b.astype(x.dtype).reshape(per_channel), f"{node.name}_shift")
        return Form([x, a_t, b_t], lambda v: v[0] * v[1] + v[2])
    reshaped = []
    for p in params:
        if p.shape != per_channel:
            view = ctx.new_tensor(f"{p.name}__bn", p.dtype, per_channel)
            ctx.alias(view, p)
            reshaped.append(view)
        else:
            reshaped.append(p)

    def bn(v: list[Expr]) -> Expr:
        xv, scale, bias, mean, var = v
        return (xv - mean) * (scale / unary("sqrt", var + const(eps, xv.dtype))) + bias

    return Form([x, *reshaped], bn)
