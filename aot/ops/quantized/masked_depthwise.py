"""int8 depthwise convolutions of unit stride whose output rows are as wide as the input's (x86):
one float copy of each plane, column masks instead of column-shifted copies.

Tap (kh, kw) of output pixel p = oh * W + ow reads input (oh + r, ow + d), r = kh * d_h - pad_top
and d = kw * d_w - pad_left. The copy of a plane holds x - x_zero_point as floats, with zero rows
above and below where the taps reach into the padding, and a zero margin at either end: the tap
is then element p + (r - first_row) * W + d + margin of the copy, for every pixel alike. Where
d != 0 the pixels of the first or last columns read a neighbouring row's value instead of
padding; the taps of each d are summed apart and multiplied by that shift's column mask (1.0
where ow + d is inside the row, else 0.0) before they join the sum. The mask of pixel p depends
on p mod W only, so the loops run over periods of lcm(W, lanes) pixels, and the mask of a vector
is a vector load from a table of one period (plus a vector).

Against shifted_depthwise (k_w copies of each plane, each with its wrapped columns reset one by
one), this writes one copy as whole vectors and nothing else: on DS-CNN's 25x5 planes the
copies and resets were half of the depthwise kernels' time.

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
from aot.kernel.ir import INDEX, Buffer, Declare, Expr, Load, MulAdd, Stmt, Store, Var, VecStore, cast, const
from aot.kernel.vectorize import lanewise, narrowed_store
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.integer_terms import ACCUMULATOR, PerIndex, channel_locals
from aot.ops.quantized.shifted_depthwise import BLOCK_BYTES, Finish, StoreAt
from aot.ops.scratch import scratch_tensor

# The column masks' period, at most, in floats: lcm(W, lanes) is 80 for DS-CNN's 5-pixel rows and
# 48 for VWW's 48-, 24-, 12- and 6-pixel ones; a row of odd width near 1000 would need 16000.
MAX_PERIOD = 1024
# Floats hold every integer up to this exactly.
EXACT_FLOAT = 2 ** 24


def masked_period(g: ConvGeometry, lanes: int) -> int | None:
    """lcm(W, lanes), the pixels after which the column masks repeat, where this form applies to
    the depthwise convolution `g` (shifted_depthwise.vector_lanes gave `lanes`): unit strides,
    output rows as wide as the input's and a period of at most MAX_PERIOD; else None."""
    width = g.out_spatial[1]
    if g.strides != (1, 1) or width != g.in_spatial[1]:
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


class _Layout:
    """One channel's copy: `margin` zeros, the rows first_row .. out_h - 1 + last_row of the
    input (zero rows outside it), `margin` zeros again."""

    def __init__(self, g: ConvGeometry, lanes: int, period: int) -> None:
        (d_h, d_w), (p_t, p_l) = g.dilations, g.pad_begin
        (self.out_h, self.width), self.in_h = g.out_spatial, g.in_spatial[0]
        self.lanes, self.period = lanes, period
        self.taps = [(kh * d_h - p_t, kw * d_w - p_l) for kh in range(g.kernel[0]) for kw in range(g.kernel[1])]
        rows = [r for r, _ in self.taps]
        self.first_row, self.last_row = min(rows), max(rows)
        self.margin = max(abs(d) for _, d in self.taps)
        self.shifts = sorted({d for _, d in self.taps if d != 0})  # one mask each
        self.size = (self.out_h + self.last_row - self.first_row) * self.width + 2 * self.margin

    def tap(self, slot: Expr, t: int, p: Expr) -> Expr:
        r, d = self.taps[t]
        return slot * self.size + self.margin + (r - self.first_row) * self.width + d + p

    def input_rows(self) -> range:
        """The input rows the copy holds (the others are padding: zeros)."""
        return range(max(self.first_row, 0), min(self.out_h - 1 + self.last_row, self.in_h - 1) + 1)

    def masks(self) -> np.ndarray:
        """[shift][j]: 1.0 where column (j mod W) + shift is inside the row, for j in one period
        and one vector more (a vector may start at the period's last pixel)."""
        columns = np.arange(self.period + self.lanes) % self.width
        return np.stack([((columns + d >= 0) & (columns + d < self.width)).astype(np.float32)
                         for d in self.shifts]).reshape(len(self.shifts), -1)


def masked_depthwise(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, x: Tensor,
                     x_zp: Expr, weights: Buffer, init: PerIndex, float_start: bool, finish: Finish,
                     store: StoreAt, lanes: int, overlap: bool) -> list[Stmt]:
    """The convolution (masked_period applies), storing output pixel p of plane (n, m) at
    store(n, m, 0, p). `init`: each channel's start without the x_zero_point term (the copies
    hold x - x_zero_point). `float_start`: float_start_fits. `finish` takes an int32
    accumulator, or a float32 one holding an exact integer."""
    period = masked_period(g, lanes)
    assert period is not None
    layout = _Layout(g, lanes, period)
    per_group = g.out_channels // g.groups
    block = max(1, min(g.groups, BLOCK_BYTES // (layout.size * 4)))
    copies = kb.output(scratch_tensor(ctx, node, (block * layout.size,), np.float32, "masked")).buffer
    masks = kb.input(ctx.shared_constant(layout.masks(), f"column_masks_{layout.width}")).buffer
    src = kb.input(x).buffer
    zero_point = cast(cast(x_zp, ACCUMULATOR), "float32")
    rows = layout.input_rows()
    plane_size = layout.in_h * layout.width

    def copy(n: Expr, group: Expr, slot: Expr) -> list[Stmt]:
        first = (n * g.channels + group) * plane_size + rows.start * layout.width
        at = slot * layout.size + layout.margin + (rows.start - layout.first_row) * layout.width

        def element(i: Expr) -> Stmt:
            return Store(copies, at + i, cast(cast(Load(src, first + i), ACCUMULATOR), "float32") - zero_point)

        return _vector_run(kb, len(rows) * layout.width, lanes, element)

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
    return zero + kb.loops([g.batch], lambda n: blocks(kb, g.groups, block, lambda first, count: block_of(
        n[0], first, count), "b"), prefix="n")


def _masked_sum(layout: _Layout, taps: list[Expr], weights: list[Var], mask: Callable[[int], Expr],
                start: Var | None) -> Expr:
    """start + the unshifted taps times their weights + each shift's mask times its taps' sum."""
    def chain(acc: Expr | None, members: list[int]) -> Expr:
        for t in members:
            acc = taps[t] * weights[t] if acc is None else MulAdd(acc, taps[t], weights[t])
        assert acc is not None
        return acc

    by_shift = {d: [t for t, (_, td) in enumerate(layout.taps) if td == d] for d in [0, *layout.shifts]}
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
