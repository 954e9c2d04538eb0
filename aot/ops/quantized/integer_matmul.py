"""MatMulInteger and QLinearMatMul: numpy-style batched integer matrix products, int32
accumulation of (a - a_zero_point) * (b - b_zero_point), then QLinearMatMul requantises.

a's scale and zero point are per tensor or per row ([M], or [..., M, 1] for batches), b's per
tensor or per column ([N], or [..., 1, N]). With a constant b and b_zero_point (weights), b -
b_zero_point is stored transposed and narrow ([..., N, K]) and a_zero_point * (its column sums)
folded into the accumulator's start, so each output is a dot product of a row of a with a row of
that copy, contiguous in k (integer_terms). Otherwise each step subtracts both zero points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.ir.sizes import element_count
from aot.kernel.ir import INDEX, Assign, Declare, Expr, Stmt, const
from aot.lowering.builder import BroadcastError, KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input
from aot.ops.quantized.integer_gemm import GemmOperands, gemm_tiles
from aot.ops.quantized.integer_terms import (
    ACCUMULATOR,
    UNSIGNED_SHIFT,
    check_operand,
    check_per_tensor,
    check_scale,
    check_zero_point,
    finite_constants,
    minus,
    multiplier_expr,
    narrow_weights,
    output_multiplier,
    requantize,
    scalar,
    uniform,
    unsigned_byte,
    widened,
    wrap_int32,
)
from aot.ops.scratch import scratch_tensor

Side = Callable[[list[Expr], Expr], Expr]  # (batch index, row of a or column of b) -> a value
Finish = Callable[[Expr, list[Expr], Expr, Expr], Expr]  # (acc, batch index, i, j) -> the output
At = Callable[[list[Expr], Expr, Expr], Expr]  # (batch index, two indices) -> a value


@dataclass(frozen=True)
class Product:
    """The shapes of a validated integer MatMul: a [*batch, m, k] times b [*batch, k, n], the
    operands as stored (a 1-D a is a row, a 1-D b a column, dropped from the output)."""

    a: Tensor
    b: Tensor
    y: Tensor
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    batch: tuple[int, ...]

    @property
    def m(self) -> int:
        return self.a_shape[-2]

    @property
    def k(self) -> int:
        return self.a_shape[-1]

    @property
    def n(self) -> int:
        return self.b_shape[-1]

    def a_side(self) -> tuple[int, ...]:
        return (*self.batch, self.m, 1)

    def b_side(self) -> tuple[int, ...]:
        return (*self.batch, 1, self.n)

    def side_shape(self, t: Tensor, of_a: bool) -> tuple[int, ...]:
        """A per-row (of a) or per-column (of b) parameter's shape, aligned to a_side / b_side."""
        if t.rank == 1 and t.size > 1:
            return (t.size, 1) if of_a else (1, t.size)
        return t.shape


@register("MatMulInteger")
def lower_matmul_integer(node: Node, ctx: LoweringContext) -> None:
    p = _product(node, 0, 1)
    if p.y.dtype != np.int32:
        raise fail(node, f"output {p.y.name!r} has dtype {p.y.dtype}; MatMulInteger gives int32")
    _lower(node, ctx, p, node.input(2), node.input(3), lambda kb: lambda acc, bi, i, j: acc, True)


