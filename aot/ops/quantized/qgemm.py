"""com.microsoft QGemm: Y = alpha A' B' + C over quantised A and B, as onnxruntime computes it.

Inputs A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point (C, y_scale
and y_zero_point optional); transA, transB, alpha. Each element accumulates
C + sum_k (A - a_zero_point)(B - b_zero_point) in int32 (C is the bias, int32, broadcast to
[M, N]), then is scaled by one float32 multiplier per column, alpha x a_scale x b_scale[n]
(divided by y_scale when given), in that order: the output is that product, float32, or with
y_zero_point the product rounded half to even, plus the zero point, saturated. b_scale and
b_zero_point are per tensor or one per column of B'.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Assign, Declare, Expr, Stmt, cast, const, unary
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.quantized.arithmetic import saturate
from aot.ops.quantized.tensor_params import QuantParam, eight_bit, scale_param, zero_point_param
from aot.ops.registry import register

Column = Callable[[Expr], Expr]  # the column index -> the value for that column


def _per_column(node: Node, index: int, what: str, dtype: str, columns: int, load: Callable[[Tensor], View]) -> Column:
    """b_scale or b_zero_point: one value, or one per column of B'."""
    t = node.input(index)
    if t is not None and t.size == columns and columns > 1 and t.rank == 1:
        if t.dtype.name != dtype:
            raise fail(node, f"{what} {t.name!r} has dtype {t.dtype}; expected {dtype}")
        view = load(t)
        return lambda j: view.load([j])
    if t is None and dtype == "float32":
        raise fail(node, f"missing required input {index} ({what})")
    param = scale_param(node, index, what) if dtype == "float32" else zero_point_param(node, index, what, dtype)
    value = param.expr(lambda tensor: load(tensor).load_flat(const(0, INDEX)))
    return lambda j: value


@register("QGemm", domain="com.microsoft")
def lower_qgemm(node: Node, ctx: LoweringContext) -> None:
    a, b = required_input(node, 0, "A"), required_input(node, 3, "B")
    y = node.outputs[0]
    assert y is not None
    a_dtype, b_dtype = eight_bit(node, a, "A"), eight_bit(node, b, "B")
    if a.rank != 2 or b.rank != 2:
        raise fail(node, f"A {list(a.shape)} and B {list(b.shape)} must be matrices")
    trans_a, trans_b = int(node.attr("transA", 0)), int(node.attr("transB", 0))
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    n = b.shape[0] if trans_b else b.shape[1]
    if (b.shape[1] if trans_b else b.shape[0]) != k or y.shape != (m, n):
        raise fail(node, f"A {list(a.shape)} (transA {trans_a}) and B {list(b.shape)} (transB {trans_b}) do not give "
                         f"the output's {list(y.shape)}")
    quantized_out = node.input(8) is not None
    out_dtype = y.dtype.name
    if quantized_out and out_dtype not in ("int8", "uint8"):
        raise fail(node, f"output {y.name!r} is {y.dtype}; with y_zero_point it is int8 or uint8")
    if not quantized_out and out_dtype != "float32":
        raise fail(node, f"output {y.name!r} is {y.dtype}; without y_zero_point it is float32")
    bias = node.input(6)
    if bias is not None and (bias.dtype != np.int32 or not _broadcasts(bias.shape, (m, n))):
        raise fail(node, f"C {bias.name!r} is {bias.dtype} {list(bias.shape)}; expected int32 broadcasting to "
                         f"{[m, n]}")
    alpha = np.float32(node.attr("alpha", 1.0))

    if b.is_constant and not trans_b:
        # A weight is stored as B' (N x K) at compile time: each output's sum then reads a row of
        # A and a row of B', both contiguous, which the compilers vectorise (an 8 x 768 x 3072
        # QGemm read B as given, a stride-N load per step, in 24.7 ms; from B', 1.4 ms).
        assert b.data is not None
        b, trans_b = ctx.constant(np.ascontiguousarray(b.data.T), f"{b.name}_transposed"), 1
    kb = ctx.builder(node)
    av, bv, yv = kb.input(a), kb.input(b), kb.output(y)

    def scalar(p: QuantParam) -> Expr:
        return p.expr(lambda t: kb.input(t).load_flat(const(0, INDEX)))

    a_scale = scalar(scale_param(node, 1, "a_scale"))
    a_zero = cast(scalar(zero_point_param(node, 2, "a_zero_point", a_dtype)), "int32")
    b_scale = _per_column(node, 4, "b_scale", "float32", n, kb.input)
    b_zero = _per_column(node, 5, "b_zero_point", b_dtype, n, kb.input)
    y_scale = scalar(scale_param(node, 7, "y_scale")) if node.input(7) is not None else None
    y_zero = scalar(zero_point_param(node, 8, "y_zero_point", out_dtype)) if quantized_out else None
    cv = kb.input(bias).broadcast_to((m, n)) if bias is not None else None

    def body(idx: list[Expr]) -> list[Stmt]:
        i, j = idx
        acc = kb.var("acc", "int32")
        zb = cast(b_zero(j), "int32")

        def step(r: list[Expr]) -> list[Stmt]:
            x = cast(av.load([r[0], i] if trans_a else [i, r[0]]), "int32") - a_zero
            w = cast(bv.load([j, r[0]] if trans_b else [r[0], j]), "int32") - zb
            return [Assign(acc, acc + x * w)]

        start = cast(cv.load(idx), "int32") if cv is not None else const(0, "int32")
        multiplier = const(float(alpha), "float32") * a_scale * b_scale(j)
        if y_scale is not None:
            multiplier = multiplier / y_scale
        value = cast(acc, "float32") * multiplier
        if y_zero is not None:
            value = saturate(unary("round_even", value) + cast(y_zero, "float32"), out_dtype)
        return [Declare(acc, start), *kb.loops([k], step, prefix="r"), yv.store(idx, value)]

    ctx.emit(kb, kb.loops([m, n], body))


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    return len(small) <= len(big) and all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))
