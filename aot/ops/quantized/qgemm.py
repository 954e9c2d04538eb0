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
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Assign, Declare, Expr, Stmt, cast, const, unary
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.attrs import fail, required_input
from aot.ops.quantized.arithmetic import saturate
from aot.ops.quantized.tensor_params import MS_DOMAIN, QuantParam, eight_bit, scale_param, zero_point_param
from aot.ops.registry import register

Column = Callable[[Expr], Expr]  # the column index -> the value for that column


def _per_column_param(node: Node, index: int, what: str, dtype: str, columns: int) -> Tensor | QuantParam:
    """b_scale or b_zero_point, checked: one tensor of a value per column of B', or one value."""
    t = node.input(index)
    if t is not None and t.size == columns and columns > 1 and t.rank == 1:
        if t.dtype.name != dtype:
            raise fail(node, f"{what} {t.name!r} has dtype {t.dtype}; expected {dtype}")
        return t
    if t is None and dtype == "float32":
        raise fail(node, f"missing required input {index} ({what})")
    return scale_param(node, index, what) if dtype == "float32" else zero_point_param(node, index, what, dtype)


def _per_column(node: Node, index: int, what: str, dtype: str, columns: int, load: Callable[[Tensor], View]) -> Column:
    """b_scale or b_zero_point as the value for column j."""
    param = _per_column_param(node, index, what, dtype, columns)
    if isinstance(param, Tensor):
        view = load(param)
        return lambda j: view.load([j])
    value = param.expr(lambda tensor: load(tensor).load_flat(const(0, INDEX)))
    return lambda j: value


@register("QGemm", domain=MS_DOMAIN)
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

    kb = ctx.builder(node)

    def scalar(p: QuantParam) -> Expr:
        return p.expr(lambda t: kb.input(t).load_flat(const(0, INDEX)))

    a_zero = cast(scalar(zero_point_param(node, 2, "a_zero_point", a_dtype)), "int32")
    dot = _folded_weights(node, ctx, kb, b, trans_b, a_zero) or _dot_product(node, kb, b, trans_b, b_dtype, a_zero, n)
    av, yv = kb.input(a), kb.output(y)
    a_scale = scalar(scale_param(node, 1, "a_scale"))
    b_scale = _per_column(node, 4, "b_scale", "float32", n, kb.input)
    y_scale = scalar(scale_param(node, 7, "y_scale")) if node.input(7) is not None else None
    y_zero = scalar(zero_point_param(node, 8, "y_zero_point", out_dtype)) if quantized_out else None
    cv = kb.input(bias).broadcast_to((m, n)) if bias is not None else None

    def body(idx: list[Expr]) -> list[Stmt]:
        i, j = idx
        acc = kb.var("acc", "int32")

        def step(r: list[Expr]) -> list[Stmt]:
            return [Assign(acc, acc + dot.term(av.load([r[0], i] if trans_a else [i, r[0]]), j, r[0]))]

        start = cast(cv.load(idx), "int32") if cv is not None else const(0, "int32")
        multiplier = const(float(alpha), "float32") * a_scale * b_scale(j)
        if y_scale is not None:
            multiplier = multiplier / y_scale
        value = cast(acc, "float32") * multiplier
        if y_zero is not None:
            value = saturate(unary("round_even", value) + cast(y_zero, "float32"), out_dtype)
        return [Declare(acc, dot.start(start, j)), *kb.loops([k], step, prefix="r"), yv.store(idx, value)]

    ctx.emit(kb, kb.loops([m, n], body))


@dataclass(frozen=True)
class _Dot:
    """How sum_k (A[i, k] - a_zero_point)(B'[j, k] - b_zero_point[j]) accumulates: `term` of one k
    (given A's element), and the accumulator's start (from the bias) for column j."""

    term: Callable[[Expr, Expr, Expr], Expr]
    start: Callable[[Expr, Expr], Expr]


def _dot_product(node: Node, kb: KernelBuilder, b: Tensor, trans_b: int, b_dtype: str, a_zero: Expr,
                 columns: int) -> _Dot:
    """B fed at run time: both zero points subtracted in the sum, in int32."""
    bv = kb.input(b)
    b_zero = _per_column(node, 5, "b_zero_point", b_dtype, columns, kb.input)

    def term(x: Expr, j: Expr, r: Expr) -> Expr:
        w = cast(bv.load([j, r] if trans_b else [r, j]), "int32") - cast(b_zero(j), "int32")
        return (cast(x, "int32") - a_zero) * w

    return _Dot(term, lambda start, j: start)


def _folded_weights(node: Node, ctx: LoweringContext, kb: KernelBuilder, b: Tensor, trans_b: int,
                    a_zero: Expr) -> _Dot | None:
    """A constant B, and its zero points, folded at compile time: B' = B - b_zero_point stored as
    N x K (rows contiguous, as A's are), and sum_k (A - za) B' = sum_k A B' - za colsum(B'), so
    the sum is of products of the stored operands alone, which the compilers turn into
    multiply-add instructions (x86 vpdpbusd for uint8 x int8). An 8 x 768 x 3072 uint8 x int8
    QGemm: B as given, a stride-N load per step, 24.7 ms; this, 0.58 ms (onnxruntime 0.19 ms).
    None when B or its zero point is fed at run time."""
    columns = b.shape[0] if trans_b else b.shape[1]
    zero = _per_column_param(node, 5, "b_zero_point", b.dtype.name, columns)
    if not b.is_constant or (isinstance(zero, QuantParam) and zero.tensor is not None) or \
            (isinstance(zero, Tensor) and not zero.is_constant):
        return None
    assert b.data is not None
    weights = (b.data if trans_b else b.data.T).astype(np.int64)
    if isinstance(zero, Tensor):
        assert zero.data is not None
        weights = weights - zero.data.reshape(-1, 1).astype(np.int64)  # one per row of B'
    else:
        weights = weights - int(zero.value)
    sums = weights.sum(axis=1)
    if np.abs(sums).max(initial=0) >= 2**31:
        return None  # the sums of a column overflow int32 anyway; keep onnxruntime's order
    info = np.iinfo(b.dtype)
    stored_type = b.dtype if weights.min(initial=0) >= info.min and weights.max(initial=0) <= info.max else np.int16
    stored = kb.input(ctx.constant(np.ascontiguousarray(weights.astype(stored_type)), f"{b.name}_folded"))
    column_sums = kb.input(ctx.constant(sums.astype(np.int32), f"{b.name}_column_sums"))

    def term(x: Expr, j: Expr, r: Expr) -> Expr:
        return cast(x, "int32") * cast(stored.load([j, r]), "int32")

    return _Dot(term, lambda start, j: start - a_zero * column_sums.load([j]))


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    return len(small) <= len(big) and all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))
