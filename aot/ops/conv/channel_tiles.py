"""Conv as register tiles over output channels (TiledConv's channels mode, chosen by
algorithm.channel_tiles_pay): a 1x1 convolution over an image whose pixels fill vectors badly
turns the tile around, vectors over output channels and one pixel per row."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, Load, Stmt, Store, binary, cast, const
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import slot_blocks
from aot.ops.contraction.register_tiles import Reduction, TileOperands, TileOutput, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.pixel_tiles import WIDE_LANES, TiledConv
from aot.ops.gemm import pack_column_panels
from aot.ops.scratch import scratch_tensor

# A block of output channels whose weight panel is larger than this splits its reduction into
# slabs (ChannelTiles._slabs) of about SLAB_BYTES of weights: read from memory once, a slab then
# serves every block of pixels from L1, where a whole panel (ResNet-50's 2048 x 32 floats, 256
# KiB) served the later blocks from L2 and left the first waiting on memory.
SLAB_PANEL_BYTES = 64 * 1024
SLAB_BYTES = 16 * 1024


class ChannelTiles(TiledConv):
    def _prepare(self, ctx: LoweringContext, node: Node, w: Tensor) -> None:
        self._init_channels(ctx, node, w, self.s.out_h * self.s.out_w)

    def emit(self, n: Expr, g: Expr) -> list[Stmt]:
        """Every group at once (there is one)."""
        return self._channels(n)

    def _init_channels(self, ctx: LoweringContext, node: Node, w: Tensor, pixels: int) -> None:
        """A 1x1 convolution over an image whose pixels fill vectors badly (the last stages of
        mobile and residual networks: 3x3 or 7x7 images with hundreds of channels; 49 pixels take
        64 lanes) turns the tile around: its vectors
        run over output channels, whose weights are stored as column panels of W^T, and each row
        is one pixel, broadcast from the input. The tile lands in a small scratch that a second
        pass writes out channel-major, adding the bias and the fused epilogue."""
        s, tile = self.s, self.tile
        if not (s.k_h == s.k_w == 1 and s.s_h == s.s_w == 1):
            tile = tile.one_by_one()  # a tile's pixels cross the image's rows: not consecutive
        self.mode = "channels"
        # 512-bit vectors: four of output channels by 6 pixels (24 accumulators, 10 loads per 24
        # multiply-adds) rather than two by 10 (12 loads per 20): ResNet-50's 1x1 convs at 7x7
        # ran at 135-148 GFLOP/s against onnxruntime's 161 on an AVX-512 Xeon.
        self.cols = tile.cols * (2 if tile.lanes >= WIDE_LANES and tile.registers >= 32 else 1)
        self.rows = tile.rows_for(self.cols, pixels)
        assert w.data is not None
        weights_t = np.ascontiguousarray(np.asarray(w.data).reshape(s.out_channels, -1).T)  # [K][OC]
        self.wbuf = self.kb.input(ctx.constant(pack_column_panels(weights_t, self.cols), w.name)).buffer
        channel_blocks, pixel_blocks = -(-s.out_channels // self.cols), -(-pixels // self.rows)
        # Threads split the channel blocks, or the pixel blocks when there is one channel block.
        self.split_pixels = self.parallel and channel_blocks == 1
        self.slots = self._slots(pixel_blocks if self.split_pixels else channel_blocks)
        itemsize = weights_t.dtype.itemsize
        self.slab = 0
        if self.slots == 1 and pixel_blocks > 1 and self.k * self.cols * itemsize > SLAB_PANEL_BYTES:
            self.slab = max(1, SLAB_BYTES // (self.cols * s.k_h * s.k_w * itemsize))  # input channels per slab
        shape = (pixels, self.cols) if self.slab else (self.slots, self.rows, self.cols)
        self.scratch = self.kb.output(scratch_tensor(ctx, node, shape, weights_t.dtype, "tile")).buffer
        # Taps in a loop over their offsets where the tile is tight in registers; not on targets
        # with lane broadcasts, whose tiles here are measured written out.
        if s.k_h * s.k_w > 1 and not self.slab and self.tile.steps_in_a_loop(self.rows, self.cols, self.k):
            self.taps = self._tap_table(ctx, node)

    def _channels(self, n: Expr) -> list[Stmt]:
        s, kb, k = self.s, self.kb, self.k
        pixels = s.out_h * s.out_w
        pointwise = s.k_h == s.k_w == 1 and s.s_h == s.s_w == 1

        def a_at(p0: Expr, i: int, tap: list[Expr]) -> Expr:
            """Input of tap (c, kh, kw), or step k of the loop over the taps' offsets, for output
            pixel p0 + i, row i of the block of pixels that starts at p0 (the input is the padded
            image)."""
            if self.taps is None:
                return at_tap(p0, i, tap)
            first = at_tap(p0, i, [const(0, INDEX)] * 3)
            return Load(first.buffer, first.index + cast(Load(self.taps, tap[0]), INDEX))

        def at_tap(p0: Expr, i: int, tap: list[Expr]) -> Load:
            c, kh, kw = tap
            p = p0 + i
            if pointwise:
                return Load(self.xv.buffer, self.xv.index([n, c, 0, 0]) + p)
            if s.out_w % self.rows == 0:
                # Blocks start at multiples of the rows, which divide the image's width: a block's
                # pixels share an image row, and its broadcasts are consecutive floats, which
                # armv7 gcc computes from one address (`python -m benchmarks.arm` on MNIST).
                oh, ow = binary("div", p0, s.out_w), binary("mod", p0, s.out_w) + i
            else:
                oh, ow = binary("div", p, s.out_w), binary("mod", p, s.out_w)
            return Load(self.xv.buffer, self.xv.index([n, c, 0, 0]) + (oh * s.s_h + kh * s.d_h) * s.in_w
                        + ow * s.s_w + kw * s.d_w)

        def write(j0: Expr, p0: Expr, base: Expr, count: int, width: int) -> list[Stmt]:
            def one(idx: list[Expr]) -> list[Stmt]:
                i, j = idx
                oc, p = j0 + j, p0 + i
                value: Expr = Load(self.scratch, base + i * self.cols + j)
                if self.bv is not None:
                    value = value + self.bv.load([oc])
                apply = self._finish(n, oc, p, None)
                return [Store(self.yv.buffer, self.yv.index([n, oc, const(0, INDEX), const(0, INDEX)]) + p,
                              apply(value) if apply is not None else value)]

            return kb.loops([count, width], one, prefix="c")

        if self.slab:
            return blocks(kb, s.out_channels, self.cols, lambda j0, width: self._slabs(n, j0, width, a_at, write), "j")

        if self.taps is not None:
            reduction = Reduction((s.group_in * s.k_h * s.k_w,))
        else:
            reduction = Reduction((s.group_in, s.k_h, s.k_w), unrolled=2)

        def flat(tap: list[Expr]) -> Expr:
            return tap[0] if self.taps is not None else (tap[0] * s.k_h + tap[1]) * s.k_w + tap[2]

        # Channel blocks outermost: one panel of weights (k x cols) is reused from cache by every
        # block of pixels, while the (small) image streams through it.
        def channel_block(j0: Expr, width: int, channel_slot: Expr) -> list[Stmt]:
            def pixel_block(p0: Expr, count: int, pixel_slot: Expr | None = None) -> list[Stmt]:
                base = (pixel_slot if pixel_slot is not None else channel_slot) * (self.rows * self.cols)
                tile = register_tile(
                    kb, self.dt, self.tile.lanes, count, width, reduction,
                    TileOperands(a_at=lambda i, tap: a_at(p0, i, tap),
                                 b_base=lambda tap: (self.wbuf, j0 * k + flat(tap) * width)),
                    TileOutput(init=[const(0.0, self.dt)] * count, out=self.scratch,
                               out_at=lambda i, j: base + const(i * self.cols, INDEX) + j))
                return tile + write(j0, p0, base, count, width)
            if self.split_pixels and self.slots > 1:
                return slot_blocks(kb, pixels, self.rows, pixel_block, "p", self.slots)
            return blocks(kb, pixels, self.rows, pixel_block, "p")

        if self.slots > 1 and not self.split_pixels:
            return slot_blocks(kb, s.out_channels, self.cols, channel_block, "j", self.slots)
        return blocks(kb, s.out_channels, self.cols, lambda j0, width: channel_block(j0, width, const(0, INDEX)), "j")

    def _slabs(self, n: Expr, j0: Expr, width: int, a_at: Callable[[Expr, int, list[Expr]], Expr],
               write: Callable[[Expr, Expr, Expr, int, int], list[Stmt]]) -> list[Stmt]:
        """One block of output channels with the reduction split into slabs of input channels:
        every block of pixels runs one slab (its weights, SLAB_BYTES, stay in L1) before the
        next slab starts, their partial sums kept in the scratch ([pixel][column]); then the
        outputs are written. Each output's sum keeps the sequential order of the channels."""
        s, kb = self.s, self.kb

        def slab(c0: Expr, channels: int, resume: bool) -> list[Stmt]:
            def pixel_block(p0: Expr, count: int) -> list[Stmt]:
                return register_tile(
                    kb, self.dt, self.tile.lanes, count, width, Reduction((channels, s.k_h, s.k_w), unrolled=2),
                    TileOperands(
                        a_at=lambda i, tap: a_at(p0, i, [c0 + tap[0], *tap[1:]]),
                        b_base=lambda tap: (self.wbuf, j0 * self.k
                                            + (((c0 + tap[0]) * s.k_h + tap[1]) * s.k_w + tap[2]) * width)),
                    TileOutput(init=[const(0.0, self.dt)] * count, out=self.scratch,
                               out_at=lambda i, j: (p0 + i) * self.cols + j, resume=resume))

            return blocks(kb, s.out_h * s.out_w, self.rows, pixel_block, "p")

        first = min(self.slab, s.group_in)
        stmts = slab(const(0, INDEX), first, resume=False)
        if s.group_in > first:
            stmts += blocks(kb, s.group_in - first, self.slab, lambda c0, count: slab(c0 + first, count, True), "s")
        return stmts + write(j0, const(0, INDEX), const(0, INDEX), s.out_h * s.out_w, width)
