"""Ops that copy elements to new positions without arithmetic on them: Expand, Tile, Pad,
DepthToSpace, SpaceToDepth. Each is a loop over the output reading the input through a view
(broadcast, repeated or block-permuted strides) or through a per-axis coordinate map (Pad)."""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Const, Expr, Stmt, binary, const, ge, logical_and, lt, maximum, minimum, select
from aot.lowering.builder import KernelBuilder, View, contiguous_strides
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import constant_ints, fail, normalize_axis, required_input


def _first_output(node: Node) -> Tensor:
    y = node.outputs[0] if node.outputs else None
    assert y is not None  # pruning removes nodes whose outputs are all unread
    return y


def _same_dtype(node: Node, x: Tensor, y: Tensor) -> None:
    if x.dtype != y.dtype:
        raise fail(node, f"output dtype {y.dtype} differs from the input's {x.dtype}")


@register("Expand", constant_inputs=(1,))
def lower_expand(node: Node, ctx: LoweringContext) -> None:
    """Broadcast to the output's static shape. Like Reshape's, the shape input only restates
    that shape: it is checked when known at compile time and not read at run time otherwise."""
    x = required_input(node, 0, "input")
    y = _first_output(node)
    shape_tensor = required_input(node, 1, "shape")
    _same_dtype(node, x, y)
    shape = (constant_ints(node, 1, "shape") or []) if shape_tensor.is_constant else list(y.shape)
    try:
        full = tuple(np.broadcast_shapes(x.shape, tuple(shape)))
    except ValueError:
        raise fail(node, f"input {list(x.shape)} does not broadcast with shape {shape}") from None
    if full != y.shape:
        raise fail(node, f"output {list(y.shape)} differs from the broadcast shape {list(full)}")
    if y.shape == x.shape:
        ctx.alias(y, x)
        return
    if y.size == 0:
        return
    kb = ctx.builder(node)
    src = kb.input(x).broadcast_to(y.shape)
    dst = kb.output(y)
    ctx.emit(kb, kb.loops(y.shape, lambda idx: [dst.store(idx, src.load(idx))]))


