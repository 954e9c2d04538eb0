"""com.microsoft QLinearAdd, QLinearMul, QLinearSigmoid and QLinearLeakyRelu as elementwise forms:
dequantize the inputs, apply the float op, quantize the result (aot/ops/quantized/arithmetic.py).

That is onnxruntime's meaning (its kernels compute it in float32 and round half to even;
Sigmoid and LeakyRelu through a 256-entry table of the same composition, as lower_lookup does
here): results agree but for the rare value that float32 rounding puts on the other side of a
half (its x86 QLinearAdd computes a*(sa/sc) + b*(sb/sc) + offset with FMAs, another rounding of
the same sum: 1 value in 196608 measured). Being forms, they fuse with each other and into the
kernel before them, like any elementwise op.
"""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Node, Tensor, qualified_op_type
from aot.kernel.ir import INDEX, Expr, Stmt, binary, cast
from aot.lowering.context import LoweringContext
from aot.lowering.forms import FORMS, Form, FormBuilder, FormContext
from aot.lowering.registry import LowerFn, register
from aot.ops.attrs import fail, required_input
from aot.ops.elementwise import leaky_relu, lower_elementwise, sigmoid
from aot.ops.quantized.arithmetic import QUANTIZED_RANGES, dequantize, quantize
from aot.ops.quantized.tensor_params import EIGHT_BIT, MS_DOMAIN, QuantParam, eight_bit, scale_param, zero_point_param
from aot.ops.scratch import scratch_tensor


class _Operands:
    """The form's inputs, and each scale or zero point as a value of the loaded inputs."""

    def __init__(self) -> None:
        self.inputs: list[Tensor] = []

    def add(self, tensor: Tensor) -> Callable[[list[Expr]], Expr]:
        position = len(self.inputs)
        self.inputs.append(tensor)
        return lambda v: v[position]

    def param(self, p: QuantParam) -> Callable[[list[Expr]], Expr]:
        if p.tensor is None:
            return lambda v: p.expr(lambda t: t)  # a literal: nothing to load
        return self.add(p.tensor)


def _contrib_form(*op_types: str, lowering: LowerFn = lower_elementwise) -> Callable[[FormBuilder], FormBuilder]:
    """Register a form, and `lowering` for the node when it is not fused into another's kernel."""
    def decorate(builder: FormBuilder) -> FormBuilder:
        for op in op_types:
            FORMS[qualified_op_type(MS_DOMAIN, op)] = builder
        register(*op_types, domain=MS_DOMAIN)(lowering)
        return builder

    return decorate


def lower_lookup(node: Node, ctx: LoweringContext) -> None:
    """A unary op on 8-bit values as onnxruntime runs it: its form evaluated once for each of the
    256 inputs into a table, then one load per element (a 1 x 64 x 56 x 56 uint8 QLinearSigmoid,
    1 thread: 0.21 ms evaluating the form per element, 0.15 ms; onnxruntime 0.07 ms). The table
    holds the form's own values, so the results are the form's; a node fused into another's
    kernel is its form. Scales or zero points fed at run time: the form per element."""
    x, out = node.inputs[0], node.outputs[0]
    assert out is not None
    form = FORMS[node.qualified_op](node, ctx)
    if x is None or len(form.inputs) != 1 or x.dtype.name not in EIGHT_BIT:
        lower_elementwise(node, ctx)
        return
    low = QUANTIZED_RANGES[x.dtype.name][0]
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    table = kb.output(scratch_tensor(ctx, node, (256,), out.dtype, "table"))
    xv, yv = kb.input(x), kb.output(final)
    build = kb.loops([256], lambda t: [table.store(t, form.fn([cast(t[0] + low, x.dtype.name)]))], prefix="t")

    if all(t.shape == out.shape or t.size == 1 for t in epilogue.inputs):  # one flat loop
        def flat(i: list[Expr]) -> list[Stmt]:
            value = table.load([cast(xv.load_flat(i[0]), INDEX) - low])
            return [yv.store_flat(i[0], epilogue.apply(value, flat_index=i[0]))]

        ctx.emit(kb, [*build, *kb.loops([out.size], flat)])
        return

    def lookup(idx: list[Expr]) -> list[Stmt]:
        value = table.load([cast(xv.load(idx), INDEX) - low])
        return [yv.store(idx, epilogue.apply(value, idx))]

    ctx.emit(kb, [*build, *kb.loops(out.shape, lookup)])


def _quantized_operand(node: Node, operands: _Operands, index: int, what: str,
                       dtype: str | None = None) -> tuple[Callable[[list[Expr]], Expr], str]:
    """Input `index` and its scale (index + 1) and zero point (index + 2), dequantised."""
    x = required_input(node, index, what)
    x_dtype = eight_bit(node, x, what)
    if dtype is not None and x_dtype != dtype:
        raise fail(node, f"{what} {x.name!r} is {x_dtype}, the other input {dtype}")
    load = operands.add(x)
    scale = operands.param(scale_param(node, index + 1, f"{what}'s scale"))
    zero = operands.param(zero_point_param(node, index + 2, f"{what}'s zero point", x_dtype))
    return lambda v: dequantize(load(v), scale(v), zero(v)), x_dtype


def _quantizer(node: Node, operands: _Operands, index: int, dtype: str) -> Callable[[list[Expr], Expr], Expr]:
    """The output's scale (index) and zero point (index + 1): a float32 value quantised."""
    out = node.outputs[0]
    assert out is not None
    if out.dtype.name != dtype:
        raise fail(node, f"output {out.name!r} is {out.dtype}, the input {dtype}")
    scale = operands.param(scale_param(node, index, "output scale"))
    zero = operands.param(zero_point_param(node, index + 1, "output zero point", dtype))
    return lambda v, real: quantize(real, scale(v), zero(v), dtype)


_BINARY = {"QLinearAdd": "add", "QLinearMul": "mul"}


@_contrib_form(*_BINARY)
def _binary(node: Node, ctx: FormContext) -> Form:
    """A (0, 1, 2), B (3, 4, 5), C's scale and zero point (6, 7)."""
    operands = _Operands()
    a, dtype = _quantized_operand(node, operands, 0, "A")
    b, _ = _quantized_operand(node, operands, 3, "B", dtype)
    out = _quantizer(node, operands, 6, dtype)
    op = _BINARY[node.op_type]
    return Form(operands.inputs, lambda v: out(v, binary(op, a(v), b(v))))


_UNARY: dict[str, Callable[[Expr, Node], Expr]] = {
    "QLinearSigmoid": lambda x, n: sigmoid(x),
    "QLinearLeakyRelu": lambda x, n: leaky_relu(x, float(n.attr("alpha", 0.01))),
}


@_contrib_form(*_UNARY, lowering=lower_lookup)
def _unary(node: Node, ctx: FormContext) -> Form:
    """X (0, 1, 2), Y's scale and zero point (3, 4)."""
    operands = _Operands()
    x, dtype = _quantized_operand(node, operands, 0, "X")
    out = _quantizer(node, operands, 3, dtype)
    fn = _UNARY[node.op_type]
    return Form(operands.inputs, lambda v: out(v, fn(x(v), node)))
