"""int8 depthwise convolutions with unit stride and 'same' padding on x86, summed in float32 over
the flattened plane: the float FlatDepthwise's layout (aot/ops/conv/flat_depthwise.py) for the
integer taps.

Output pixel p = oh * W + ow of tap (kh, kw) reads input pixel p + (kh - pad_top) * W + d,
d = kw - pad_left, across row ends. Copy kw of a channel holds the plane (as floats) with the
columns where that read would wrap into the neighbouring row set to x_zero_point, and margins of
x_zero_point above and below: so every tap of a run of pixels is one vector load, and the outputs
are whole runs of the NCHW output, requantised in registers and stored as bytes (NarrowStore).
Per channel that is k_w contiguous copies and the vectors, where the padded-grid form
(integer_conv._flat_depthwise) copied the plane into a padded plane, then into phase planes,
computed the junk columns past each row and copied the finished pixels out with short loops
(VWW's 6x6 and 3x3 planes, DS-CNN's 25x5: 60% of the int8 runs, twice the float depthwise's time).

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
    """The vector width of the shifted form for this convolution on a target of `lanes` floats,
    or None where it does not apply: not unit stride and 'same' padding, or fewer pixels than
    one vector of 8."""
    (out_h, out_w), (in_h, in_w) = g.out_spatial, g.in_spatial
    same = (tuple(g.strides) == (1, 1) and tuple(g.dilations) == (1, 1) and (out_h, out_w) == (in_h, in_w)
            and min(g.pad_begin) >= 0 and g.group_in == 1)
    pixels = out_h * out_w
    if not same or lanes < 8 or pixels < 8:
        return None
    return 16 if lanes >= 16 and pixels >= 16 else 8


class _Layout:
    """The k_w shifted copies of a block of channels: copy kw of slot s starts at
    (s * k_w + kw) * size, its plane at `margin` in it."""

    def __init__(self, g: ConvGeometry) -> None:
        (k_h, k_w), (p_h, p_w) = g.kernel, g.pad_begin
        self.width = g.in_spatial[1]
        self.pixels = g.in_spatial[0] * self.width
        self.margin = p_h * self.width + p_w
        self.size = self.margin + self.pixels + (k_h - 1 - p_h) * self.width + (k_w - 1 - p_w)
        self.k_w, self.p_h, self.p_w, self.k_h = k_w, p_h, p_w, k_h

    def at(self, slot: Expr, kw: int, i: Expr) -> Expr:
        return (slot * self.k_w + kw) * self.size + self.margin + i

    def tap(self, slot: Expr, kh: int, kw: int, p: Expr) -> Expr:
        return self.at(slot, kw, p + ((kh - self.p_h) * self.width + kw - self.p_w))

    def wrapped_columns(self, kw: int) -> list[int]:
        """The columns c of copy kw no output reads at c (the input column c - d would leave the row)."""
        d = kw - self.p_w
        return [c for c in range(self.width) if not 0 <= c - d < self.width]


def shifted_depthwise(node: Node, ctx: LoweringContext, kb: KernelBuilder, g: ConvGeometry, x: Tensor,
                      x_zp: Expr, weights: Buffer, init: PerIndex, finish: Finish, store: StoreAt, lanes: int,
                      overlap: bool) -> list[Stmt]:
    """The convolution (vector_lanes gave `lanes`), storing output pixel p of plane (n, m) at
    store(n, m, 0, p): the caller's store indexes the output flat. `overlap`: storing an output
    twice is harmless, so a ragged last run is one vector ending at the plane's end."""
    layout = _Layout(g)
    per_group = g.out_channels // g.groups
    block = max(1, min(g.groups, BLOCK_BYTES // (layout.k_w * layout.size * 4)))
    shifted = kb.output(scratch_tensor(ctx, node, (block * layout.k_w * layout.size,), np.float32,
                                       "shifted")).buffer
    src = kb.input(x).buffer
    fill = cast(x_zp, "float32")
    taps = [(kh, kw) for kh in range(layout.k_h) for kw in range(layout.k_w)]

    def copies(n: Expr, group: Expr, slot: Expr) -> list[Stmt]:
        plane = (n * g.channels + group) * layout.pixels
        out: list[Stmt] = []
        for kw in range(layout.k_w):
            out += kb.loops([layout.pixels], lambda i, kw=kw: [
                Store(shifted, layout.at(slot, kw, i[0]), cast(Load(src, plane + i[0]), "float32"))], prefix="s")
            for column in layout.wrapped_columns(kw):
                out += kb.loops([g.in_spatial[0]], lambda r, kw=kw, column=column: [
                    Store(shifted, layout.at(slot, kw, r[0] * layout.width + column), fill)], prefix="m")
        return out

    def outputs(n: Expr, group: Expr, slot: Expr, j: Expr) -> list[Stmt]:
        m = group * per_group + j
        decls, locals_, start = channel_locals(kb, weights, init, m, len(taps), "float32")

        def pixel(p: Expr) -> Stmt:
            sum_ = tap_sum([Load(shifted, layout.tap(slot, kh, kw, p)) for kh, kw in taps], locals_, start, True)
            return store(n, m, const(0, INDEX), p, finish(sum_, m))

        return decls + _runs(kb, layout.pixels, lanes, overlap, pixel)

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
