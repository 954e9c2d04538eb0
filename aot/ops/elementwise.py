"""Elementwise ops: each op's scalar meaning as a kernel-IR expression, applied with numpy
broadcasting by one generic loop builder. Fusion composes these same scalar functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, binary, cast, const, lt, maximum, minimum, select, unary
from aot.lowering.builder import View
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
    if all(t.shape == shape or t.size == 1 for t in inputs):
        # Same shapes (or scalars broadcast to every element): one flat loop, easiest to vectorise.
        def flat(i: Expr, t: Tensor, v: View) -> Expr:
            return v.load_flat(const(0, INDEX) if t.shape != shape else i)

        body = kb.loops([output.size], lambda i: [
            out.store_flat(i[0], fn([flat(i[0], t, v) for t, v in zip(inputs, views, strict=True)]))])
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
    # Integer Div truncates toward zero in ONNX (onnx's reference and onnxruntime), which is what
    # C's integer `/` does; a zero divisor is undefined in ONNX as it is in C.
    emit_elementwise(ctx, node, [a, b], out, lambda v: binary(op, v[0], v[1]))


@register("Sum")
def lower_sum(node: Node, ctx: LoweringContext) -> None:
    """Variadic Add with numpy broadcasting (Caffe2-era exporters write residual adds as Sum),
    accumulated left to right like the ONNX reference."""
    inputs = [t for t in node.inputs if t is not None]
    out = node.outputs[0]
    assert out is not None
    if not inputs:
        raise fail(node, "Sum needs at least one input")
    if any(t.dtype != out.dtype for t in inputs):
        raise fail(node, f"inputs have dtypes {sorted({str(t.dtype) for t in inputs})}, output {out.dtype}")

    def total(v: list[Expr]) -> Expr:
        acc = v[0]
        for term in v[1:]:
            acc = acc + term
        return acc

    emit_elementwise(ctx, node, inputs, out, total)


@register("Clip")
def lower_clip(node: Node, ctx: LoweringContext) -> None:
    x = node.inputs[0]
    out = node.outputs[0]
    assert x is not None and out is not None
    if x.dtype.kind not in "fiu":
        raise fail(node, f"input {x.name!r} has dtype {x.dtype}; Clip is implemented for numeric types")
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo, hi = _clip_bound(node, 1, "min"), _clip_bound(node, 2, "max")
    # Bounds known at compile time become literals; bounds fed at run time are scalar inputs that
    # broadcast over x, loaded by the same elementwise loop.
    runtime = [b for b in (lo, hi) if isinstance(b, Tensor)]
    for b in runtime:
        if b.dtype != x.dtype:
            raise fail(node, f"bound {b.name!r} has dtype {b.dtype}, input {x.dtype}")

    def clip(v: list[Expr]) -> Expr:
        y = v[0]
        loaded = iter(v[1:])
        for bound, fn in ((lo, maximum), (hi, minimum)):
            if bound is None:
                continue
            y = fn(y, next(loaded) if isinstance(bound, Tensor) else const(bound, y.dtype))
        return y

    emit_elementwise(ctx, node, [x, *runtime], out, clip)


def _clip_bound(node: Node, index: int, what: str) -> float | int | Tensor | None:
    """Clip-11+ min/max: omitted (None), a compile-time scalar, or a scalar tensor read at run time."""
    t = node.input(index)
    if t is None:
        return None
    if t.size != 1:
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; it must be a scalar")
    if t.is_constant:
        value = constant_input(node, index, what)
        assert value is not None
        return value.reshape(-1)[0].item()
    return t


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
        true = cast(const(1, "bool"), mask.dtype.name)
        ctx.emit(kb, kb.loops([mask.size], lambda i: [view.store_flat(i[0], true)]))
