"""MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
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
from aot.lowering.builder import KernelBuilder, View, spatial_roles
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, mark_outer, pays, slot_blocks
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input, spatial_padding, window_output_size, window_steps
from aot.ops.contraction.register_tiles import vector_starts
from aot.ops.reduce import chained_sum
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
    # MaxPool also runs on the int8/uint8 tensors of quantised models (a max commutes with the
    # monotonic dequantisation, so onnxruntime keeps it in int8 too).
    if x.dtype.kind != "f" and not (node.op_type == "MaxPool" and x.dtype.name in ("int8", "uint8")):
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
    # window at a time than through the row sums and phase copies (`aot bench` on MNIST).
    if (iv is None and x.rank == 4 and dt == "float32" and _taps(kernel) <= MAX_UNROLLED_TAPS
            and ctx.tiles.width_for(out_spatial[1]) > 1 and out_spatial[1] >= 8):
        ctx.emit(kb, _vector_pool(node, ctx, kb, x, yv, kernel, strides, dilations, pad_begin=pad_begin,
                                  pad_end=pad_end, out_spatial=out_spatial, is_max=is_max, include_pad=include_pad))
        return
    # Every output window on its own: the outermost loop may be split over threads.
    parallel = pays(ctx, y.size * _taps(kernel))
    if is_max and iv is None and all(d == 1 for d in dilations) and _taps(kernel) <= MAX_UNROLLED_TAPS:
        stmts = kb.loops([batch, channels, *out_spatial], roles=["n", "c", *spatial_roles(len(out_spatial))],
                         body=lambda idx: _branchless_max(kb, xv, yv, idx, kernel, strides, pad_begin, in_spatial,
                                                     overhang=overhang, dt=dt))
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

        ctx.emit(kb, kb.loops([batch, channels], whole, roles=["n", "c"]))
        return

    windows = _Windows(kb, xv, yv, iv, indices.dtype.name if indices is not None else "", x.shape, kernel, strides,
                       dilations, pad_begin, pad_end, overhang, is_max, column_major, include_pad, dt)
    stmts = kb.loops([batch, channels, *out_spatial], windows.body, roles=["n", "c", *spatial_roles(len(out_spatial))])
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
        stmts: list[Stmt] = [Declare(acc, lowest(dt) if self.is_max else const(0.0, dt))]
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
            cond = greater_or_nan(value, acc)
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


def _vector_pool(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, yv: View, kernel: list[int],
                 strides: list[int], dilations: list[int], *, pad_begin: list[int], pad_end: list[int],
                 out_spatial: tuple[int, ...], is_max: bool, include_pad: bool) -> list[Stmt]:
    """A 2-D MaxPool without indices or an AveragePool in two vector passes per plane, the
    window's rows first (below for MaxPool; an AveragePool sums instead, with zero borders, and
    divides each output by its window's count, which is separable: the taps of its row that
    are counted times those of its column; one window at a time, with bounds checks, inception's
    3x3 stride-1 average pools run far slower than onnxruntime's):
    for each output row, the maxima over its window's input rows, in vectors over the whole
    input width straight from the input (no copy of the plane); then, for each output row, the
    maxima over its window's columns, one vector load per tap. With a column stride, the
    row maxima are first split into column phases by one long strided copy (which the C
    compilers and LLVM vectorise with shuffles), so that tap kw of a run of outputs is
    contiguous. The row maxima have -inf borders for the padding. Max is NaN-propagating, so the
    order of the taps does not change the result. (A copy of the whole plane split into
    phases, read back by k_h * k_w vector maxima per output vector, measured 1.7x slower on
    SqueezeNet's 3x3/2 pool over 64 x 111 x 111.)"""
    return _VectorPool(node, ctx, kb, x, yv, kernel, strides, dilations, pad_begin=pad_begin, pad_end=pad_end,
                       out_spatial=out_spatial, is_max=is_max, include_pad=include_pad).emit()


class _VectorPool:
    """_vector_pool's two passes: rows_pass (the window's input rows combined, per output row),
    split (the column phases), columns_pass (the window's columns, per output row)."""

    def __init__(self, node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, yv: View, kernel: list[int],
                 strides: list[int], dilations: list[int], *, pad_begin: list[int], pad_end: list[int],
                 out_spatial: tuple[int, ...], is_max: bool, include_pad: bool) -> None:
        self.kb, self.yv, self.is_max, self.include_pad = kb, yv, is_max, include_pad
        self.batch, self.channels, self.in_h, self.in_w = x.shape
        self.out_h, self.out_w = out_spatial
        (self.k_h, self.k_w), (self.s_h, self.s_w), (self.d_h, self.d_w) = kernel, strides, dilations
        (self.top, self.left), self.pad_end = pad_begin, pad_end
        s_w = self.s_w
        # Wide enough for every tap of the last window (ceil_mode windows overhang the end), and a
        # whole number of column phases.
        width = max(self.in_w + self.left, (self.out_w - 1) * s_w + (self.k_w - 1) * self.d_w + 1)
        self.width = width = -(-width // s_w) * s_w
        self.per_phase = width // s_w
        self.dt = x.dtype.name
        # The row maxima of a whole plane when they fit in a quarter of L1, else one row at a time
        # (a 111-pixel row: measured 1.4x faster than the whole plane through the phase split).
        self.rows_kept = rows_kept = self.out_h if self.out_h * width * x.dtype.itemsize <= WHOLE_PLANE_BYTES else 1
        # Threads: one image's planes split over scratch slots (aot/lowering/parallel.py slot_blocks).
        self.slots = min(SCRATCH_SLOTS, self.channels) if self.batch == 1 and pays(
            ctx, self.channels * self.out_h * self.out_w * self.k_h * self.k_w) else 1
        self.row_max = kb.output(scratch_tensor(ctx, node, (self.slots, rows_kept, width), x.dtype, "rows")).buffer
        self.phases = kb.output(scratch_tensor(ctx, node, (self.slots, s_w, rows_kept * self.per_phase), x.dtype,
                                               "phases")).buffer if s_w > 1 else self.row_max
        self.phase_size = s_w * rows_kept * self.per_phase if s_w > 1 else rows_kept * width
        self.src = kb.input(x)
        self.low = const(float("-inf") if is_max else 0.0, self.dt)
        self.count_buffer = None
        if not is_max:
            column_counts = [self.counted(ow, self.k_w, s_w, self.d_w, self.left, self.in_w, pad_end[1])
                             for ow in range(self.out_w)]
            counts = ctx.constant(np.array(column_counts, np.float32), f"{node.name}_counts")
            self.count_buffer = kb.input(counts).buffer
        self.in_lanes = ctx.tiles.width_for(self.in_w)
        self.out_lanes = ctx.tiles.width_for(self.out_w)
        self.runs = self._runs()

    def combine(self, a: Expr, b: Expr) -> Expr:
        return maximum(a, b) if self.is_max else a + b

    def combine_vectors(self, a: Expr, b: Expr) -> Expr:
        return VecMax(a, b) if self.is_max else VecArith("add", a, b)

    def counted(self, o: int, k: int, s: int, d: int, begin: int, size: int, end: int) -> int:
        """AveragePool: the taps output row or column `o` counts (inside the image, or inside the
        padded extent with count_include_pad; ceil_mode windows may pass even that)."""
        lo, hi = (-begin, size + end) if self.include_pad else (0, size)
        return sum(1 for t in range(k) if lo <= o * s + t * d - begin < hi)

    def _runs(self) -> list[tuple[int, int, tuple[int, ...], int]]:
        """Output rows whose windows cover the same input rows (all of them, except near
        padding), and for an AveragePool count the same rows: (first, end, taps, rows counted)."""
        runs: list[tuple[int, int, tuple[int, ...], int]] = []
        for oh in range(self.out_h):
            taps = tuple(kh for kh in range(self.k_h) if 0 <= oh * self.s_h + kh * self.d_h - self.top < self.in_h)
            rows_counted = self.counted(oh, self.k_h, self.s_h, self.d_h, self.top, self.in_h, self.pad_end[0])
            if runs and runs[-1][2:] == (taps, rows_counted):
                runs[-1] = (runs[-1][0], oh + 1, taps, rows_counted)
            else:
                runs.append((oh, oh + 1, taps, rows_counted))
        return runs

    def rows_pass(self, n: Expr, c: Expr, oh: Expr, slot: Expr, taps: tuple[int, ...]) -> list[Stmt]:
        """`slot`: the row's place in the scratch (thread slot and kept row)."""
        kb, src, width, left, in_lanes = self.kb, self.src, self.width, self.left, self.in_lanes

        def at(kh: int, iw: Expr) -> Expr:
            return src.index([n, c, oh * self.s_h + (kh * self.d_h - self.top), iw])

        if in_lanes == 1:
            def column(i: list[Expr]) -> list[Stmt]:
                value: Expr = self.low
                for kh in taps:
                    value = self.combine(Load(src.buffer, at(kh, i[0])), value)
                return [Store(self.row_max, slot * width + left + i[0], value)]
            return kb.loops([self.in_w], column, prefix="w")
        body: list[Stmt] = []
        for iw in vector_starts(self.in_w, in_lanes):
            column_at = const(iw, INDEX)
            acc = kb.var("vmax", vector_of(self.dt, in_lanes))
            body.append(Declare(acc, VecLoad(src.buffer, at(taps[0], column_at), in_lanes) if taps
                                else Splat(self.low, in_lanes)))
            body += [Assign(acc, self.combine_vectors(VecLoad(src.buffer, at(kh, column_at), in_lanes), acc))
                     for kh in taps[1:]]
            body.append(VecStore(self.row_max, slot * width + (iw + left), acc))
        return body

    def columns_pass(self, n: Expr, c: Expr, oh: Expr, slot: Expr, thread: Expr, rows_counted: int) -> list[Stmt]:
        rows = const(float(rows_counted), self.dt)
        if self.out_lanes == 1:
            return self.kb.loops([self.out_w], lambda i: [self.yv.store([n, c, oh, i[0]], self._column(
                slot, i[0], rows))], prefix="c")
        body: list[Stmt] = []
        lanes, count_buffer = self.out_lanes, self.count_buffer
        for ow in vector_starts(self.out_w, lanes):
            acc = self.kb.var("vmax", vector_of(self.dt, lanes))
            for kw in range(self.k_w):
                phase, shift = (kw * self.d_w) % self.s_w, (kw * self.d_w) // self.s_w
                kept = slot - thread * self.rows_kept  # the row within the thread's scratch
                tap = VecLoad(self.phases, thread * self.phase_size + kept * self.per_phase
                              + (phase * self.rows_kept * self.per_phase + ow + shift), lanes)
                body.append(Declare(acc, tap) if kw == 0 else Assign(acc, self.combine_vectors(tap, acc)))
            result: Expr = acc
            if count_buffer is not None:  # the window's count: its columns' times its rows'
                divisor = VecArith("mul", VecLoad(count_buffer, const(ow, INDEX), lanes), Splat(rows, lanes))
                result = VecArith("div", acc, divisor)
            body.append(VecStore(self.yv.buffer, self.yv.index([n, c, oh, const(ow, INDEX)]), result))
        return body

    def _column(self, slot: Expr, ow: Expr, rows: Expr) -> Expr:
        """Output column `ow` of the row in `slot`, one tap at a time (rows narrower than a vector)."""
        at = slot * self.width + ow * self.s_w
        value: Expr = Load(self.row_max, at)
        for kw in range(1, self.k_w):
            value = self.combine(Load(self.row_max, slot * self.width + ow * self.s_w + kw * self.d_w), value)
        if self.count_buffer is not None:
            value = value / (Load(self.count_buffer, ow) * rows)
        return value

    def borders(self) -> list[Stmt]:
        """The borders (padding and overhang) are never written by the rows pass: -inf once."""
        kb, width, left, in_w, row_max = self.kb, self.width, self.left, self.in_w, self.row_max
        stmts = kb.loops([self.slots * self.rows_kept, left], lambda i: [Store(row_max, i[0] * width + i[1], self.low)],
                         prefix="z")
        return stmts + kb.loops([self.slots * self.rows_kept, width - left - in_w],
                                lambda i: [Store(row_max, i[0] * width + left + in_w + i[1], self.low)], prefix="z")

    def split(self, count: int, thread: Expr) -> list[Stmt]:
        if self.s_w == 1 or self.out_lanes == 1:
            return []
        rows_at, phases_at = thread * (self.rows_kept * self.width), thread * self.phase_size
        per_phase = self.per_phase

        def copy(i: list[Expr], phase: int) -> list[Stmt]:
            return [Store(self.phases, phases_at + i[0] + phase * self.rows_kept * per_phase,
                          Load(self.row_max, rows_at + i[0] * self.s_w + phase))]

        return [stmt for phase in range(self.s_w)
                for stmt in self.kb.loops([count * per_phase], lambda i, phase=phase: copy(i, phase), prefix="s")]

    def plane(self, idx: list[Expr], thread: Expr) -> list[Stmt]:
        """One plane, with the scratch of thread slot `thread`."""
        n, c = idx
        kb = self.kb
        body: list[Stmt] = []
        first_row = thread * self.rows_kept
        for first, end, taps, rows_counted in self.runs:
            if self.rows_kept == 1:
                body += kb.loops([end - first], lambda r, first=first, taps=taps, rows_counted=rows_counted: [
                    *self.rows_pass(n, c, r[0] + first, first_row, taps), *self.split(1, thread),
                    *self.columns_pass(n, c, r[0] + first, first_row, thread, rows_counted)], prefix="r")
            else:
                body += kb.loops([end - first], lambda r, first=first, taps=taps: self.rows_pass(
                    n, c, r[0] + first, first_row + r[0] + first, taps), prefix="r")
        if self.rows_kept == 1:
            return body
        body += self.split(self.out_h, thread)
        for first, end, _, rows_counted in self.runs:
            body += kb.loops([end - first], lambda r, first=first, rows_counted=rows_counted: self.columns_pass(
                n, c, r[0] + first, first_row + r[0] + first, thread, rows_counted), prefix="r")
        return body

    def emit(self) -> list[Stmt]:
        stmts = self.borders()
        if self.slots > 1:
            return stmts + slot_blocks(self.kb, self.channels, 1,
                                       lambda c, _, slot: self.plane([const(0, INDEX), c], slot), "p", self.slots)
        return stmts + self.kb.loops([self.batch, self.channels], lambda idx: self.plane(idx, const(0, INDEX)),
                                     prefix="p")


def _branchless_max(kb, xv: View, yv: View, idx: list[Expr], kernel: list[int], strides: list[int],  # noqa: ANN001
                    pad_begin: list[int], in_spatial: tuple[int, ...], *, overhang: list[bool], dt: str) -> list[Stmt]:
    """One output of a MaxPool without indices and without dilation, as straight-line code the
    compilers vectorise across the output row: every tap is written out, and a tap that falls in
    the padding (or past the end, ceil_mode) reads the nearest input element instead, which lies
    in the same window, so the maximum is unchanged and no load needs a guard."""
    n, c, *o = idx
    acc = kb.var("acc", dt)
    stmts: list[Stmt] = [Declare(acc, lowest(dt))]
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
                  Assign(acc, select(greater_or_nan(value, acc), value, acc))]
    return stmts + [yv.store([n, c, *o], acc)]


def lowest(dtype: str) -> Expr:
    """Where a running maximum starts: -inf, or the integer type's least value."""
    return const(float("-inf"), dtype) if dtype.startswith("float") else const(int(np.iinfo(dtype).min), dtype)


def greater_or_nan(value: Expr, best: Expr) -> Expr:
    """Whether `value` replaces the running maximum `best`: NaN-propagating for floats (like
    onnxruntime's max), the first maximum winning (its argmax)."""
    if not value.dtype.startswith("float"):
        return gt(value, best)
    return logical_or(gt(value, best), unary("isnan", value))


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

    ctx.emit(kb, kb.loops([batch, channels], body, roles=["n", "c"]))