@register("QLinearMatMul")
def lower_qlinear_matmul(node: Node, ctx: LoweringContext) -> None:
    p = _product(node, 0, 3)
    scales = [required_input(node, i, what) for i, what in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale"))]
    for t, what in zip(scales, ("a_scale", "b_scale", "y_scale")):
        check_scale(node, t, what)
    y_zero_point = node.input(7)
    check_operand(node, p.y, "output")
    check_zero_point(node, y_zero_point, p.y, "y_zero_point")
    check_per_tensor(node, scales[2], "y_scale")
    check_per_tensor(node, y_zero_point, "y_zero_point")
    dtype = p.y.dtype.name

    def finish(kb: KernelBuilder) -> Finish:
        multiplier = _multiplier(node, ctx, kb, p, *scales)
        zero_point = scalar(kb, y_zero_point, 0, dtype)
        finite = finite_constants(*scales)
        return lambda acc, bi, i, j: requantize(acc, multiplier(bi, i, j), zero_point, dtype, finite)

    _lower(node, ctx, p, node.input(2), node.input(5), finish, scales[0].size == 1)


def _product(node: Node, a_index: int, b_index: int) -> Product:
    a, b = required_input(node, a_index, "a"), required_input(node, b_index, "b")
    y = node.outputs[0]
    assert y is not None
    check_operand(node, a, "input a")
    check_operand(node, b, "input b")
    if a.rank == 0 or b.rank == 0:
        raise fail(node, "inputs must have rank >= 1")
    a_shape = (1, *a.shape) if a.rank == 1 else a.shape
    b_shape = (*b.shape, 1) if b.rank == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise fail(node, f"a {list(a.shape)} and b {list(b.shape)}: inner dimensions differ")
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    except ValueError:
        raise fail(node, f"batch dimensions {list(a.shape[:-2])} and {list(b.shape[:-2])} do not broadcast") from None
    full = (*batch, a_shape[-2], b_shape[-1])
    if y.size != element_count(full):
        raise fail(node, f"output shape {list(y.shape)} does not match {list(full)}")
    return Product(a, b, y, tuple(a_shape), tuple(b_shape), batch)


def _side(node: Node, kb: KernelBuilder, p: Product, t: Tensor | None, of_a: bool, default: float | int,
          dtype: str, what: str) -> Side:
    """A scale or zero point of a (per row) or b (per column) as a value at (batch, row or column)."""
    if t is None or t.size == 1 or (t.is_constant and uniform(np.asarray(t.data))):
        value = scalar(kb, t, default, dtype)
        return lambda bi, r: value
    target = p.a_side() if of_a else p.b_side()
    try:
        view = View(kb.input(t).buffer, p.side_shape(t, of_a)).broadcast_to(target)
    except BroadcastError:
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; per-{'row' if of_a else 'column'} "
                         f"values need a shape that broadcasts to {list(target)}") from None
    return lambda bi, r: view.load([*bi, r, 0] if of_a else [*bi, 0, r])


def _multiplier(node: Node, ctx: LoweringContext, kb: KernelBuilder, p: Product, a_scale: Tensor, b_scale: Tensor,
                y_scale: Tensor) -> At:
    """a_scale * b_scale / y_scale at (batch, i, j), folded when the scales are constants."""
    if all(t.is_constant for t in (a_scale, b_scale, y_scale)):
        sides = [np.asarray(t.data).reshape(p.side_shape(t, of_a)) for t, of_a in ((a_scale, True), (b_scale, False))]
        try:
            values = output_multiplier(sides[0], sides[1], np.asarray(y_scale.data).reshape(-1)[0])
            view = View(kb.input(ctx.constant(values, f"{node.name}_multiplier")).buffer, values.shape) \
                .broadcast_to((*p.batch, p.m, p.n)) if not uniform(values) else None
        except (ValueError, BroadcastError):
            raise fail(node, f"scales {list(a_scale.shape)} and {list(b_scale.shape)} are not per row of a "
                             "and per column of b") from None
        if view is None:
            return lambda bi, i, j: const(float(values.reshape(-1)[0]), "float32")
        return lambda bi, i, j: view.load([*bi, i, j])
    a_s = _side(node, kb, p, a_scale, True, 1.0, "float32", "a_scale")
    b_s = _side(node, kb, p, b_scale, False, 1.0, "float32", "b_scale")
    y_s = scalar(kb, y_scale, 1.0, "float32")
    return lambda bi, i, j: multiplier_expr(a_s(bi, i), b_s(bi, j), y_s)


