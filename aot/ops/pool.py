"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node
from aot.kernel.ir import (
    INDEX,
    Assign,
    Const,
    Declare,
    Expr,
    If,
    Load,
    Splat,
    Stmt,
    Store,
    Var,
    VecArith,
    VecLoad,
    VecMax,
    VecStore,
    cast,
    const,
    ge,
    gt,
    logical_and,
    logical_or,
    lt,
    maximum,
    minimum,
    select,
    unary,
    vector_of,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, mark_outer, pays, slot_blocks
from aot.ops.attrs import fail, required_input, spatial_padding, window_output_size, window_steps
from aot.ops.contraction.register_tiles import vector_starts
from aot.ops.reduce import chained_sum
from aot.ops.registry import register
from aot.ops.scratch import scratch_tensor


def _window_params(node: Node, in_spatial: tuple[int, ...]) -> tuple[list[int], ...]:
    """kernel_shape, strides, dilations, begin pads and end pads, one entry per spatial dim."""
    nd = len(in_spatial)
    kernel = [int(k) for k in node.attr("kernel_shape", [])]
    if len(kernel) != nd:
        raise fail(node, f"kernel_shape {kernel} does not match {nd} spatial dimensions")
    if any(not 1 <= k < 2**31 for k in kernel):
        raise fail(node, f"kernel_shape {kernel} must be whole numbers from 1 to 2^31-1")
    strides, dilations = window_steps(node, in_spatial)
    pad_begin, pad_end = spatial_padding(node, in_spatial, kernel, strides, dilations)
    return kernel, strides, dilations, pad_begin, pad_end


def _inside(pos: list[Expr], limits_lo: list[int], limits_hi: list[int], check_lo: list[bool],
            check_hi: list[bool]) -> Expr:
    cond: Expr = const(True, "bool")
    for p, lo, hi, cl, ch in zip(pos, limits_lo, limits_hi, check_lo, check_hi):
        if cl:
            cond = logical_and(cond, ge(p, const(lo, INDEX)))
        if ch:
            cond = logical_and(cond, lt(p, const(hi, INDEX)))
    return cond


def _guard(cond: Expr, stmts: list[Stmt]) -> list[Stmt]:
    return stmts if isinstance(cond, Const) and cond.value is True else [If(cond, stmts)]


def _windows_may_overhang(out_spatial, in_spatial, kernel, strides, dilations, pad_begin) -> list[bool]:  # noqa: ANN001
    """Whether the last window in each dim reaches past the input end (padding or ceil_mode)."""
    return [
        (o - 1) * s - pb + (k - 1) * d >= size
        for o, size, k, s, d, pb in zip(out_spatial, in_spatial, kernel, strides, dilations, pad_begin)
    ]


@register("MaxPool", "AveragePool")
def lower_pool(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "X")
    y = node.outputs[0]
    assert y is not None
    if x.dtype.kind != "f":
        raise fail(node, f"dtype {x.dtype}: {node.op_type} is implemented for float types")
    if x.rank < 3:
        raise fail(node, f"input rank {x.rank}: expected N x C x spatial...")
    batch, channels, *in_spatial_list = x.shape
    in_spatial = tuple(in_spatial_list)
    kernel, strides, dilations, pad_begin, pad_end = _window_params(node, in_spatial)
    out_spatial = y.shape[2:]
    expected = window_output_size(node, in_spatial, kernel, strides, dilations, pad_begin, pad_end)
    if tuple(out_spatial) != expected or min(expected, default=1) < 1:
        # A declared shape that the window does not give (onnx cannot size a window wider than
        # its padded input and keeps the declared one): the loops would read outside the input.
        raise fail(node, f"output spatial shape {list(out_spatial)} differs from the {list(expected)} its window "
                         f"{kernel} (strides {strides}, pads {pad_begin + pad_end}) gives")
    overhang = _windows_may_overhang(out_spatial, in_spatial, kernel, strides, dilations, pad_begin)
    is_max = node.op_type == "MaxPool"
    indices = node.outputs[1] if is_max and len(node.outputs) > 1 else None
    column_major = int(node.attr("storage_order", 0)) == 1
    include_pad = int(node.attr("count_include_pad", 0)) == 1
    kb = ctx.builder(node)
    xv, yv = kb.input(x), kb.output(y)
    iv = kb.output(indices) if indices is not None else None
    dt = y.dtype.name
    # Output rows of at least 8: narrower ones (MNIST's 3x3/3 pool to 4 x 4) are faster one
    # window at a time than through the row sums and phase copies (MNIST 18.8 -> 18.2 us).
    if (iv is None and x.rank == 4 and dt == "float32" and _taps(kernel) <= MAX_UNROLLED_TAPS
            and ctx.tiles.width_for(out_spatial[1]) > 1 and out_spatial[1] >= 8):
        ctx.emit(kb, _vector_pool(node, ctx, kb, x, yv, kernel, strides, dilations, pad_begin, pad_end, out_spatial,
                                  is_max, include_pad))
        return
    # Every output window on its own: the outermost loop may be split over threads.
    parallel = pays(ctx, y.size * _taps(kernel))
    if is_max and iv is None and all(d == 1 for d in dilations) and _taps(kernel) <= MAX_UNROLLED_TAPS:
        stmts = kb.loops([batch, channels, *out_spatial],
                         lambda idx: _branchless_max(kb, xv, yv, idx, kernel, strides, pad_begin, in_spatial,
                                                     overhang, dt))
        ctx.emit(kb, mark_outer(stmts) if parallel else stmts)
        return

    if not is_max and not any(pad_begin) and not any(pad_end) and tuple(kernel) == in_spatial:
        # One window over the whole plane: a global average.
        plane = View(xv.buffer, (batch, channels, _taps(kernel)))
        out = View(yv.buffer, (batch, channels))

        def whole(idx: list[Expr]) -> list[Stmt]:
            stmts, total = chained_sum(kb, lambda r: plane.load([idx[0], idx[1], r]), _taps(kernel), dt,
                                       ctx.tiles.lanes)
            return [*stmts, out.store(idx, total / const(float(_taps(kernel)), dt))]

        ctx.emit(kb, kb.loops([batch, channels], whole))
        return

    windows = _Windows(kb, xv, yv, iv, indices.dtype.name if indices is not None else "", x.shape, kernel, strides,
                       dilations, pad_begin, pad_end, overhang, is_max, column_major, include_pad, dt)
    stmts = kb.loops([batch, channels, *out_spatial], windows.body)
    ctx.emit(kb, mark_outer(stmts) if parallel else stmts)


@dataclass(frozen=True)
class _Windows:
    """Every output window of a pool on its own, each tap bounds-checked where it may fall in
    the padding: MaxPool with its indices, dilated windows, AveragePool's counts."""

    kb: KernelBuilder
    xv: View
    yv: View
    iv: View | None  # MaxPool's indices output
    index_dtype: str
    x_shape: tuple[int, ...]
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pad_begin: list[int]
    pad_end: list[int]
    overhang: list[bool]
    is_max: bool
    column_major: bool
    include_pad: bool
    dt: str

    @property
    def in_spatial(self) -> tuple[int, ...]:
        return self.x_shape[2:]

    @property
    def needs_count(self) -> bool:
        """Whether the average divides by a count of taps (windows that never reach the padding,
        or past the end, all hold the same count)."""
        padded = any(self.pad_begin) or any(self.pad_end) or any(self.overhang)
        return not self.is_max and padded and not (self.include_pad and not any(self.overhang))

    def body(self, idx: list[Expr]) -> list[Stmt]:
        n, c, *o = idx
        kb, dt = self.kb, self.dt
        acc, count, best = kb.var("acc", dt), kb.var("cnt", dt), kb.var("arg", INDEX)
        stmts: list[Stmt] = [Declare(acc, const(float("-inf") if self.is_max else 0.0, dt))]
        if self.iv is not None:
            stmts.append(Declare(best, const(0, INDEX)))
        if self.needs_count:
            stmts.append(Declare(count, const(0.0, dt)))
        stmts += kb.loops(self.kernel, lambda k: self.tap(n, c, o, k, acc, count, best), prefix="r")
        if self.is_max:
            result: Expr = acc
        elif self.needs_count:
            result = acc / count
        else:
            result = acc / const(float(math.prod(self.kernel)), dt)
        stmts.append(self.yv.store([n, c, *o], result))
        if self.iv is not None:
            stmts.append(self.iv.store([n, c, *o], cast(best, self.index_dtype)))
        return stmts

    def tap(self, n: Expr, c: Expr, o: list[Expr], k: list[Expr], acc: Var, count: Var, best: Var) -> list[Stmt]:
        dt, pad_begin = self.dt, self.pad_begin
        pos = [oi * s - pb + ki * d for oi, ki, s, pb, d in zip(o, k, self.strides, pad_begin, self.dilations)]
        inside = _inside(pos, [0] * len(pos), list(self.in_spatial), [pb > 0 for pb in pad_begin],
                         [pb > 0 or oh for pb, oh in zip(pad_begin, self.overhang)])
        value = self.xv.load([n, c, *pos])
        inner: list[Stmt]
        if self.is_max:
            # NaN-propagating running max, first maximum wins (matches onnxruntime's argmax).
            cond = logical_or(gt(value, acc), unary("isnan", value))
            update: list[Stmt] = [Assign(acc, value)]
            if self.iv is not None:
                update.append(Assign(best, _flat_index(n, c, pos, self.x_shape, self.column_major)))
            inner = [If(cond, update)]
        else:
            inner = [Assign(acc, acc + value)]
            if self.needs_count and not self.include_pad:
                inner.append(Assign(count, count + const(1.0, dt)))
        guarded = _guard(inside, inner)
        if self.needs_count and self.include_pad:
            # Count taps inside the padded extent (ceil_mode windows may pass even that).
            padded = _inside(pos, [-pb for pb in pad_begin], [sz + pe for sz, pe in zip(self.in_spatial, self.pad_end)],
                             [False] * len(pos), self.overhang)
            guarded = guarded + _guard(padded, [Assign(count, count + const(1.0, dt))])
        return guarded


# Row maxima of a whole MaxPool plane kept at once when they take at most this (see _vector_pool).
WHOLE_PLANE_BYTES = 8 * 1024
# Windows up to this many taps are written out tap by tap (3x3 pools: 9).
MAX_UNROLLED_TAPS = 25


def _taps(kernel: list[int]) -> int:
    count = 1
    for k in kernel:
        count *= k
    return count


def _vector_pool(node: Node, ctx: LoweringContext, kb, x, yv: View, kernel: list[int],  # noqa: ANN001
                 strides: list[int], dilations: list[int], pad_begin: list[int], pad_end: list[int],
                 out_spatial: tuple[int, ...], is_max: bool, include_pad: bool) -> list[Stmt]:
    """A 2-D MaxPool without indices or an AveragePool in two vector passes per plane, the
    window's rows first (below for MaxPool; an AveragePool sums instead, with zero borders, and
    divides each output by its window's count, which is separable: the taps of its row that
    are counted times those of its column; inception's 3x3 stride-1 average pools were 9x
    slower one window at a time, with bounds checks, than onnxruntime):
    for each output row, the maxima over its window's input rows, in vectors over the whole
    input width straight from the input (no copy of the plane); then, for each output row, the
    maxima over its window's columns, one vector load per tap. With a column stride, the
    row maxima are first split into column phases by one long strided copy (which the C
    compilers and LLVM vectorise with shuffles), so that tap kw of a run of outputs is
    contiguous. The row maxima have -inf borders for the padding. Max is NaN-propagating, so the
    order of the taps does not change the result. (A copy of the whole plane split into
    phases, read back by k_h * k_w vector maxima per output vector, measured 1.7x slower on
    SqueezeNet's 3x3/2 pool over 64 x 111 x 111.)"""
    batch, channels, in_h, in_w = x.shape
    out_h, out_w = out_spatial
    (k_h, k_w), (s_h, s_w), (d_h, d_w) = kernel, strides, dilations
    (top, left) = pad_begin
    # Wide enough for every tap of the last window (ceil_mode windows overhang the end), and a
    # whole number of column phases.
    width = max(in_w + left, (out_w - 1) * s_w + (k_w - 1) * d_w + 1)
    width = -(-width // s_w) * s_w
    per_phase = width // s_w
    dt = x.dtype.name
    # The row maxima of a whole plane when they fit in a quarter of L1, else one row at a time
    # (a 111-pixel row: measured 1.4x faster than the whole plane through the phase split).
    rows_kept = out_h if out_h * width * x.dtype.itemsize <= WHOLE_PLANE_BYTES else 1
    # Threads: one image's planes split over scratch slots (aot/lowering/parallel.py slot_blocks).
    slots = min(SCRATCH_SLOTS, channels) if batch == 1 and pays(
        ctx, channels * out_h * out_w * k_h * k_w) else 1
    row_max = kb.output(scratch_tensor(ctx, node, (slots, rows_kept, width), x.dtype, "rows")).buffer
    phases = kb.output(scratch_tensor(ctx, node, (slots, s_w, rows_kept * per_phase), x.dtype, "phases")).buffer \
        if s_w > 1 else row_max
    phase_size = s_w * rows_kept * per_phase if s_w > 1 else rows_kept * width
    src = kb.input(x)
    low = const(float("-inf") if is_max else 0.0, dt)

    def combine(a: Expr, b: Expr) -> Expr:
        return maximum(a, b) if is_max else a + b

    def combine_vectors(a: Expr, b: Expr) -> Expr:
        return VecMax(a, b) if is_max else VecArith("add", a, b)

    # AveragePool: the taps each output row and column counts (inside the image, or inside the
    # padded extent with count_include_pad; ceil_mode windows may pass even that).
    def counted(o: int, k: int, s: int, d: int, begin: int, size: int, end: int) -> int:
        lo, hi = (-begin, size + end) if include_pad else (0, size)
        return sum(1 for t in range(k) if lo <= o * s + t * d - begin < hi)

    count_buffer = None
    if not is_max:
        column_counts = [counted(ow, k_w, s_w, d_w, left, in_w, pad_end[1]) for ow in range(out_w)]
        count_buffer = kb.input(ctx.constant(np.array(column_counts, np.float32), f"{node.name}_counts")).buffer

    in_lanes = ctx.tiles.width_for(in_w)
    out_lanes = ctx.tiles.width_for(out_w)

    # Output rows whose windows cover the same input rows (all of them, except near padding),
    # and for an AveragePool count the same rows.
    runs: list[tuple[int, int, tuple[int, ...], int]] = []
    for oh in range(out_h):
        taps = tuple(kh for kh in range(k_h) if 0 <= oh * s_h + kh * d_h - top < in_h)
        rows_counted = counted(oh, k_h, s_h, d_h, top, in_h, pad_end[0])
        if runs and runs[-1][2:] == (taps, rows_counted):
            runs[-1] = (runs[-1][0], oh + 1, taps, rows_counted)
        else:
            runs.append((oh, oh + 1, taps, rows_counted))

    def rows_pass(n: Expr, c: Expr, oh: Expr, slot: Expr, taps: tuple[int, ...]) -> list[Stmt]:
        # `slot`: the row's place in the scratch (thread slot and kept row)
        def at(kh: int, iw: Expr) -> Expr:
            return src.index([n, c, oh * s_h + (kh * d_h - top), iw])

        if in_lanes == 1:
            def column(i: list[Expr]) -> list[Stmt]:
                value: Expr = low
                for kh in taps:
                    value = combine(Load(src.buffer, at(kh, i[0])), value)
                return [Store(row_max, slot * width + left + i[0], value)]
            return kb.loops([in_w], column, prefix="w")
        body: list[Stmt] = []
        for iw in vector_starts(in_w, in_lanes):
            column = const(iw, INDEX)
            acc = kb.var("vmax", vector_of(dt, in_lanes))
            body.append(Declare(acc, VecLoad(src.buffer, at(taps[0], column), in_lanes) if taps
                                else Splat(low, in_lanes)))
            body += [Assign(acc, combine_vectors(VecLoad(src.buffer, at(kh, column), in_lanes), acc))
                     for kh in taps[1:]]
            body.append(VecStore(row_max, slot * width + (iw + left), acc))
        return body

    def columns_pass(n: Expr, c: Expr, oh: Expr, slot: Expr, thread: Expr, rows_counted: int) -> list[Stmt]:
        rows = const(float(rows_counted), dt)
        if out_lanes == 1:
            def column(i: list[Expr]) -> list[Stmt]:
                value: Expr = Load(row_max, slot * width + i[0] * s_w)
                for kw in range(1, k_w):
                    value = combine(Load(row_max, slot * width + i[0] * s_w + kw * d_w), value)
                if count_buffer is not None:
                    value = value / (Load(count_buffer, i[0]) * rows)
                return [yv.store([n, c, oh, i[0]], value)]
            return kb.loops([out_w], column, prefix="c")
        body: list[Stmt] = []
        for ow in vector_starts(out_w, out_lanes):
            acc = kb.var("vmax", vector_of(dt, out_lanes))
            for kw in range(k_w):
                phase, shift = (kw * d_w) % s_w, (kw * d_w) // s_w
                kept = slot - thread * rows_kept  # the row within the thread's scratch
                tap = VecLoad(phases, thread * phase_size + kept * per_phase
                              + (phase * rows_kept * per_phase + ow + shift), out_lanes)
                body.append(Declare(acc, tap) if kw == 0 else Assign(acc, combine_vectors(tap, acc)))
            result: Expr = acc
            if count_buffer is not None:  # the window's count: its columns' times its rows'
                divisor = VecArith("mul", VecLoad(count_buffer, const(ow, INDEX), out_lanes), Splat(rows, out_lanes))
                result = VecArith("div", acc, divisor)
            body.append(VecStore(yv.buffer, yv.index([n, c, oh, const(ow, INDEX)]), result))
        return body

    # The borders (padding and overhang) are never written by the rows pass: -inf once.
    stmts: list[Stmt] = kb.loops([slots * rows_kept, left], lambda i: [Store(row_max, i[0] * width + i[1], low)],
                                 prefix="z")
    stmts += kb.loops([slots * rows_kept, width - left - in_w],
                      lambda i: [Store(row_max, i[0] * width + left + in_w + i[1], low)], prefix="z")

    def split(count: int, thread: Expr) -> list[Stmt]:
        if s_w == 1 or out_lanes == 1:
            return []
        rows_at, phases_at = thread * (rows_kept * width), thread * phase_size
        return [stmt for phase in range(s_w) for stmt in kb.loops([count * per_phase], lambda i, phase=phase: [
            Store(phases, phases_at + i[0] + phase * rows_kept * per_phase,
                  Load(row_max, rows_at + i[0] * s_w + phase))], prefix="s")]

    def plane(idx: list[Expr], thread: Expr) -> list[Stmt]:
        """One plane, with the scratch of thread slot `thread`."""
        n, c = idx
        body: list[Stmt] = []
        first_row = thread * rows_kept
        for first, end, taps, rows_counted in runs:
            if rows_kept == 1:
                body += kb.loops([end - first], lambda r, first=first, taps=taps, rows_counted=rows_counted: [
                    *rows_pass(n, c, r[0] + first, first_row, taps), *split(1, thread),
                    *columns_pass(n, c, r[0] + first, first_row, thread, rows_counted)], prefix="r")
            else:
                body += kb.loops([end - first], lambda r, first=first, taps=taps: rows_pass(
                    n, c, r[0] + first, first_row + r[0] + first, taps), prefix="r")
        if rows_kept == 1:
            return body
        body += split(out_h, thread)
        for first, end, _, rows_counted in runs:
            body += kb.loops([end - first], lambda r, first=first, rows_counted=rows_counted: columns_pass(
                n, c, r[0] + first, first_row + r[0] + first, thread, rows_counted), prefix="r")
        return body

    if slots > 1:
        return stmts + slot_blocks(kb, channels, 1, lambda c, _, slot: plane([const(0, INDEX), c], slot), "p", slots)
    return stmts + kb.loops([batch, channels], lambda idx: plane(idx, const(0, INDEX)), prefix="p")


def _branchless_max(kb, xv: View, yv: View, idx: list[Expr], kernel: list[int], strides: list[int],  # noqa: ANN001
                    pad_begin: list[int], in_spatial: tuple[int, ...], overhang: list[bool], dt: str) -> list[Stmt]:
    """One output of a MaxPool without indices and without dilation, as straight-line code the
    compilers vectorise across the output row: every tap is written out, and a tap that falls in
    the padding (or past the end, ceil_mode) reads the nearest input element instead, which lies
    in the same window, so the maximum is unchanged and no load needs a guard."""
    n, c, *o = idx
    acc = kb.var("acc", dt)
    stmts: list[Stmt] = [Declare(acc, const(float("-inf"), dt))]
    for k in itertools.product(*(range(e) for e in kernel)):
        pos: list[Expr] = []
        for oi, ki, s, pb, size, over in zip(o, k, strides, pad_begin, in_spatial, overhang):
            p = oi * s + (ki - pb)
            if pb > 0:
                p = maximum(p, const(0, INDEX))
            if pb > 0 or over:
                p = minimum(p, const(size - 1, INDEX))
            pos.append(p)
        value = kb.var("v", dt)
        # NaN-propagating running max, like onnxruntime's.
        stmts += [Declare(value, xv.load([n, c, *pos])),
                  Assign(acc, select(logical_or(gt(value, acc), unary("isnan", value)), value, acc))]
    return stmts + [yv.store([n, c, *o], acc)]


def _flat_index(n: Expr, c: Expr, pos: list[Expr], shape: tuple[int, ...], column_major: bool) -> Expr:
    """MaxPool Indices: offset into the input as if flattened (row-major, or spatially column-major)."""
    spatial = shape[2:]
    if column_major:
        view = View(None, spatial[::-1])  # type: ignore[arg-type]
        inner = view.index(pos[::-1])
    else:
        inner = View(None, spatial).index(pos)  # type: ignore[arg-type]
    plane = 1
    for d in spatial:
        plane *= d
    return (n * shape[1] + c) * plane + inner


@register("GlobalAveragePool", "GlobalMaxPool")
def lower_global_pool(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "X")
    y = node.outputs[0]
    assert y is not None
    if x.dtype.kind != "f" or x.rank < 2:
        raise fail(node, f"input {list(x.shape)} {x.dtype}: expected float N x C x spatial...")
    batch, channels, *spatial = x.shape
    plane = 1
    for d in spatial:
        plane *= d
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (batch, channels, plane))
    yv = View(kb.output(y).buffer, (batch, channels))
    dt = y.dtype.name
    is_max = node.op_type == "GlobalMaxPool"

    def body(idx: list[Expr]) -> list[Stmt]:
        n, c = idx
        acc = kb.var("acc", dt)
        if is_max:
            def step(r: list[Expr]) -> list[Stmt]:
                v = xv.load([n, c, r[0]])
                return [If(logical_or(gt(v, acc), unary("isnan", v)), [Assign(acc, v)])]
            init, result = const(float("-inf"), dt), acc
        else:
            stmts, total = chained_sum(kb, lambda r: xv.load([n, c, r]), plane, dt, ctx.tiles.lanes)
            return [*stmts, yv.store([n, c], total / const(float(plane), dt))]
        return [Declare(acc, init), *kb.loops([plane], step, prefix="r"), yv.store([n, c], result)]

    ctx.emit(kb, kb.loops([batch, channels], body))
