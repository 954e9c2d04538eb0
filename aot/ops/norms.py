"""LayerNormalization, InstanceNormalization and LRN.

Layer and instance normalization share one kernel shape: for each row of an (outer, inner) view,
a mean pass, a variance pass over the centred values (two passes, as the ONNX function body of
LayerNormalization computes it, rather than E[x^2] - E[x]^2 which cancels badly), then the
normalised store. LRN sums squares over a window of neighbouring channels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aot.ir.graph import Node
from aot.ir.sizes import element_count
from aot.kernel.ir import (
    INDEX,
    Assign,
    Declare,
    Expr,
    If,
    Load,
    Stmt,
    binary,
    const,
    ge,
    logical_and,
    lt,
    unary,
)
from aot.lowering.builder import KernelBuilder, View, contiguous_strides
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.lowering.tiles import TileConfig
from aot.ops.attrs import fail, normalize_axis, required_input
from aot.ops.reduce import chained_sum

# (outer index, multi-index into the normalised dims) -> (scale, bias) expressions
AffineFn = Callable[[list[Expr], list[Expr]], tuple[Expr | None, Expr | None]]


def _prod(dims: Sequence[int]) -> int:
    return element_count(dims)


def _normalize_rows(kb: KernelBuilder, x: View, y: View | None, outer: Sequence[int], inner: Sequence[int], eps: float,
                    affine: AffineFn, mean_out: View | None = None, *, inv_out: View | None = None,
                    lanes: int = 1) -> list[Stmt]:
    """y = (x - mean) / sqrt(var + eps) * scale + bias, statistics over the `inner` dims of each
    `outer` index. `x` and `y` are views of shape (*outer, *inner); without `y` only the
    statistics are stored. `lanes` > 1: the sums in vectors (_sum_lanes)."""
    dt = x.buffer.dtype
    count = const(float(_prod(inner)), dt)
    width = _prod(inner)

    def row(o: list[Expr]) -> list[Stmt]:
        mean, inv = kb.var("mean", dt), kb.var("inv", dt)
        if lanes > 1:
            base = x.index([*o, *[0] * len(inner)])

            def distance(i: Expr) -> Expr:
                d = Load(x.buffer, base + i) - mean
                return d * d

            stmts, total = chained_sum(kb, lambda i: Load(x.buffer, base + i), width, dt, lanes)
            stmts.append(Declare(mean, total / count))
            more, sq = chained_sum(kb, distance, width, dt, lanes)
            stmts += more
        else:
            total, sq = kb.var("sum", dt), kb.var("sq", dt)
            stmts = [Declare(total, const(0.0, dt))]
            stmts += kb.loops(inner, lambda r: [Assign(total, total + x.load([*o, *r]))], prefix="r")
            stmts += [Declare(mean, total / count), Declare(sq, const(0.0, dt))]

            def square(r: list[Expr]) -> list[Stmt]:
                d = kb.var("d", dt)
                return [Declare(d, x.load([*o, *r]) - mean), Assign(sq, sq + d * d)]

            stmts += kb.loops(inner, square, prefix="r")
        stmts.append(Declare(inv, const(1.0, dt) / unary("sqrt", sq / count + const(eps, dt))))

        def store(r: list[Expr]) -> list[Stmt]:
            value = (x.load([*o, *r]) - mean) * inv
            scale, bias = affine(o, r)
            if scale is not None:
                value = value * scale
            if bias is not None:
                value = value + bias
            assert y is not None
            return [y.store([*o, *r], value)]

        if y is not None:
            stmts += kb.loops(inner, store, prefix="r")
        if mean_out is not None:
            stmts.append(mean_out.store(o, mean))
        if inv_out is not None:
            stmts.append(inv_out.store(o, inv))
        return stmts

    return kb.loops(outer, row)


def _sum_lanes(tiles: TileConfig, x: View, inner: Sequence[int]) -> int:
    """Partial sums per row sum (reduce.py chained_sum): the target's float32 lanes where a row is
    contiguous and at least one vector long (one running float sum is a chain of dependent
    additions the compilers may not reorder); 1 otherwise."""
    n = _prod(inner)
    contiguous = x.strides[len(x.shape) - len(inner):] == contiguous_strides(inner)
    lanes = tiles.width_for(n) if contiguous and x.buffer.dtype == "float32" else 1
    return lanes if 1 < lanes <= n else 1


@register("LayerNormalization")
def lower_layer_norm(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "X")
    scale = required_input(node, 1, "Scale")
    bias = node.input(2)
    outputs = list(node.outputs) + [None] * (3 - len(node.outputs))
    y, mean_t, inv_t = outputs[:3]
    if x.dtype.kind != "f":
        raise fail(node, f"input X has dtype {x.dtype}; LayerNormalization is implemented for float types")
    if x.rank == 0:
        raise fail(node, "input X is a scalar; LayerNormalization needs rank >= 1")
    axis = normalize_axis(node, int(node.attr("axis", -1)), x.rank)
    eps = float(node.attr("epsilon", 1e-5))
    outer_shape, norm_shape = x.shape[:axis], x.shape[axis:]
    outer = _prod(outer_shape)
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (outer, *norm_shape))
    # Scale and B broadcast unidirectionally to the normalised dims (numpy rules, right-aligned).
    # Without Y they are not read (binding them would leave unused kernel parameters).
    try:
        sv = kb.input(scale).broadcast_to(norm_shape) if y is not None else None
        bv = kb.input(bias).broadcast_to(norm_shape) if y is not None and bias is not None else None
    except ValueError as e:
        raise fail(node, f"Scale/B do not broadcast to the normalised shape {list(norm_shape)}: {e}") from e
    yv = View(kb.output(y).buffer, (outer, *norm_shape)) if y is not None else None
    mv = View(kb.output(mean_t).buffer, (outer,)) if mean_t is not None else None
    iv = View(kb.output(inv_t).buffer, (outer,)) if inv_t is not None else None
    for stat in (mean_t, inv_t):
        if stat is not None and stat.size != outer:
            raise fail(node, f"statistics output {stat.name!r} has {stat.size} elements, expected {outer}")

    def affine(o: list[Expr], r: list[Expr]) -> tuple[Expr | None, Expr | None]:
        return (sv.load(r) if sv is not None else None), (bv.load(r) if bv is not None else None)

    ctx.emit(kb, _normalize_rows(kb, xv, yv, [outer], norm_shape, eps, affine, mv, inv_out=iv,
                                 lanes=_sum_lanes(ctx.tiles, xv, norm_shape)))


@register("InstanceNormalization")
def lower_instance_norm(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "input")
    scale = required_input(node, 1, "scale")
    bias = required_input(node, 2, "B")
    y = node.outputs[0]
    assert y is not None
    if x.dtype.kind != "f":
        raise fail(node, f"input has dtype {x.dtype}; InstanceNormalization is implemented for float types")
    if x.rank < 3:
        raise fail(node, f"input rank {x.rank}: expected N x C x D1 ...")
    batch, channels = x.shape[0], x.shape[1]
    if scale.size != channels or bias.size != channels:
        raise fail(node, f"scale {list(scale.shape)} and B {list(bias.shape)} must each have {channels} values")
    eps = float(node.attr("epsilon", 1e-5))
    plane = _prod(x.shape[2:])
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (batch, channels, plane))
    yv = View(kb.output(y).buffer, (batch, channels, plane))
    sv = View(kb.input(scale).buffer, (channels,))
    bv = View(kb.input(bias).buffer, (channels,))

    def affine(o: list[Expr], r: list[Expr]) -> tuple[Expr | None, Expr | None]:
        return sv.load([o[1]]), bv.load([o[1]])

    ctx.emit(kb, _normalize_rows(kb, xv, yv, [batch, channels], [plane], eps, affine,
                                 lanes=_sum_lanes(ctx.tiles, xv, [plane])))


@register("LRN")
def lower_lrn(node: Node, ctx: LoweringContext) -> None:
    """y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2),
    c + ceil((size-1)/2)] clipped to the tensor) ^ beta."""
    x = required_input(node, 0, "X")
    y = node.outputs[0]
    assert y is not None
    if x.dtype.kind != "f":
        raise fail(node, f"input has dtype {x.dtype}; LRN is implemented for float types")
    if x.rank < 3:
        raise fail(node, f"input rank {x.rank}: expected N x C x D1 ...")
    size = node.attr("size")
    if size is None or int(size) <= 0:
        raise fail(node, "attribute size (a positive integer) is required")
    size = int(size)
    alpha, beta, bias = float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)), float(node.attr("bias", 1.0))
    batch, channels = x.shape[0], x.shape[1]
    plane = _prod(x.shape[2:])
    before = (size - 1) // 2
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (batch, channels, plane))
    yv = View(kb.output(y).buffer, (batch, channels, plane))
    dt = y.dtype.name

    def body(idx: list[Expr]) -> list[Stmt]:
        n, c, p = idx
        sq = kb.var("sq", dt)

        def tap(r: list[Expr]) -> list[Stmt]:
            src = c + (r[0] - before)
            v = kb.var("v", dt)
            inside = logical_and(ge(src, const(0, INDEX)), lt(src, const(channels, INDEX)))
            return [If(inside, [Declare(v, xv.load([n, src, p])), Assign(sq, sq + v * v)])]

        denom = binary("pow", const(bias, dt) + const(alpha / size, dt) * sq, const(beta, dt))
        return [Declare(sq, const(0.0, dt)), *kb.loops([size], tap, prefix="r"),
                yv.store([n, c, p], xv.load([n, c, p]) / denom)]

    ctx.emit(kb, kb.loops([batch, channels, plane], body))