def _lower(node: Node, ctx: LoweringContext, p: Product, a_zero_point: Tensor | None, b_zero_point: Tensor | None,
           finish_for: Callable[[KernelBuilder], Finish], row_invariant: bool) -> None:
    """`row_invariant`: the finish reads nothing per row of a (no per-row scale)."""
    check_zero_point(node, a_zero_point, p.a, "a_zero_point")
    check_zero_point(node, b_zero_point, p.b, "b_zero_point")
    kb = ctx.builder(node)
    yv = View(kb.output(p.y).buffer, (*p.batch, p.m, p.n))
    av = View(kb.input(p.a).buffer, p.a_shape).broadcast_to((*p.batch, p.m, p.k))
    a_zp = _side(node, kb, p, a_zero_point, True, 0, p.a.dtype.name, "a_zero_point")
    finish = finish_for(kb)
    tiles = _tiles(node, ctx, kb, p, a_zero_point, b_zero_point, finish, row_invariant)
    if tiles is not None:
        ctx.emit(kb, tiles)
        return
    stmts: list[Stmt] = []
    if p.b.is_constant and (b_zero_point is None or b_zero_point.is_constant):
        shift = UNSIGNED_SHIFT if p.a.dtype == np.int8 else 0
        if shift:  # a copy of a + 128 as uint8, and a_zero_point + 128 (integer_terms.unsigned_byte)
            stmts, av = _unsigned_copy(node, ctx, kb, p)
        start, b_at = _packed_b(node, ctx, kb, p, b_zero_point, a_zero_point, a_zp, shift)

        def term(bi: list[Expr], i: Expr, j: Expr, r: Expr) -> Expr:
            return widened(av.load([*bi, i, r])) * widened(b_at(bi, j, r))
    else:
        bv = View(kb.input(p.b).buffer, p.b_shape).broadcast_to((*p.batch, p.k, p.n))
        b_zp = _side(node, kb, p, b_zero_point, False, 0, p.b.dtype.name, "b_zero_point")

        def start(bi: list[Expr], i: Expr, j: Expr) -> Expr:
            return const(0, ACCUMULATOR)

        def term(bi: list[Expr], i: Expr, j: Expr, r: Expr) -> Expr:
            return minus(av.load([*bi, i, r]), a_zp(bi, i)) * minus(bv.load([*bi, r, j]), b_zp(bi, j))

    def body(idx: list[Expr]) -> list[Stmt]:
        *bi, i, j = idx
        acc = kb.var("acc", ACCUMULATOR)
        steps = kb.loops([p.k], lambda r: [Assign(acc, acc + term(bi, i, j, r[0]))], prefix="r")
        return [Declare(acc, start(bi, i, j)), *steps, yv.store(idx, finish(acc, bi, i, j))]

    ctx.emit(kb, stmts + kb.loops([*p.batch, p.m, p.n], body))


def _tiles(node: Node, ctx: LoweringContext, kb: KernelBuilder, p: Product, a_zero_point: Tensor | None,
           b_zero_point: Tensor | None, finish: Finish, row_invariant: bool) -> list[Stmt] | None:
    """The product as integer_gemm's register tiles, the batches' rows one after another: where b
    is a constant matrix with constant zero points, a's zero point one constant, a not broadcast
    over the batch and nothing per row; None otherwise."""
    a_zero = None if a_zero_point is None else np.asarray(a_zero_point.data).reshape(-1) \
        if a_zero_point.is_constant else None
    if not (row_invariant and len(p.b_shape) == 2 and p.b.is_constant and tuple(p.a_shape[:-2]) == p.batch
            and (b_zero_point is None or b_zero_point.is_constant)
            and (a_zero_point is None or (a_zero is not None and uniform(a_zero)))):
        return None
    assert p.b.data is not None
    b = np.asarray(p.b.data, np.int64).reshape(p.b_shape)
    if b_zero_point is not None:
        assert b_zero_point.data is not None
        zero = np.asarray(b_zero_point.data, np.int64).reshape(-1)
        if zero.size not in (1, p.n):
            return None
        b = b - zero.reshape(1, -1)
    weights = np.ascontiguousarray(b.T)
    start = -(0 if a_zero is None else int(a_zero[0])) * weights.sum(axis=1)
    rows = int(np.prod(p.batch, dtype=np.int64)) * p.m
    a = View(kb.input(p.a).buffer, (rows, p.k))
    y = View(kb.output(p.y).buffer, (rows, p.n))
    origin = [const(0, INDEX)] * len(p.batch)
    operands = GemmOperands(rows, p.k, p.a.dtype.name, lambda i, k: a.load([i, k]), weights, start)
    return gemm_tiles(node, ctx, kb, operands, lambda acc, j: finish(acc, origin, const(0, INDEX), j),
                      lambda i, j, value: y.store([i, j], value))


