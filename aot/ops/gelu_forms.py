"""com.microsoft FastGelu, QuickGelu and BiasGelu as elementwise forms, so that, like Gelu, they
run as one flat vector loop or fuse into the MatMul before them (aot/lowering/fusion.py).

Meanings as onnxruntime's CPU kernels compute them:
  FastGelu(X, bias?)  = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x = X + bias
  QuickGelu(X; alpha) = x sigmoid(alpha x), alpha 1.702 by default
  BiasGelu(A, B)      = Gelu(A + B) with erf, B broadcast over A's last axis
"""

from __future__ import annotations

import math
from collections.abc import Callable

from aot.ir.graph import Node, Tensor, qualified_op_type
from aot.kernel.ir import Expr, const, unary
from aot.lowering.context import LoweringContext
from aot.lowering.forms import FORMS, Form, FormBuilder
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input
from aot.ops.elementwise import lower_elementwise, sigmoid

MS_DOMAIN = "com.microsoft"
QUICK_GELU_ALPHA = 1.702


def _ms_form(*op_types: str) -> Callable[[FormBuilder], FormBuilder]:
    def decorate(builder: FormBuilder) -> FormBuilder:
        for op in op_types:
            FORMS[qualified_op_type(MS_DOMAIN, op)] = builder
        register(*op_types, domain=MS_DOMAIN)(lower_elementwise)
        return builder

    return decorate


def _f(x: Expr, value: float) -> Expr:
    return const(value, x.dtype)


def tanh_gelu(x: Expr) -> Expr:
    inner = _f(x, math.sqrt(2.0 / math.pi)) * (x + _f(x, 0.044715) * x * x * x)
    return _f(x, 0.5) * x * (_f(x, 1.0) + unary("tanh", inner))


def erf_gelu(x: Expr) -> Expr:
    return _f(x, 0.5) * x * (_f(x, 1.0) + unary("erf", x * _f(x, 1.0 / math.sqrt(2.0))))


def _operand(node: Node, index: int, what: str, like: Tensor | None = None) -> Tensor:
    t = required_input(node, index, what)
    if t.dtype.kind != "f":
        raise fail(node, f"input {what} has dtype {t.dtype}; {node.op_type} is implemented for float types")
    if like is not None:
        if t.dtype != like.dtype:
            raise fail(node, f"input {what} has dtype {t.dtype}, the input {like.dtype}")
        if t.rank != 1 or like.rank == 0 or t.shape[0] != like.shape[-1]:
            raise fail(node, f"input {what} has shape {list(t.shape)}; expected [{like.shape[-1] if like.rank else 1}] "
                             "(one value per element of the last axis)")
    return t


@_ms_form("FastGelu")
def _fast_gelu(node: Node, ctx: LoweringContext) -> Form:
    x = _operand(node, 0, "X")
    bias = node.input(1)
    if bias is None:
        return Form([x], lambda v: tanh_gelu(v[0]))
    return Form([x, _operand(node, 1, "bias", like=x)], lambda v: tanh_gelu(v[0] + v[1]))


@_ms_form("QuickGelu")
def _quick_gelu(node: Node, ctx: LoweringContext) -> Form:
    x = _operand(node, 0, "X")
    alpha = float(node.attr("alpha", QUICK_GELU_ALPHA))
    return Form([x], lambda v: v[0] * sigmoid(v[0] * _f(v[0], alpha)))


@_ms_form("BiasGelu")
def _bias_gelu(node: Node, ctx: LoweringContext) -> Form:
    a = _operand(node, 0, "A")
    return Form([a, _operand(node, 1, "B", like=a)], lambda v: erf_gelu(v[0] + v[1]))
