"""Elementwise ops: each op's scalar meaning as a kernel-IR expression, applied with numpy
broadcasting by one generic loop builder. Fusion composes these same scalar functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import Expr, binary, cast, const, lt, maximum, minimum, select, unary
from aot.lowering.context import LoweringContext
from aot.ops.attrs import constant_input, fail
from aot.ops.registry import register

ScalarFn = Callable[[list[Expr]], Expr]


def _f(x: Expr, value: float) -> Expr:
    return const(value, x.dtype)


def sigmoid(x: Expr) -> Expr:
    return _f(x, 1.0) / (_f(x, 1.0) + unary("exp", -x))


UNARY: dict[str, Callable[[Expr, Node], Expr]] = {
    "Relu": lambda x, n: select(lt(x, _f(x, 0.0)), _f(x, 0.0), x),
    "LeakyRelu": lambda x, n: select(lt(x, _f(x, 0.0)), x * _f(x, n.attr("alpha", 0.01)), x),
    "Sigmoid": lambda x, n: sigmoid(x),
    "Tanh": lambda x, n: unary("tanh", x),
}

BINARY: dict[str, str] = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}


def emit_elementwise(ctx: LoweringContext, node: Node, inputs: Sequence[Tensor], output: Tensor,
                     fn: ScalarFn) -> None:
    """out[idx] = fn(in0[bcast idx], in1[bcast idx], ...) over the output's shape."""
    kb = ctx.builder(node)
    shape = output.shape
    views = [kb.input(t).broadcast_to(shape) for t in inputs]
    out = kb.output(output)
    if all(t.shape == shape for t in inputs):  # same shapes: one flat loop, easiest to vectorise
        body = kb.loops([output.size], lambda i: [out.store_flat(i[0], fn([v.load_flat(i[0]) for v in views]))])
    else:
        body = kb.loops(shape, lambda idx: [out.store(idx, fn([v.load(idx) for v in views]))])
    ctx.emit(kb, body)


def _float_only(node: Node, t: Tensor) -> None:
    if t.dtype.kind != "f":
        raise fail(node, f"input {t.name!r} has dtype {t.dtype}; this op is implemented for float types")


@register(*UNARY)
def lower_unary(node: Node, ctx: LoweringContext) -> None:
    x = node.inputs[0]
    assert x is not None and node.outputs[0] is not None
    _float_only(node, x)
    scalar = UNARY[node.op_type]
    emit_elementwise(ctx, node, [x], node.outputs[0], lambda v: scalar(v[0], node))


@register(*BINARY)
def lower_binary(node: Node, ctx: LoweringContext) -> None:
    a, b = node.inputs[0], node.inputs[1]
    out = node.outputs[0]
    assert a is not None and b is not None and out is not None
    if a.dtype != b.dtype:
        raise fail(node, f"inputs have different dtypes {a.dtype} and {b.dtype}")
    if node.attr("broadcast", 1) == 1 and node.attr("axis") is not None and node.opset < 7:
        raise fail(node, "legacy broadcast with axis (opset < 7) is not supported")
    op = BINARY[node.op_type]
    if a.dtype.kind in "iu" and op == "div":
        raise fail(node, "integer Div is not supported yet")
    emit_elementwise(ctx, node, [a, b], out, lambda v: binary(op, v[0], v[1]))


@register("Clip")
def lower_clip(node: Node, ctx: LoweringContext) -> None:
    x = node.inputs[0]
    out = node.outputs[0]
    assert x is not None and out is not None
    _float_only(node, x)
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo_arr, hi_arr = constant_input(node, 1, "min"), constant_input(node, 2, "max")
        lo = None if lo_arr is None else float(lo_arr.reshape(-1)[0])
        hi = None if hi_arr is None else float(hi_arr.reshape(-1)[0])

    def clip(v: list[Expr]) -> Expr:
        y = v[0]
        if lo is not None:
            y = maximum(y, const(lo, y.dtype))
        if hi is not None:
            y = minimum(y, const(hi, y.dtype))
        return y

    emit_elementwise(ctx, node, [x], out, clip)


@register("Identity", "Dropout")
def lower_identity(node: Node, ctx: LoweringContext) -> None:
    """Inference-mode Dropout is Identity; its optional mask output is all true."""
    x, out = node.inputs[0], node.outputs[0]
    assert x is not None
    if node.op_type == "Dropout" and node.input(2) is not None:
        training = constant_input(node, 2, "training_mode")
        if training is not None and bool(training.reshape(-1)[0]):
            raise fail(node, "training_mode=true is not supported (inference only)")
    if out is not None:
        ctx.alias(out, x)
    mask = node.outputs[1] if len(node.outputs) > 1 else None
    if mask is not None:
        kb = ctx.builder(node)
        view = kb.output(mask)
        ctx.emit(kb, kb.loops([mask.size], lambda i: [view.store_flat(i[0], cast(const(1, "bool"), mask.dtype.name))]))
