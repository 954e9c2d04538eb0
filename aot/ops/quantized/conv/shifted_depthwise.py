"""int8 depthwise convolutions on x86, summed in float32 over the flattened output plane: each
tap of a run of output pixels is one vector load.

Tap (kh, kw) of output pixel (oh, ow) reads input row s_h * oh + kh * dil_h - pad_top, that is
s_h * (oh + r) + a with a = that offset mod s_h (the row phase) and r its floor quotient; and
column s_w * (ow + d) + b likewise. A copy of the channel for each (a, b, d) the taps use holds,
at row i and column j of an out_w-wide grid, input (s_h * i + a, s_w * (j + d) + b) as a float,
or x_zero_point where that is outside the input (padding, and the columns that would wrap into
the neighbouring row). Tap (kh, kw) of output pixel p = oh * out_w + ow is then element
p + r * out_w of its copy: runs of output pixels are runs of every copy, requantised in
registers and stored as bytes (NarrowStore). Unit stride: k_w copies, each the plane shifted
(one contiguous copy, the wrapped columns then reset); stride 2 (MobileNet's downsampling
layers): 3x3 taps use 6 copies of a quarter of the plane each.

The padded-grid form this replaces on x86 (integer_conv._flat_depthwise) copied the plane into
a padded plane, then into phase planes, computed junk columns past each row and copied the
finished pixels out with short loops: 60% of VWW's and DS-CNN's int8 runs, twice the float
depthwise's time.

The taps are the input values themselves (the zero point folded into the start, as elsewhere),
so every product and partial sum is an integer below 2**24: the float sum is the int32 one.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Expr, Load, Stmt, Store, cast, const
from aot.kernel.vectorize import narrowed_store
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.integer_terms import PerIndex, channel_locals, tap_sum
from aot.ops.scratch import scratch_tensor

Finish = Callable[[Expr, Expr], Expr]
StoreAt = Callable[[Expr, Expr, Expr, Expr, Expr], Stmt]  # (n, m, oh, ow, value)

# The shifted copies of one block of channels, at most. A block's copies are all written before
# any is read, so the vector loads never wait on the copies' scalar column stores (a load spanning
# several recent stores is not forwarded), as in the float FlatDepthwise. Small, because the copies
# live in the arena: 16 KiB took DS-CNN's int8 arena from 0.25 to 0.39 of the float one's for
# no gain; at 4 KiB (2 of its 125-pixel channels) it runs as fast.
BLOCK_BYTES = 4 * 1024


def vector_lanes(g: ConvGeometry, lanes: int) -> int | None:
    """The vector width of the shifted form for this depthwise convolution on a target of
    `lanes` floats, or None where it does not apply: fewer output pixels than one vector of 8."""
    pixels = g.out_spatial[0] * g.out_spatial[1]
    if g.group_in != 1 or lanes < 8 or pixels < 8:
        return None
    return 16 if lanes >= 16 and pixels >= 16 else 8


Key = tuple[int, int, int]  # (row phase a, column phase b, column shift d)


class _Layout:
    """The copies of a block of channels: copy `key` of slot s starts at
    (s * len(keys) + keys.index(key)) * size; row i of it at (i - first_row) * out_w."""

    def __init__(self, g: ConvGeometry) -> None:
        (s_h, s_w), (d_h, d_w), (p_t, p_l) = g.strides, g.dilations, g.pad_begin
        (self.out_h, self.out_w), (self.in_h, self.in_w) = g.out_spatial, g.in_spatial
        self.strides = s_h, s_w
        self.taps = [(divmod(kh * d_h - p_t, s_h), divmod(kw * d_w - p_l, s_w))
                     for kh in range(g.kernel[0]) for kw in range(g.kernel[1])]  # ((r, a), (d, b)) per tap
        self.keys: list[Key] = sorted({(a, b, d) for (_, a), (d, b) in self.taps})
        rows = [r for (r, _), _ in self.taps]
        self.first_row = min(rows)
        self.size = (self.out_h + max(rows) - self.first_row) * self.out_w
        # Strided copies gather from the plane converted to floats first: gathered bytes became
        # scalar loads and conversions (78% of VWW's stride-2 depthwise kernels), strided floats
        # vector permutes.
        self.gathers = (s_h, s_w) != (1, 1) or self.out_w != self.in_w

    def base(self, slot: Expr, key: Key) -> Expr:
        return (slot * len(self.keys) + self.keys.index(key)) * self.size

    def tap(self, slot: Expr, t: int, p: Expr) -> Expr:
        (r, a), (d, b) = self.taps[t]
        return self.base(slot, (a, b, d)) + p + (r - self.first_row) * self.out_w

    def rows(self, a: int) -> range:
        """The copy rows i whose input row s_h * i + a is inside the input."""
        last = self.first_row + self.size // self.out_w
        return range(max(self.first_row, 0), min(last, (self.in_h - 1 - a) // self.strides[0] + 1))

    def columns(self, b: int, d: int) -> range:
        """The copy columns j whose input column s_w * (j + d) + b is inside the input."""
        return range(max(0, -d), min(self.out_w, (self.in_w - 1 - b) // self.strides[1] - d + 1))


def _copy(kb: KernelBuilder, layout: _Layout, shifted: Buffer, read: Callable[[Expr], Expr], slot: Expr, key: Key,
          fill: Expr) -> list[Stmt]:
    """Copy `key` of the input plane (read(i): its element i as a float) into `slot`. Only the
    elements inside the input are written: the others hold the zero point the kernel filled in
    first, for every channel alike. Unit strides over rows as wide as the input's copy the rows as
    one run of the plane, then reset the columns that run wrapped into from the neighbouring rows;
    the others gather (layout.gathers)."""
    a, b, d = key
    rows, cols = layout.rows(a), layout.columns(b, d)
    if not rows or not cols:
        return []
    base = layout.base(slot, key) + -layout.first_row * layout.out_w  # row 0's start
    if layout.gathers:
        s_h, s_w = layout.strides
        return kb.loops([len(rows), len(cols)], lambda i: [Store(
            shifted, base + (i[0] + rows.start) * layout.out_w + i[1] + cols.start,
            read(((i[0] + rows.start) * s_h + a) * layout.in_w + (i[1] + cols.start + d) * s_w + b))], prefix="s")
    width = layout.out_w
    first, last = rows.start * width + cols.start, (rows.stop - 1) * width + cols.stop
    out = kb.loops([last - first], lambda i: [Store(shifted, base + first + i[0], read(i[0] + (first + d)))],
                   prefix="s")
    for column in [j for j in range(width) if j not in cols]:
        inner = range(rows.start + (column < cols.start), rows.stop - (column >= cols.stop))
        if inner:
            out += kb.loops([len(inner)], lambda r, column=column, inner=inner: [
                Store(shifted, base + (r[0] + inner.start) * width + column, fill)], prefix="m")
    return out


def shifted_depthwise(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, x: Tensor,
                      x_zp: Expr, weights: Buffer, init: PerIndex, *, finish: Finish, store: StoreAt, lanes: int,
                      overlap: bool) -> list[Stmt]:
    """The convolution (vector_lanes gave `lanes`), storing output pixel p of plane (n, m) at
    store(n, m, 0, p): the caller's store indexes the output flat. `overlap`: storing an output
    twice is harmless, so a ragged last run is one vector ending at the plane's end."""
    layout = _Layout(g)
    per_group = g.out_channels // g.groups
    copy_bytes = len(layout.keys) * layout.size * 4
    block = max(1, min(g.groups, BLOCK_BYTES // copy_bytes))
    shifted = kb.output(scratch_tensor(ctx, node, (block * len(layout.keys) * layout.size,), np.float32,
                                       "shifted")).buffer
    src = kb.input(x).buffer
    fill = cast(x_zp, "float32")
    pixels = layout.out_h * layout.out_w

    plane_size = layout.in_h * layout.in_w
    floats = kb.output(scratch_tensor(ctx, node, (plane_size,), np.float32, "floats")).buffer \
        if layout.gathers else None

    def copies(n: Expr, group: Expr, slot: Expr) -> list[Stmt]:
        plane = (n * g.channels + group) * plane_size
        if floats is None:
            return [stmt for key in layout.keys for stmt in _copy(
                kb, layout, shifted, lambda i: cast(Load(src, plane + i), "float32"), slot, key, fill)]
        convert = kb.loops([plane_size], lambda i: [Store(floats, i[0], cast(Load(src, plane + i[0]), "float32"))],
                           prefix="f")
        return convert + [stmt for key in layout.keys for stmt in _copy(
            kb, layout, shifted, lambda i: Load(floats, i), slot, key, fill)]

    def outputs(n: Expr, group: Expr, slot: Expr, j: Expr) -> list[Stmt]:
        m = group * per_group + j
        decls, locals_, start = channel_locals(kb, weights, init, m, len(layout.taps), "float32")

        def pixel(p: Expr) -> Stmt:
            sum_ = tap_sum([Load(shifted, layout.tap(slot, t, p)) for t in range(len(layout.taps))],
                           locals_, start, True)
            return store(n, m, const(0, INDEX), p, finish(sum_, m))

        return decls + _runs(kb, pixels, lanes, overlap, pixel)

    def block_of(n: Expr, first: Expr, count: int) -> list[Stmt]:
        return (kb.loops([count], lambda s: copies(n, first + s[0], s[0]), prefix="c")
                + kb.loops([count, per_group], lambda i: outputs(n, first + i[0], i[0], i[1]), prefix="o"))

    zero = kb.loops([shifted.size], lambda i: [Store(shifted, i[0], fill)], prefix="z")
    return zero + kb.loops([g.batch], lambda n: blocks(kb, g.groups, block, lambda first, count: block_of(
        n[0], first, count), "b"), prefix="n")


def _runs(kb: KernelBuilder, pixels: int, lanes: int, overlap: bool, pixel: Callable[[Expr], Stmt]) -> list[Stmt]:
    """`pixel(p)` over [0, pixels) as vectors of `lanes` (NarrowStore), the ragged rest one vector
    ending at the end when `overlap`, else a scalar loop; the whole as a scalar loop where the
    store has no vector form."""
    def vector(base: Expr) -> Stmt | None:
        return narrowed_store(pixel(base), pixel(base + 1), lanes)

    full, rest = divmod(pixels, lanes)
    if vector(const(0, INDEX)) is None:
        return kb.loops([pixels], lambda p: [pixel(p[0])], prefix="p")
    out = kb.loops([full], lambda v: [_stmt(vector(v[0] * lanes))], prefix="v")
    if rest and overlap:
        out.append(_stmt(vector(const(pixels - lanes, INDEX))))
    elif rest:
        out += kb.loops([rest], lambda p: [pixel(p[0] + full * lanes)], prefix="p")
    return out


def _stmt(stmt: Stmt | None) -> Stmt:
    assert stmt is not None  # the probe at pixel 0 had a vector form: so has every other pixel
    return stmt