def _unsigned_copy(node: Node, ctx: LoweringContext, kb: KernelBuilder, p: Product) -> tuple[list[Stmt], View]:
    """Statements copying int8 a as uint8 a + 128 into a scratch tensor, and the copy's view."""
    src = kb.input(p.a)
    copy = kb.output(scratch_tensor(ctx, node, p.a_shape, np.uint8, "unsigned"))
    stmts = kb.loops([p.a.size], lambda i: [copy.store_flat(i[0], unsigned_byte(src.load_flat(i[0])))], prefix="s")
    return stmts, View(copy.buffer, p.a_shape).broadcast_to((*p.batch, p.m, p.k))


def _packed_b(node: Node, ctx: LoweringContext, kb: KernelBuilder, p: Product, b_zero_point: Tensor | None,
              a_zero_point: Tensor | None, a_zp: Side, shift: int) -> tuple[At, At]:
    """b - b_zero_point stored [..., n, k] (rows contiguous in k): the accumulator's start at
    (batch, i, j), -(a_zero_point + shift) * (that column's sum), and the element (j, k) of that
    copy. `shift`: what was added to a (and so to its zero point) to read it unsigned."""
    assert p.b.data is not None
    b = np.asarray(p.b.data, np.int64).reshape(p.b_shape)
    if b_zero_point is not None:
        assert b_zero_point.data is not None
        try:
            b = b - np.asarray(b_zero_point.data, np.int64).reshape(p.side_shape(b_zero_point, False))
        except ValueError:
            raise fail(node, f"b_zero_point {b_zero_point.name!r} has shape {list(b_zero_point.shape)}; "
                             "per-column values need one per column of b") from None
    packed = narrow_weights(np.ascontiguousarray(np.swapaxes(b, -1, -2)))
    bt = View(kb.input(ctx.constant(packed, p.b.name)).buffer, packed.shape).broadcast_to((*p.batch, p.n, p.k))
    sums = b.sum(axis=-2)  # [..., n]
    if a_zero_point is None or (a_zero_point.is_constant and uniform(np.asarray(a_zero_point.data))):
        zero = shift + (0 if a_zero_point is None else int(np.asarray(a_zero_point.data).reshape(-1)[0]))
        values = wrap_int32(-zero * sums)
        if uniform(values):
            return (lambda bi, i, j: const(int(values.reshape(-1)[0]), ACCUMULATOR)), \
                lambda bi, j, r: bt.load([*bi, j, r])
        folded = View(kb.input(ctx.constant(values, f"{node.name}_bias")).buffer, values.shape) \
            .broadcast_to((*p.batch, p.n))
        return (lambda bi, i, j: folded.load([*bi, j])), lambda bi, j, r: bt.load([*bi, j, r])
    column_sums = View(kb.input(ctx.constant(wrap_int32(sums), f"{node.name}_column_sums")).buffer, sums.shape) \
        .broadcast_to((*p.batch, p.n))
    return (lambda bi, i, j: -((widened(a_zp(bi, i)) + const(shift, ACCUMULATOR)) * column_sums.load([*bi, j]))), \
        lambda bi, j, r: bt.load([*bi, j, r])
