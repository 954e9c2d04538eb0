"""Ops that move data without arithmetic: views (Reshape, Flatten, Squeeze, Unsqueeze) cost
nothing; Transpose and Concat copy through strided views, except a Transpose that only moves
size-1 axes (the bytes are in the same order: a view)."""

from __future__ import annotations

from aot.ir.graph import Node
from aot.ir.internal_attrs import BAND_ASSEMBLY
from aot.kernel.ir import Expr, Stmt
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, normalize_axis, required_input

# A Concat of more inputs is copied by several kernels of this many inputs each, since gcc's
# time grows with the square of a function's restrict pointers (a 1,000-input Concat's build).
MAX_INPUTS_PER_KERNEL = 64


@register("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def lower_view(node: Node, ctx: LoweringContext) -> None:
    """Same bytes, new shape: the output shares the input's storage. Shape inference has
    already resolved the target shape (including 0 and -1 in Reshape)."""
    x = required_input(node, 0, "data")
    y = node.outputs[0]
    assert y is not None
    if x.size != y.size or x.dtype != y.dtype:
        raise fail(node, f"cannot view {list(x.shape)} {x.dtype} as {list(y.shape)} {y.dtype}")
    ctx.alias(y, x)


@register("Transpose")
def lower_transpose(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "data")
    y = node.outputs[0]
    assert y is not None
    perm = list(node.attr("perm", list(range(x.rank))[::-1]))
    if sorted(perm) != list(range(x.rank)):
        raise fail(node, f"perm {perm} is not a permutation of {x.rank} axes")
    moved = [axis for axis in perm if x.shape[axis] != 1]
    if moved == sorted(moved):  # e.g. [1, C, 1, 1] -> [1, 1, 1, C] after a global pool
        ctx.alias(y, x)
        return
    kb = ctx.builder(node)
    src = kb.input(x).permute(perm)
    dst = kb.output(y)
    ctx.emit(kb, kb.loops(y.shape, lambda idx: [dst.store(idx, src.load(idx))]))


@register("Concat")
def lower_concat(node: Node, ctx: LoweringContext) -> None:
    y = node.outputs[0]
    assert y is not None
    axis = normalize_axis(node, int(node.attr("axis", 0 if node.opset < 4 else 1)), y.rank)
    parts = [t for t in node.inputs if t is not None and t.size > 0]
    apart = bool(node.attr(BAND_ASSEMBLY, 0))
    kb = ctx.builder(node)
    out = kb.output(y)
    body: list[Stmt] = []
    offset = 0
    y_root, y_offset = ctx.resolve(y)
    copied = 0
    for t in parts:
        if t.dtype != y.dtype:
            raise fail(node, f"input {t.name!r} has dtype {t.dtype}, output {y.dtype}")
        t_root, t_offset = ctx.resolve(t)
        if t_root is y_root and t_offset == y_offset + offset * out.strides[axis]:
            offset += t.shape[axis]  # written in place by its producer (see concat_in_place.py)
            continue
        src = kb.input(t)
        slot = View(out.buffer, t.shape, out.strides, offset * out.strides[axis])

        def copy(idx: list[Expr], src: View = src, slot: View = slot) -> list[Stmt]:
            return [slot.store(idx, src.load(idx))]

        body += kb.loops(t.shape, copy)
        offset += t.shape[axis]
        copied += 1
        if apart or copied % MAX_INPUTS_PER_KERNEL == 0:
            ctx.emit(kb, body)
            kb, body = ctx.builder(node), []
            out = kb.output(y)
    if offset != y.shape[axis]:
        raise fail(node, f"inputs add up to {offset} along axis {axis}, output has {y.shape[axis]}")
    ctx.emit(kb, body)


