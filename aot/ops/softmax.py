"""Softmax and LogSoftmax (opset < 13: over the flattened trailing dims; opset >= 13: one axis).

Each row is four passes over data in L1: its max, e = exp(x - max) stored in y, the sum of y,
and y scaled by 1 / sum (LogSoftmax: y = x - (max + log sum)). The max and the sum carry a value
from element to element, which gcc and LLVM vectorise only under -ffast-math (a float sum's order
is its meaning), so they are explicit vectors of the target's width; the exp and the scaling are
elementwise loops with the polynomial exp of aot/kernel/transcendentals.py, which the compilers
vectorise themselves.
- Along the contiguous axis (the last, or the flattened trailing dims): one vector accumulator of
  `lanes` partial maxima / sums runs along the row, VecReduce combines its lanes, and the
  elements after the last whole vector are added one by one. The sum's order is thus not
  sequential: lane j sums elements j, j + lanes, ..., then the lanes are combined in a halving
  tree, then the tail. onnxruntime sums in its own vector order, so neither is the sequential
  sum; both are within a few ulp of the exact one (relative error below n * 2^-24 for n terms,
  in practice ~sqrt(n) ulp), which the tests allow.
- Along an outer axis (elements `inner` apart): the vectors run over `inner` consecutive rows at
  once, lane j accumulating row j's elements in order, so each row's sum is the sequential one.
  The maxima and sums of one outer index go through a scratch tensor (2 x inner), read by the
  elementwise passes.
Targets without vectors (lanes 1, Cortex-M) and rows shorter than 4 keep the scalar form.
"""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Node
from aot.ir.sizes import element_count
from aot.kernel.ir import (
    INDEX,
    Assign,
    Buffer,
    Declare,
    Expr,
    If,
    Stmt,
    VecArith,
    VecLoad,
    VecMax,
    VecReduce,
    VecStore,
    const,
    gt,
    unary,
    vector_of,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, normalize_axis, required_input
from aot.ops.contraction.register_tiles import vector_starts
from aot.ops.scratch import scratch_tensor


@register("Softmax", "LogSoftmax")
def lower_softmax(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "input")
    y = node.outputs[0]
    assert y is not None
    if x.dtype.kind != "f":
        raise fail(node, f"dtype {x.dtype}: {node.op_type} is implemented for float types")
    legacy = node.opset < 13
    axis = normalize_axis(node, int(node.attr("axis", 1 if legacy else -1)), x.rank)
    outer = element_count(x.shape[:axis])
    if legacy:
        length, inner = element_count(x.shape[axis:]), 1
    else:
        length, inner = x.shape[axis], element_count(x.shape[axis + 1:])
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (outer, length, inner))
    yv = View(kb.output(y).buffer, (outer, length, inner))
    rows = SoftmaxRows(kb, xv, yv, y.dtype.name, node.op_type == "LogSoftmax", length)
    lanes = ctx.tiles.width_for(inner if inner > 1 else length) if y.dtype.name == "float32" else 1
    if lanes == 1:
        body = kb.loops([outer, inner], lambda idx: rows.scalar(idx[0], idx[1]))
    elif inner == 1:
        body = kb.loops([outer], lambda idx: rows.contiguous(idx[0], lanes))
    else:
        scratch = kb.output(scratch_tensor(ctx, node, (2, inner), y.dtype, "max_sum")).buffer
        body = kb.loops([outer], lambda idx: rows.strided(idx[0], inner, lanes, scratch))
    ctx.emit(kb, body)


