"""int8 depthwise convolutions on x86 whose output grid covers the input's columns: one float copy
of each plane per stride phase, and column masks instead of column-shifted copies.

Tap (kh, kw) of output pixel p = oh * W + ow reads input row s_h * oh + kh * d_h - pad_top, that
is s_h * (oh + r) + a with a the row phase and r its floor quotient, and column s_w * (ow + d) + b
likewise. The copy of phase (a, b) holds, at row i and column j of a W-wide grid, input
(s_h * i + a, s_w * j + b) minus x_zero_point as a float, and zeros where that is outside the
input (padding), with a zero margin at either end: the tap is element p + (r - first_row) * W +
d + margin of its copy, for every pixel alike. Where d != 0 the pixels of the first or last
columns read the neighbouring row of the grid instead of padding; the taps of each d are summed
apart and multiplied by that shift's column mask (1.0 where ow + d is inside the grid, else 0.0)
before they join the sum. That is right because the grid covers the input's columns
(masked_period): every column past the grid's is padding. The mask of pixel p depends on p mod W
only, so the loops run over periods of lcm(W, lanes) pixels, and the mask of a vector is a vector
load from a table of one period (plus a vector).

Against shifted_depthwise (a copy per column shift too, each with its wrapped columns reset one
by one), this writes fewer copies and nothing else: unit strides copy a plane as whole vectors
(on DS-CNN's 25x5 planes the copies and resets had been half of the depthwise kernels' time),
stride 2 (MobileNet's downsampling layers) 4 copies of a quarter plane where there were 6.

Every product and partial sum is an integer below 2**24 (|x - x_zero_point| <= 255, |w| <= 255,
at most MAX_UNROLLED_TAPS taps), so the float sums are the int32 ones. Where the accumulator's
start (the bias) plus the largest sum also stays below 2**24, the sum starts from it in float,
and the requantisation takes the float as it is (no conversion to int32 and back).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    INDEX,
    Buffer,
    Declare,
    Expr,
    Load,
    MulAdd,
    Stmt,
    Store,
    Var,
    VecStore,
    binary,
    cast,
    const,
    ge,
    logical_and,
    lt,
    select,
)
from aot.kernel.vectorize import lanewise, narrowed_store
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.conv.shifted_depthwise import BLOCK_BYTES, Finish, StoreAt
from aot.ops.quantized.integer_terms import ACCUMULATOR, PerIndex, channel_locals
from aot.ops.scratch import scratch_tensor

# The column masks' period, at most, in floats: lcm(W, lanes) is 80 for DS-CNN's 5-pixel rows and
# 48 for VWW's 48-, 24-, 12- and 6-pixel ones; a row of odd width near 1000 would need 16000.
MAX_PERIOD = 1024
# Floats hold every integer up to this exactly.
EXACT_FLOAT = 2 ** 24


def masked_period(g: ConvGeometry, lanes: int) -> int | None:
    """lcm(W, lanes), the pixels after which the column masks repeat, where this form applies to
    the depthwise convolution `g` (shifted_depthwise.vector_lanes gave `lanes`): the output grid
    covers the input's columns in every column phase the taps read (a valid convolution's does
    not) and the period is at most MAX_PERIOD; else None."""
    width, in_w, s_w = g.out_spatial[1], g.in_spatial[1], g.strides[1]
    phases = {(kw * g.dilations[1] - g.pad_begin[1]) % s_w for kw in range(g.kernel[1])}
    if any(-(-(in_w - b) // s_w) > width for b in phases):
        return None
    period = math.lcm(width, lanes)
    return period if period <= MAX_PERIOD else None


def float_start_fits(weights: np.ndarray, bias: np.ndarray | None) -> bool:
    """Whether every channel's start plus its largest sum of products stays below 2**24, so the
    whole accumulation is exact in float32. `weights` [M][taps] (w - w_zero_point)."""
    largest = 255 * np.abs(weights.astype(np.int64)).sum(axis=1)
    if bias is not None:
        largest = largest + np.abs(bias.astype(np.int64).reshape(-1))
    return bool(largest.max(initial=0) < EXACT_FLOAT)


Key = tuple[int, int]  # (row phase a, column phase b)


class _Layout:
    """The copies of a channel, one per key: `margin` zeros, the grid's rows first_row .. out_h -
    1 + last_row (zeros outside the input), `margin` zeros again. Copy `key` of slot s starts at
    (s * len(keys) + keys.index(key)) * size."""

    def __init__(self, g: ConvGeometry, lanes: int, period: int) -> None:
        (d_h, d_w), (p_t, p_l) = g.dilations, g.pad_begin
        (self.out_h, self.width), (self.in_h, self.in_w) = g.out_spatial, g.in_spatial
        self.strides = g.strides
        self.lanes, self.period = lanes, period
        # ((r, a), (d, b)) per tap
        self.taps = [(divmod(kh * d_h - p_t, g.strides[0]), divmod(kw * d_w - p_l, g.strides[1]))
                     for kh in range(g.kernel[0]) for kw in range(g.kernel[1])]
        self.keys: list[Key] = sorted({(a, b) for (_, a), (_, b) in self.taps})
        rows = [r for (r, _), _ in self.taps]
        self.first_row, self.last_row = min(rows), max(rows)
        self.margin = max(abs(d) for _, (d, _) in self.taps)
        self.shifts = sorted({d for _, (d, _) in self.taps if d != 0})  # one mask each
        self.size = (self.out_h + self.last_row - self.first_row) * self.width + 2 * self.margin

    def base(self, slot: Expr, key: Key) -> Expr:
        return (slot * len(self.keys) + self.keys.index(key)) * self.size + self.margin

    def tap(self, slot: Expr, t: int, p: Expr) -> Expr:
        (r, a), (d, b) = self.taps[t]
        return self.base(slot, (a, b)) + (r - self.first_row) * self.width + d + p

    def rows(self, a: int) -> range:
        """The grid rows i whose input row s_h * i + a is inside the input."""
        last = min(self.out_h - 1 + self.last_row, (self.in_h - 1 - a) // self.strides[0])
        return range(max(self.first_row, 0), last + 1)

    def columns(self, b: int) -> int:
        """How many grid columns j (from 0) have their input column s_w * j + b inside the input."""
        return min(self.width, -(-(self.in_w - b) // self.strides[1]))

    def splits_rows(self) -> bool:
        """Whether the input's rows and columns divide into the stride's phases exactly, each
        phase's rows whole grid rows from 0: then copy (a, b) is every s_w-th float of the rows of
        phase a laid end to end (_split_rows)."""
        (s_h, s_w) = self.strides
        return (self.in_h % s_h == 0 and self.in_w == s_w * self.width
                and all(self.rows(a) == range(0, self.in_h // s_h) for a, _ in self.keys))

    def fill_masks(self, kb: KernelBuilder, masks: Buffer) -> list[Stmt]:
        """masks[shift][j] = 1.0 where column (j mod W) + shift is inside the grid, for j in one
        period and one vector more (a vector may start at the period's last pixel). Filled when
        the kernel starts, in its scratch: as constants they were weights (DS-CNN's int8 package
        past 0.3 of the float one's) for a few hundred stores a run."""
        count = self.period + self.lanes

        def mask(k: int, d: int, j: Expr) -> Stmt:
            column = binary("mod", j, const(self.width, INDEX)) + d
            inside = logical_and(ge(column, const(0, INDEX)), lt(column, const(self.width, INDEX)))
            return Store(masks, j + k * count, select(inside, const(1.0, "float32"), const(0.0, "float32")))

        return [stmt for k, d in enumerate(self.shifts)
                for stmt in kb.loops([count], lambda j, k=k, d=d: [mask(k, d, j[0])], prefix="m")]


def masked_depthwise(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, x: Tensor,
                     x_zp: Expr, weights: Buffer, init: PerIndex, *, float_start: bool, finish: Finish,
                     store: StoreAt, lanes: int, overlap: bool) -> list[Stmt]:
    """The convolution (masked_period applies), storing output pixel p of plane (n, m) at
    store(n, m, 0, p). `init`: each channel's start without the x_zero_point term (the copies
    hold x - x_zero_point). `float_start`: float_start_fits. `finish` takes an int32
    accumulator, or a float32 one holding an exact integer."""
    period = masked_period(g, lanes)
    assert period is not None
    layout = _Layout(g, lanes, period)
    per_group = g.out_channels // g.groups
    copy_size = len(layout.keys) * layout.size
    block = max(1, min(g.groups, BLOCK_BYTES // (copy_size * 4)))
    copies = kb.output(scratch_tensor(ctx, node, (block * copy_size,), np.float32, "masked")).buffer
    masks = kb.output(scratch_tensor(ctx, node, (len(layout.shifts) * (period + lanes),), np.float32,
                                     "column_masks")).buffer
    src = kb.input(x).buffer
    zero_point = cast(cast(x_zp, ACCUMULATOR), "float32")
    plane_size = layout.in_h * layout.in_w
    # Unit strides over rows as wide as the input's: the copy is one run of the plane. Otherwise
    # the copies gather from the plane converted to floats first (gathered bytes had been scalar
    # loads and conversions).
    run = g.strides == (1, 1) and layout.in_w == layout.width
    floats = None if run else kb.output(scratch_tensor(ctx, node, (plane_size,), np.float32, "floats")).buffer
    split = not run and layout.splits_rows()

    def value(i: Expr) -> Expr:
        return cast(cast(Load(src, i), ACCUMULATOR), "float32") - zero_point

    def copy(n: Expr, group: Expr, slot: Expr) -> list[Stmt]:
        return _copy_plane(kb, layout, (n * g.channels + group) * plane_size, slot, strides=g.strides, lanes=lanes,
                           copies=copies, floats=floats, split=split, value=value)

    def outputs(n: Expr, group: Expr, slot: Expr, j: Expr) -> list[Stmt]:
        m = group * per_group + j
        decls, weights_, start = channel_locals(kb, weights, init, m, len(layout.taps), "float32")
        start_f = kb.var("start", "float32") if float_start else None
        if start_f is not None:
            decls.append(Declare(start_f, cast(start, "float32")))

        def pixel(p: Expr, mask_at: Expr) -> Stmt:
            total = _masked_sum(layout, [Load(copies, layout.tap(slot, t, p)) for t in range(len(layout.taps))],
                                weights_, lambda k: Load(masks, k * (period + lanes) + mask_at), start_f)
            acc = total if start_f is not None else start + cast(total, ACCUMULATOR)
            return store(n, m, const(0, INDEX), p, finish(acc, m))

        return decls + _periods(kb, layout, overlap, pixel)

    def block_of(n: Expr, first: Expr, count: int) -> list[Stmt]:
        return (kb.loops([count], lambda s: copy(n, first + s[0], s[0]), prefix="c")
                + kb.loops([count, per_group], lambda i: outputs(n, first + i[0], i[0], i[1]), prefix="o"))

    zero = kb.loops([copies.size], lambda i: [Store(copies, i[0], const(0.0, "float32"))], prefix="z")
    channels = kb.loops([g.batch], lambda n: blocks(kb, g.groups, block, lambda first, count: block_of(
        n[0], first, count), "b"), prefix="n")
    return zero + layout.fill_masks(kb, masks) + channels


def _copy_plane(kb: KernelBuilder, layout: _Layout, plane: Expr, slot: Expr, *, strides: tuple[int, ...],
                lanes: int, copies: Buffer, floats: Buffer | None, split: bool,
                value: Callable[[Expr], Expr]) -> list[Stmt]:
    """The input plane starting at element `plane` copied into `copies`' `slot` as `value`s (x -
    x_zero_point in float32): one run, or through the plane converted to `floats` first."""
    if floats is None:
        rows = layout.rows(0)
        at = layout.base(slot, (0, 0)) + (rows.start - layout.first_row) * layout.width
        first = plane + rows.start * layout.width
        return _vector_run(kb, len(rows) * layout.width, lanes, lambda i: Store(copies, at + i, value(first + i)))
    if split:
        return _split_rows(kb, layout, lanes, floats, copies, slot, lambda i: value(plane + i))
    out = _vector_run(kb, layout.in_h * layout.in_w, lanes, lambda i: Store(floats, i, value(plane + i)))
    (s_h, s_w), width = strides, layout.width
    for a, b in layout.keys:
        rows, columns, base = layout.rows(a), layout.columns(b), layout.base(slot, (a, b))
        if rows and columns > 0:
            out += kb.loops([len(rows), columns], lambda i, a=a, b=b, rows=rows, base=base: [Store(
                copies, base + (i[0] + (rows.start - layout.first_row)) * width + i[1],
                Load(floats, ((i[0] + rows.start) * s_h + a) * layout.in_w + i[1] * s_w + b))], prefix="s")
    return out


def _masked_sum(layout: _Layout, taps: list[Expr], weights: list[Var], mask: Callable[[int], Expr],
                start: Var | None) -> Expr:
    """start + the unshifted taps times their weights + each shift's mask times its taps' sum."""
    def chain(acc: Expr | None, members: list[int]) -> Expr:
        for t in members:
            acc = taps[t] * weights[t] if acc is None else MulAdd(acc, taps[t], weights[t])
        assert acc is not None
        return acc

    by_shift = {d: [t for t, (_, (td, _)) in enumerate(layout.taps) if td == d] for d in [0, *layout.shifts]}
    total: Expr | None = chain(start, by_shift[0]) if by_shift[0] else start
    for k, d in enumerate(layout.shifts):
        part = chain(None, by_shift[d])
        total = mask(k) * part if total is None else MulAdd(total, mask(k), part)
    assert total is not None
    return total


def _periods(kb: KernelBuilder, layout: _Layout, overlap: bool, pixel: Callable[[Expr, Expr], Stmt]) -> list[Stmt]:
    """pixel(p, p mod period) over the plane: vectors (NarrowStore) over whole periods, then the
    vectors left, then the ragged rest (one vector ending at the plane's end when `overlap`, else
    scalar); all scalar where the store has no vector form."""
    lanes, period = layout.lanes, layout.period
    pixels = layout.out_h * layout.width
    periods, left = divmod(pixels, period)
    after = periods * period

    def vector(p: Expr, mask_at: Expr) -> Stmt | None:
        return narrowed_store(pixel(p, mask_at), pixel(p + 1, mask_at + 1), lanes)

    if vector(const(0, INDEX), const(0, INDEX)) is None:
        return (kb.loops([periods, period], lambda i: [pixel(i[0] * period + i[1], i[1])], prefix="p")
                + kb.loops([left], lambda i: [pixel(i[0] + after, i[0])], prefix="p"))
    count, rest = divmod(left, lanes)
    out = kb.loops([periods, period // lanes], lambda i: [_stmt(vector(
        i[0] * period + i[1] * lanes, i[1] * lanes))], prefix="v")
    out += kb.loops([count], lambda i: [_stmt(vector(i[0] * lanes + after, i[0] * lanes))], prefix="v")
    done = after + count * lanes
    if rest and overlap:
        out.append(_stmt(vector(const(pixels - lanes, INDEX), const((pixels - lanes) % period, INDEX))))
    elif rest:
        out += kb.loops([rest], lambda i: [pixel(i[0] + done, i[0] + count * lanes)], prefix="p")
    return out


def _split_rows(kb: KernelBuilder, layout: _Layout, lanes: int, floats: Buffer, copies: Buffer, slot: Expr,
                value: Callable[[Expr], Expr]) -> list[Stmt]:
    """A strided plane's copies where its rows and columns divide into the stride's phases
    (_Layout.splits_rows): its rows converted to floats grouped by row phase (each a run of
    whole vectors), then copy (a, b) as one flat loop over every s_w-th float of phase a's rows
    from b, which gcc turns into two-source permutes. Gathered a grid row at a time, 24 or 6
    floats, it had inserted them one by one (a quarter of VWW's int8 stride-2 depthwise)."""
    (s_h, s_w), in_w = layout.strides, layout.in_w
    half = layout.in_h // s_h * in_w  # the floats of one row phase

    def rows(i: list[Expr]) -> list[Stmt]:
        a, row = i
        return _vector_run(kb, in_w, lanes, lambda c: Store(floats, a * half + row * in_w + c,
                                                               value((row * s_h + a) * in_w + c)))

    out = kb.loops([s_h, layout.in_h // s_h], rows, prefix="s")
    pixels = layout.in_h // s_h * layout.width
    for a, b in layout.keys:
        base = layout.base(slot, (a, b)) - layout.first_row * layout.width
        out += kb.loops([pixels], lambda p, a=a, b=b, base=base: [
            Store(copies, base + p[0], Load(floats, a * half + p[0] * s_w + b))], prefix="s")
    return out


def _vector_run(kb: KernelBuilder, count: int, lanes: int, element: Callable[[Expr], Stmt]) -> list[Stmt]:
    """element(i) for i in [0, count) as float vector stores, the ragged rest one vector ending
    at the run's end (storing the same values twice), or scalar where the run is shorter than a
    vector or the value has no vector form."""
    first, second = element(const(0, INDEX)), element(const(1, INDEX))
    assert isinstance(first, Store) and isinstance(second, Store)
    if count < lanes or lanewise(first.value, second.value, None, None, lanes, integers=True) is None:
        return kb.loops([count], lambda i: [element(i[0])], prefix="s")

    def vector(i: Expr) -> Stmt:
        at, following = element(i), element(i + 1)
        assert isinstance(at, Store) and isinstance(following, Store)
        value = lanewise(at.value, following.value, None, None, lanes, integers=True)
        assert value is not None
        return VecStore(at.buffer, at.index, value)

    full, rest = divmod(count, lanes)
    out = kb.loops([full], lambda i: [vector(i[0] * lanes)], prefix="s")
    if rest:
        out.append(vector(const(count - lanes, INDEX)))
    return out


def _stmt(stmt: Stmt | None) -> Stmt:
    assert stmt is not None  # the probe at pixel 0 had a vector form: so has every other pixel
    return stmt
