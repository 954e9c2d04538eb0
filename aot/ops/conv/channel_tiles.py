"""Conv as register tiles over output channels (TiledConv's channels mode, chosen by
algorithm.channel_tiles_pay): a 1x1 convolution over an image whose pixels fill vectors badly
turns the tile around, vectors over output channels and one pixel per row."""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, Load, Stmt, Store, binary, const
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import slot_blocks
from aot.ops.contraction.register_tiles import Reduction, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.pixel_tiles import TiledConv
from aot.ops.gemm import pack_column_panels
from aot.ops.scratch import scratch_tensor


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
        self.mode = "channels"
        self.cols = tile.cols
        self.rows = tile.rows_for(self.cols, pixels)
        assert w.data is not None
        weights_t = np.ascontiguousarray(np.asarray(w.data).reshape(s.out_channels, -1).T)  # [K][OC]
        self.wbuf = self.kb.input(ctx.constant(pack_column_panels(weights_t, self.cols), w.name)).buffer
        channel_blocks, pixel_blocks = -(-s.out_channels // self.cols), -(-pixels // self.rows)
        # Threads split the channel blocks, or the pixel blocks when there is one channel block.
        self.split_pixels = self.parallel and channel_blocks == 1
        self.slots = self._slots(pixel_blocks if self.split_pixels else channel_blocks)
        self.scratch = self.kb.output(scratch_tensor(ctx, node, (self.slots, self.rows, self.cols), weights_t.dtype,
                                                     "tile")).buffer

    def _channels(self, n: Expr) -> list[Stmt]:
        s, kb, k = self.s, self.kb, self.k
        pixels = s.out_h * s.out_w
        pointwise = s.k_h == s.k_w == 1 and s.s_h == s.s_w == 1

        def a_at(p: Expr, tap: list[Expr]) -> Expr:
            """Input of tap (c, kh, kw) for output pixel p (the input is the padded image)."""
            c, kh, kw = tap
            if pointwise:
                return Load(self.xv.buffer, self.xv.index([n, c, 0, 0]) + p)
            oh, ow = binary("div", p, s.out_w), binary("mod", p, s.out_w)
            return Load(self.xv.buffer, self.xv.index([n, c, 0, 0]) + (oh * s.s_h + kh * s.d_h) * s.in_w
                        + ow * s.s_w + kw * s.d_w)

        # Channel blocks outermost: one panel of weights (k x cols) is reused from cache by every
        # block of pixels, while the (small) image streams through it.
        def channel_block(j0: Expr, width: int, channel_slot: Expr) -> list[Stmt]:
            def pixel_block(p0: Expr, count: int, pixel_slot: Expr | None = None) -> list[Stmt]:
                base = (pixel_slot if pixel_slot is not None else channel_slot) * (self.rows * self.cols)
                tile = register_tile(
                    kb, self.dt, self.tile.lanes, count, width, Reduction((s.group_in, s.k_h, s.k_w), unrolled=2),
                    a_at=lambda i, tap: a_at(p0 + i, tap),
                    b_base=lambda tap: (self.wbuf, j0 * k + ((tap[0] * s.k_h + tap[1]) * s.k_w + tap[2]) * width),
                    init=[const(0.0, self.dt)] * count, out=self.scratch,
                    out_at=lambda i, j: base + const(i * self.cols, INDEX) + j)

                def write(idx: list[Expr]) -> list[Stmt]:
                    i, j = idx
                    oc, p = j0 + j, p0 + i
                    value: Expr = Load(self.scratch, base + i * self.cols + j)
                    if self.bv is not None:
                        value = value + self.bv.load([oc])
                    apply = self._finish(n, oc, p, None)
                    return [Store(self.yv.buffer, self.yv.index([n, oc, const(0, INDEX), const(0, INDEX)]) + p,
                                  apply(value) if apply is not None else value)]

                return tile + kb.loops([count, width], write, prefix="c")
            if self.split_pixels and self.slots > 1:
                return slot_blocks(kb, pixels, self.rows, pixel_block, "p", self.slots)
            return blocks(kb, pixels, self.rows, pixel_block, "p")

        if self.slots > 1 and not self.split_pixels:
            return slot_blocks(kb, s.out_channels, self.cols, channel_block, "j", self.slots)
        return blocks(kb, s.out_channels, self.cols, lambda j0, width: channel_block(j0, width, const(0, INDEX)), "j")