class SoftmaxRows:
    """The statements for rows of `length` elements of x (read through xv) into y (yv)."""

    def __init__(self, kb: KernelBuilder, xv: View, yv: View, dtype: str, log: bool, length: int) -> None:
        self.kb, self.xv, self.yv, self.dt, self.log, self.length = kb, xv, yv, dtype, log, length

    def _over_row(self, body: object) -> list[Stmt]:
        return self.kb.loops([self.length], body, prefix="r")  # type: ignore[arg-type]

    def scalar(self, o: Expr, i: Expr) -> list[Stmt]:
        """One row, element by element (the order of the reference implementation)."""
        kb, xv, yv, dt = self.kb, self.xv, self.yv, self.dt
        peak, total = kb.var("max", dt), kb.var("sum", dt)
        stmts: list[Stmt] = [Declare(peak, xv.load([o, 0, i]))]
        stmts += self._over_row(lambda r: [
            If(gt(xv.load([o, r[0], i]), peak), [Assign(peak, xv.load([o, r[0], i]))])])
        stmts.append(Declare(total, const(0.0, dt)))
        if self.log:
            stmts += self._over_row(lambda r: [
                Assign(total, total + unary("exp", xv.load([o, r[0], i]) - peak))])
            return stmts + self._finish(o, i, peak, total)
        shift = self._shift(peak, stmts)

        def exp_store(r: list[Expr]) -> list[Stmt]:
            e = kb.var("e", dt)
            return [Declare(e, unary("exp", xv.load([o, r[0], i]) - shift)), yv.store([o, r[0], i], e),
                    Assign(total, total + e)]
        stmts += self._over_row(exp_store)
        return stmts + self._finish(o, i, peak, total)

    def contiguous(self, o: Expr, lanes: int) -> list[Stmt]:
        """One row of contiguous elements: vector max and sum along it (see the module docstring)."""
        kb, xv, yv, dt, n = self.kb, self.xv, self.yv, self.dt, self.length
        x_buf, y_buf = xv.buffer, yv.buffer
        base = xv.index([o, 0, 0])
        vdt = vector_of(dt, lanes)
        # The max: a ragged row's last vector overlaps the one before it, harmless for a max.
        starts = vector_starts(n, lanes)
        acc = kb.var("vmax", vdt)
        stmts: list[Stmt] = [Declare(acc, VecLoad(x_buf, base + starts[0], lanes))]
        stmts += [Assign(acc, VecMax(VecLoad(x_buf, base + s, lanes), acc)) for s in starts[1:]]
        peak = kb.var("max", dt)
        stmts.append(Declare(peak, VecReduce("max", acc)))
        shift = self._shift(peak, stmts)
        stmts += self._over_row(lambda r: [yv.store([o, r[0], 0], unary("exp", xv.load([o, r[0], 0]) - shift))])
        # The sum: whole vectors, their lanes, then the tail one by one.
        whole = n // lanes
        sums = kb.var("vsum", vdt)
        total = kb.var("sum", dt)
        stmts.append(Declare(sums, VecLoad(y_buf, base, lanes)))
        stmts += kb.loops([whole - 1], lambda k: [
            Assign(sums, VecArith("add", sums, VecLoad(y_buf, base + (k[0] + 1) * lanes, lanes)))], prefix="k")
        stmts.append(Declare(total, VecReduce("add", sums)))
        stmts += kb.loops([n - whole * lanes], lambda t: [
            Assign(total, total + yv.load([o, t[0] + whole * lanes, 0]))], prefix="t")
        return stmts + self._finish(o, 0, peak, total)

    def _shift(self, peak: Expr, stmts: list[Stmt]) -> Expr:
        """What the exponentials subtract: the row's max (a subclass may append statements)."""
        return peak

    def _finish(self, o: Expr, i: Expr | int, peak: Expr, total: Expr) -> list[Stmt]:
        """y from the row's max and sum: y * (1 / sum), or x - (max + log sum)."""
        kb, xv, yv, dt = self.kb, self.xv, self.yv, self.dt
        if self.log:
            shift = kb.var("lse", dt)
            return [Declare(shift, peak + unary("log", total))] + self._over_row(
                lambda r: [yv.store([o, r[0], i], xv.load([o, r[0], i]) - shift)])
        inv = kb.var("inv", dt)
        return [Declare(inv, const(1.0, dt) / total)] + self._over_row(
            lambda r: [yv.store([o, r[0], i], yv.load([o, r[0], i]) * inv)])

    def strided(self, o: Expr, inner: int, lanes: int, scratch: Buffer) -> list[Stmt]:
        """`inner` interleaved rows (elements `inner` apart), `lanes` rows per vector: the maxima
        and sums in scratch[0] and scratch[1], the exp and the scaling as elementwise loops."""
        kb, xv, yv, dt, n = self.kb, self.xv, self.yv, self.dt, self.length
        vdt = vector_of(dt, lanes)
        sv = View(scratch, (2, inner))
        # Whole vectors in a loop, and a ragged end's last vector overlapping the one before it
        # (which recomputes the same values).
        whole = inner // lanes

        def column(acc_name: str, buf: Buffer, view: View, combine: Callable[[Expr, Expr], Expr], slot: int,
                   start: Expr) -> list[Stmt]:
            acc = kb.var(acc_name, vdt)
            return [Declare(acc, VecLoad(buf, view.index([o, 0, start]), lanes)),
                    *kb.loops([n - 1], lambda r: [Assign(acc, combine(
                        VecLoad(buf, view.index([o, r[0] + 1, start]), lanes), acc))], prefix="r"),
                    VecStore(scratch, sv.index([slot, start]), acc)]

        def column_pass(acc_name: str, buf: Buffer, view: View, combine: Callable[[Expr, Expr], Expr],
                        slot: int) -> list[Stmt]:
            stmts = kb.loops([whole], lambda b: column(acc_name, buf, view, combine, slot, b[0] * lanes),
                             prefix="b")
            if inner % lanes:
                stmts += column(acc_name, buf, view, combine, slot, const(inner - lanes, INDEX))
            return stmts

        stmts = column_pass("vmax", self.xv.buffer, xv, VecMax, 0)
        stmts += kb.loops([n, inner], lambda ri: [yv.store([o, ri[0], ri[1]], unary(
            "exp", xv.load([o, ri[0], ri[1]]) - sv.load([0, ri[1]])))], prefix="r")
        stmts += column_pass("vsum", yv.buffer, yv, lambda v, acc: VecArith("add", acc, v), 1)
        if self.log:  # scratch[1] becomes max + log sum
            stmts += kb.loops([inner], lambda j: [sv.store([1, j[0]], sv.load([0, j[0]]) + unary(
                "log", sv.load([1, j[0]])))], prefix="j")
            return stmts + kb.loops([n, inner], lambda ri: [yv.store([o, ri[0], ri[1]], xv.load(
                [o, ri[0], ri[1]]) - sv.load([1, ri[1]]))], prefix="r")
        stmts += kb.loops([inner], lambda j: [sv.store([1, j[0]], const(1.0, dt) / sv.load([1, j[0]]))],
                          prefix="j")
        return stmts + kb.loops([n, inner], lambda ri: [yv.store([o, ri[0], ri[1]], yv.load(
            [o, ri[0], ri[1]]) * sv.load([1, ri[1]]))], prefix="r")