@register("Tile", constant_inputs=(1,))
def lower_tile(node: Node, ctx: LoweringContext) -> None:
    """Output dim d is repeats[d] copies of input dim d: seen as (copy, position) pairs, the
    output is a plain strided view and the input one with stride 0 over the copies. The repeats
    follow from the static shapes; a constant repeats input is checked against them."""
    x = required_input(node, 0, "input")
    y = _first_output(node)
    repeats_tensor = required_input(node, 1, "repeats")
    _same_dtype(node, x, y)
    if x.rank != y.rank:
        raise fail(node, f"output rank {y.rank} differs from the input's {x.rank}")
    if repeats_tensor.is_constant:
        repeats = constant_ints(node, 1, "repeats") or []
    else:  # (an empty input dim gives an empty output whatever the count: take 0)
        repeats = [o // d if d else 0 for o, d in zip(y.shape, x.shape)]
    if len(repeats) != x.rank or any(r < 0 for r in repeats):
        raise fail(node, f"repeats {repeats} should be {x.rank} non-negative counts")
    if y.shape != tuple(d * r for d, r in zip(x.shape, repeats)):
        raise fail(node, f"output {list(y.shape)} differs from tiling {list(x.shape)} by {repeats}")
    if y.shape == x.shape:
        ctx.alias(y, x)
        return
    if y.size == 0:
        return
    kb = ctx.builder(node)
    src_view, dst_view = kb.input(x), kb.output(y)
    pairs = [e for d, r in zip(x.shape, repeats) for e in (r, d)]
    src = View(src_view.buffer, pairs, [e for s in src_view.strides for e in (0, s)])
    dst = View(dst_view.buffer, pairs, [e for d, s in zip(x.shape, dst_view.strides) for e in (d * s, s)])
    ctx.emit(kb, kb.loops(pairs, lambda idx: [dst.store(idx, src.load(idx))]))


# ---------------------------------------------------------------------------------------------
# Pad

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_amounts(node: Node, rank: int) -> tuple[list[int], list[int]]:
    """Begin and end pads for every axis (negative values crop)."""
    if node.opset < 11:
        pads = list(node.attr("pads", node.attr("paddings", [])))
        axes: list[int] | None = None
    else:
        pads = constant_ints(node, 1, "pads")
        if pads is None:
            raise fail(node, "missing required input 1 (pads)")
        axes = constant_ints(node, 3, "axes") if node.opset >= 18 else None
    if axes is None:
        axes = list(range(rank))
    axes = [normalize_axis(node, a, rank) for a in axes]
    if len(set(axes)) != len(axes):
        raise fail(node, f"axes {axes} name an axis twice")
    if len(pads) != 2 * len(axes):
        raise fail(node, f"pads has {len(pads)} values, expected {2 * len(axes)} (begin and end per axis)")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = int(pads[i]), int(pads[len(axes) + i])
    return begin, end


def _positive_mod(c: Expr, n: int) -> Expr:
    """c mod n in [0, n) for any sign of c (C's % truncates toward zero)."""
    return binary("mod", binary("mod", c, n) + n, n)


@register("Pad", constant_inputs=(1, 3))
def lower_pad(node: Node, ctx: LoweringContext) -> None:
    """Each axis is first cropped by its negative pads, then padded by its positive ones; an
    output coordinate maps back into the cropped axis by the mode: constant (outside reads the
    value), edge (clamp), reflect (mirror without repeating the edge, as numpy's 'reflect'),
    wrap (modulo)."""
    x = required_input(node, 0, "data")
    y = _first_output(node)
    _same_dtype(node, x, y)
    mode = str(node.attr("mode", "constant"))
    if mode not in _PAD_MODES:
        raise fail(node, f"unknown mode {mode!r} (expected one of {', '.join(_PAD_MODES)})")
    begin, end = _pad_amounts(node, x.rank)
    crop_lo = [max(-b, 0) for b in begin]
    lengths = [n - max(-b, 0) - max(-e, 0) for n, b, e in zip(x.shape, begin, end)]
    pad_lo, pad_hi = [max(b, 0) for b in begin], [max(e, 0) for e in end]
    if any(n < 0 for n in lengths):
        raise fail(node, f"pads {begin + end} crop more than the input {list(x.shape)} has")
    expected = tuple(n + lo + hi for n, lo, hi in zip(lengths, pad_lo, pad_hi))
    if y.shape != expected:
        raise fail(node, f"output {list(y.shape)} differs from the padded shape {list(expected)}")
    if not any(begin) and not any(end):
        ctx.alias(y, x)  # nothing added or removed: same bytes
        return
    if y.size == 0:
        return
    if mode != "constant" and any(n == 0 and (lo or hi) for n, lo, hi in zip(lengths, pad_lo, pad_hi)):
        raise fail(node, f"mode {mode!r} cannot pad an empty axis")
    if mode == "reflect":
        _check_reflect_pads(node, lengths, pad_lo, pad_hi)
    kb = ctx.builder(node)
    dt = y.dtype.name
    fill: Expr = const(0, dt)
    # Bound only when some element is filled: an unused kernel parameter would not compile.
    if mode == "constant" and (any(pad_lo) or any(pad_hi) or x.size == 0):
        fill = _pad_value(node, kb, dt)
    xv = kb.input(x) if x.size > 0 else None
    yv = kb.output(y)

    def body(idx: list[Expr]) -> list[Stmt]:
        src: list[Expr] = []
        inside: Expr = const(True, "bool")
        for o, lo, hi, n, crop in zip(idx, pad_lo, pad_hi, lengths, crop_lo):
            c = o - lo  # coordinate in the cropped axis
            if mode == "constant":
                if lo > 0:
                    inside = logical_and(inside, ge(c, const(0, INDEX)))
                if hi > 0:
                    inside = logical_and(inside, lt(c, const(n, INDEX)))
            elif lo > 0 or hi > 0:
                c = _pad_coordinate(mode, c, n)
            src.append(c + crop)
        if xv is None:
            return [yv.store(idx, fill)]
        value = xv.load(src)
        if not (isinstance(inside, Const) and inside.value is True):
            value = select(inside, value, fill)
        return [yv.store(idx, value)]

    ctx.emit(kb, kb.loops(y.shape, body))


def _check_reflect_pads(node: Node, lengths: list[int], pad_lo: list[int], pad_hi: list[int]) -> None:
    """A reflection does not repeat the edge, so it can add at most n - 1 elements on each side
    of an axis of n: ONNX leaves larger pads undefined and onnxruntime refuses them."""
    for axis, (n, lo, hi) in enumerate(zip(lengths, pad_lo, pad_hi)):
        widest = max(lo, hi)
        if widest > n - 1:
            raise fail(node, f"reflect pads of {widest} on axis {axis} of {n} elements: reflect mode "
                             f"pads at most {n - 1} (the axis length less one) on each side")


def _pad_coordinate(mode: str, c: Expr, n: int) -> Expr:
    if mode == "edge":
        return minimum(maximum(c, const(0, INDEX)), const(n - 1, INDEX))
    if mode == "wrap":
        return _positive_mod(c, n)
    # reflect: period 2(n - 1), mirrored in its second half (pads are at most n - 1, n >= 2).
    period = 2 * (n - 1)
    m = _positive_mod(c, period)
    return select(lt(m, const(n, INDEX)), m, const(period, INDEX) - m)


def _pad_value(node: Node, kb: KernelBuilder, dt: str) -> Expr:
    """The constant-mode fill value: the `value` attribute before opset 11, then the optional
    constant_value input -- a literal when known at compile time, else loaded at run time."""
    if node.opset < 11:
        return const(float(node.attr("value", 0.0)), dt)
    t = node.input(2)
    if t is None:
        return const(0, dt)
    if t.size != 1:
        raise fail(node, f"constant_value {t.name!r} has shape {list(t.shape)}; it must be a scalar")
    if t.dtype.name != dt:
        raise fail(node, f"constant_value {t.name!r} has dtype {t.dtype}, data {dt}")
    if t.is_constant:
        assert t.data is not None
        return const(t.data.reshape(-1)[0].item(), dt)
    return kb.input(t).load_flat(const(0, INDEX))


# ---------------------------------------------------------------------------------------------
# DepthToSpace / SpaceToDepth: block permutations as 6-d strided views


def _blocks(node: Node, x: Tensor, y: Tensor) -> int:
    if x.rank != 4:
        raise fail(node, f"input rank {x.rank}: expected N x C x H x W")
    _same_dtype(node, x, y)
    b = int(node.attr("blocksize", 0))
    if b <= 0:
        raise fail(node, f"blocksize {b} must be positive")
    return b


@register("DepthToSpace")
def lower_depth_to_space(node: Node, ctx: LoweringContext) -> None:
    """y[n, c, h*b + i, w*b + j] = x[n, depth(c, i, j), h, w] with depth = (i*b + j)*C' + c (DCR,
    the default) or c*b*b + i*b + j (CRD)."""
    x = required_input(node, 0, "input")
    y = _first_output(node)
    b = _blocks(node, x, y)
    n, c, h, w = x.shape
    if c % (b * b):
        raise fail(node, f"{c} channels are not divisible by blocksize^2 = {b * b}")
    cc = c // (b * b)
    if y.shape != (n, cc, h * b, w * b):
        raise fail(node, f"output {list(y.shape)} should be {[n, cc, h * b, w * b]}")
    mode = str(node.attr("mode", "DCR"))
    if mode not in ("DCR", "CRD"):
        raise fail(node, f"unknown mode {mode!r} (expected DCR or CRD)")
    if y.size == 0:
        return
    sn, sc, sh, sw = contiguous_strides(x.shape)
    plane = sc  # one channel
    if mode == "DCR":
        c_stride, i_stride, j_stride = plane, b * cc * plane, cc * plane
    else:
        c_stride, i_stride, j_stride = b * b * plane, b * plane, plane
    kb = ctx.builder(node)
    src = View(kb.input(x).buffer, (n, cc, h, b, w, b), (sn, c_stride, sh, i_stride, sw, j_stride))
    dst = View(kb.output(y).buffer, (n, cc, h, b, w, b))
    ctx.emit(kb, kb.loops(dst.shape, lambda idx: [dst.store(idx, src.load(idx))]))


@register("SpaceToDepth")
def lower_space_to_depth(node: Node, ctx: LoweringContext) -> None:
    """y[n, depth(c, i, j), h, w] = x[n, c, h*b + i, w*b + j] with depth = (i*b + j)*C + c (DCR,
    the default) or c*b*b + i*b + j (CRD, opset 28)."""
    x = required_input(node, 0, "input")
    y = _first_output(node)
    b = _blocks(node, x, y)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise fail(node, f"spatial size {h} x {w} is not divisible by blocksize {b}")
    if y.shape != (n, c * b * b, h // b, w // b):
        raise fail(node, f"output {list(y.shape)} should be {[n, c * b * b, h // b, w // b]}")
    mode = str(node.attr("mode", "DCR"))
    if mode not in ("DCR", "CRD"):
        raise fail(node, f"unknown mode {mode!r} (expected DCR or CRD)")
    if y.size == 0:
        return
    sn, sc, sh, sw = contiguous_strides(x.shape)
    kb = ctx.builder(node)
    # The output seen as 6-d in its own channel order, the input read through matching strides.
    if mode == "DCR":
        shape, strides = (n, b, b, c, h // b, w // b), (sn, sh, sw, sc, b * sh, b * sw)
    else:
        shape, strides = (n, c, b, b, h // b, w // b), (sn, sc, sh, sw, b * sh, b * sw)
    src = View(kb.input(x).buffer, shape, strides)
    dst = View(kb.output(y).buffer, shape)
    ctx.emit(kb, kb.loops(dst.shape, lambda idx: [dst.store(idx, src.load(idx))]))
