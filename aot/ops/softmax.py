"""Softmax and LogSoftmax (opset < 13: over the flattened trailing dims; opset >= 13: one axis)."""

from __future__ import annotations

from aot.ir.graph import Node
from aot.ir.sizes import element_count
from aot.kernel.ir import Assign, Declare, Expr, If, Stmt, const, gt, unary
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.ops.attrs import fail, normalize_axis, required_input
from aot.ops.registry import register


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
    dt = y.dtype.name
    log = node.op_type == "LogSoftmax"

    def body(idx: list[Expr]) -> list[Stmt]:
        o, i = idx
        peak, total = kb.var("max", dt), kb.var("sum", dt)
        stmts: list[Stmt] = [Declare(peak, xv.load([o, 0, i]))]
        stmts += kb.loops([length], lambda r: [
            If(gt(xv.load([o, r[0], i]), peak), [Assign(peak, xv.load([o, r[0], i]))])], prefix="r")
        stmts.append(Declare(total, const(0.0, dt)))
        if log:
            stmts += kb.loops([length], lambda r: [
                Assign(total, total + unary("exp", xv.load([o, r[0], i]) - peak))], prefix="r")
            shift = kb.var("lse", dt)
            stmts.append(Declare(shift, peak + unary("log", total)))
            stmts += kb.loops([length], lambda r: [yv.store([o, r[0], i], xv.load([o, r[0], i]) - shift)],
                              prefix="r")
        else:
            def exp_store(r: list[Expr]) -> list[Stmt]:
                e = kb.var("e", dt)
                return [Declare(e, unary("exp", xv.load([o, r[0], i]) - peak)), yv.store([o, r[0], i], e),
                        Assign(total, total + e)]
            stmts += kb.loops([length], exp_store, prefix="r")
            inv = kb.var("inv", dt)
            stmts.append(Declare(inv, const(1.0, dt) / total))
            stmts += kb.loops([length], lambda r: [yv.store([o, r[0], i], yv.load([o, r[0], i]) * inv)],
                              prefix="r")
        return stmts

    ctx.emit(kb, kb.loops([outer, inner], body))
