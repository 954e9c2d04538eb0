"""com.microsoft QLinearAdd, QLinearMul, QLinearSigmoid and QLinearLeakyRelu as elementwise forms:
dequantize the inputs, apply the float op, quantize the result (aot/ops/quantized/arithmetic.py).

That is what onnxruntime's meaning is (its kernels compute it in float32 and round half to even;
Sigmoid and LeakyRelu through a 256-entry table of the same composition): results agree but for
the rare value that float32 rounding puts on the other side of a half (its x86 QLinearAdd
computes a*(sa/sc) + b*(sb/sc) + offset with FMAs, a different rounding of the same sum).
Being forms, they fuse with each other and into the kernel before them, like any elementwise op.
"""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import Expr, binary
from aot.lowering.forms import FORMS, Form, FormBuilder, FormContext
from aot.ops.attrs import fail, required_input
from aot.ops.elementwise import leaky_relu, lower_elementwise, sigmoid
from aot.ops.quantized.arithmetic import dequantize, quantize
from aot.ops.quantized.tensor_params import QuantParam, eight_bit, scale_param, zero_point_param
from aot.ops.registry import register

MS_DOMAIN = "com.microsoft"


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


def _contrib_form(*op_types: str) -> Callable[[FormBuilder], FormBuilder]:
    def decorate(builder: FormBuilder) -> FormBuilder:
        for op in op_types:
            FORMS[f"{MS_DOMAIN}::{op}"] = builder
        register(*op_types, domain=MS_DOMAIN)(lower_elementwise)
        return builder

    return decorate


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


@_contrib_form(*_UNARY)
def _unary(node: Node, ctx: FormContext) -> Form:
    """X (0, 1, 2), Y's scale and zero point (3, 4)."""
    operands = _Operands()
    x, dtype = _quantized_operand(node, operands, 0, "X")
    out = _quantizer(node, operands, 3, dtype)
    fn = _UNARY[node.op_type]
    return Form(operands.inputs, lambda v: out(v, fn(x(v), node)))
