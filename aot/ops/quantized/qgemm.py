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
from aot.kernel.ir import INDEX, Assign, Declare, Expr, Stmt, cast, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input
from aot.ops.quantized.integer_gemm import GemmOperands, gemm_tiles
from aot.ops.quantized.integer_terms import UNSIGNED_SHIFT, requantize, uniform, unsigned_byte
from aot.ops.quantized.tensor_params import MS_DOMAIN, QuantParam, eight_bit, scale_param, zero_point_param

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

    av, yv = kb.input(a), kb.output(y)
    multiplier, finite = _multiplier(node, ctx, kb, alpha, n, scalar)
    y_zero = scalar(zero_point_param(node, 8, "y_zero_point", out_dtype)) if quantized_out else None

    def finish(acc: Expr, j: Expr) -> Expr:
        if y_zero is None:
            return cast(acc, "float32") * multiplier(j)
        return requantize(acc, multiplier(j), y_zero, out_dtype, finite)

    def a_load(i: Expr, r: Expr) -> Expr:
        return av.load([r, i] if trans_a else [i, r])

    operands = _constant_operands(node, b, trans_b, bias, (m, k, n), a_dtype, a_load)
    tiles = None if operands is None else gemm_tiles(node, ctx, kb, operands, finish,
                                                     lambda i, j, value: yv.store([i, j], value))
    if tiles is not None:
        ctx.emit(kb, tiles)
        return
    a_zero = cast(scalar(zero_point_param(node, 2, "a_zero_point", a_dtype)), "int32")
    # a dot step of unsigned bytes by signed ones reads int8 A as A + 128
    unsigned = a_dtype == "int8" and ctx.tiles.int8_dot.unsigned_by_signed
    dot = _folded_weights(node, ctx, kb, b, trans_b, a_zero, unsigned) or \
        _dot_product(node, kb, b, trans_b, b_dtype, a_zero, n)
    cv = kb.input(bias).broadcast_to((m, n)) if bias is not None else None

    def body(idx: list[Expr]) -> list[Stmt]:
        i, j = idx
        acc = kb.var("acc", "int32")

        def step(r: list[Expr]) -> list[Stmt]:
            return [Assign(acc, acc + dot.term(a_load(i, r[0]), j, r[0]))]

        start = cast(cv.load(idx), "int32") if cv is not None else const(0, "int32")
        return [Declare(acc, dot.start(start, j)), *kb.loops([k], step, prefix="r"), yv.store(idx, finish(acc, j))]

    ctx.emit(kb, kb.loops([m, n], body))


def _constant_operands(node: Node, b: Tensor, trans_b: int, bias: Tensor | None, sizes: tuple[int, int, int],
                       a_dtype: str, a_load: Callable[[Expr, Expr], Expr]) -> GemmOperands | None:
    """The product's operands for the register tiles (integer_gemm.py): B, its zero points, A's
    zero point and C constants, C the same for every row; None otherwise."""
    m, k, n = sizes
    a_zero = zero_point_param(node, 2, "a_zero_point", a_dtype)
    b_zero = _per_column_param(node, 5, "b_zero_point", b.dtype.name, n)
    constant_zero = b_zero.is_constant if isinstance(b_zero, Tensor) else b_zero.tensor is None
    if not (b.is_constant and constant_zero and a_zero.tensor is None and (bias is None or bias.is_constant)):
        return None
    assert b.data is not None
    weights = (b.data if trans_b else b.data.T).astype(np.int64)
    weights = weights - (np.asarray(b_zero.data, np.int64).reshape(-1, 1) if isinstance(b_zero, Tensor)
                         else int(b_zero.value))
    start = np.zeros(n, np.int64)
    if bias is not None:
        rows = np.broadcast_to(np.asarray(bias.data, np.int64), (m, n))
        if (rows != rows[:1]).any():
            return None
        start = rows[0].copy()
    start = start - int(a_zero.value) * weights.sum(axis=1)
    return GemmOperands(m, k, a_dtype, a_load, weights, start)


def _multiplier(node: Node, ctx: LoweringContext, kb: KernelBuilder, alpha: np.float32, columns: int,
                scalar: Callable[[QuantParam], Expr]) -> tuple[Column, bool]:
    """Column j's multiplier, alpha x a_scale x b_scale[j] (/ y_scale), in that order, and whether
    every multiplier is a finite constant. Constant scales fold at compile time, in float32 as the
    run time computes them (a division per output, otherwise)."""
    a_scale = scale_param(node, 1, "a_scale")
    b_scale = _per_column_param(node, 4, "b_scale", "float32", columns)
    y_scale = scale_param(node, 7, "y_scale") if node.input(7) is not None else None
    b_values = b_scale.data if isinstance(b_scale, Tensor) and b_scale.is_constant else \
        None if isinstance(b_scale, Tensor) or b_scale.tensor is not None else np.float32(b_scale.value)
    if a_scale.tensor is None and b_values is not None and (y_scale is None or y_scale.tensor is None):
        with np.errstate(all="ignore"):
            values = (alpha * np.float32(a_scale.value)) * np.asarray(b_values, np.float32).reshape(-1)
            if y_scale is not None:
                values = values / np.float32(y_scale.value)
        finite = bool(np.isfinite(values).all())
        if uniform(values):
            return (lambda j: const(float(values[0]), "float32")), finite
        view = kb.input(ctx.constant(values.astype(np.float32), f"{node.name}_multiplier"))
        return (lambda j: view.load([j])), finite
    a_s = scalar(a_scale)
    b_s = _per_column(node, 4, "b_scale", "float32", columns, kb.input)
    y_s = scalar(y_scale) if y_scale is not None else None

    def at(j: Expr) -> Expr:
        value = const(float(alpha), "float32") * a_s * b_s(j)
        return value / y_s if y_s is not None else value

    return at, False


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
                    a_zero: Expr, unsigned: bool) -> _Dot | None:
    """A constant B, and its zero points, folded at compile time: B' = B - b_zero_point stored as
    N x K (rows contiguous, as A's are), and sum_k (A - za) B' = sum_k A B' - za colsum(B'), so
    the sum is of products of the stored operands alone, which the compilers turn into
    multiply-add instructions (x86 vpdpbusd for uint8 x int8), where B as given would take a
    stride-N load per step.
    `unsigned` (int8 A, x86) and int8 B': A is read as the unsigned byte A + 128 and 128 colsum(B')
    more taken from the start: unsigned x signed bytes are what vpdpbusd multiplies, and gcc
    then sums 64 products per instruction (signed x signed, it widens to 16 bits; `python -m
    benchmarks.int8` on MLPerf Tiny's autoencoder). None when
    B or its zero point is fed at run time."""
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

    shifted = unsigned and stored_type == np.int8
    a_shift = a_zero + const(UNSIGNED_SHIFT, "int32") if shifted else a_zero

    def term(x: Expr, j: Expr, r: Expr) -> Expr:
        return cast(unsigned_byte(x) if shifted else x, "int32") * cast(stored.load([j, r]), "int32")

    return _Dot(term, lambda start, j: start - a_shift * column_sums.load([j]))


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    return len(small) <= len(big) and all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))
