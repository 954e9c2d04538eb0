"""Conv as register tiles (aot/ops/contraction/register_tiles.py): the fast path for every 1-D/2-D
convolution whose groups have several output channels.

Each tile is a block of output channels (rows) by a run of output pixels (columns) of one output
row, accumulated over (input channel, kernel row, kernel column) with the kernel columns written
out. A 1x1, stride-1 convolution is a matrix product over the flattened image, so its pixel runs
cross output rows. Padding has been turned into a zero-bordered copy of the input (copies.py), so
every tap of every tile reads inside the image and no load is guarded. Which of the modes runs
(channels, flat, pointwise, grid, rows) is decided by algorithm.tile_mode.

The weights are repacked at compile time, block by block of output channels, so that the tile's
broadcasts walk memory contiguously: block b (rows oc0 .. oc0 + r) is stored as [K][r] at offset
oc0 * K, where K = group_in * k_h * k_w. The packed tensor replaces the ONNX weights in the
package (same size).
"""

from __future__ import annotations

import math

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Const, Expr, Load, Stmt, Store, Var, binary, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, mark_outer, parallel_blocks, pays, slot_blocks
from aot.ops.attrs import required_input
from aot.ops.contraction.register_tiles import Reduction, TileConfig, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.algorithm import ConvAlgorithm, TileMode, im2col_spec, interleave_rows
from aot.ops.conv.copies import im2col, padded_copy, strided_copy
from aot.ops.conv.geometry import ConvGeometry, ConvSpec
from aot.ops.conv.packing import pack_weights
from aot.ops.gemm import pack_column_panels
from aot.ops.scratch import scratch_tensor


def lower_conv_tiled(node: Node, ctx: LoweringContext, planar: ConvGeometry, algorithm: ConvAlgorithm) -> None:
    """Emit the Conv `node` (validated, `planar` its 2-D geometry) as register tiles over its
    input or the copy of it that `algorithm` names."""
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    in_hw, stride = planar.in_spatial, planar.strides[1]
    pad_begin, pad_end = list(planar.pad_begin), list(planar.pad_end)
    if algorithm.copy == "strided":
        copy, xv, _, _ = strided_copy(node, ctx, kb, x, in_hw, pad_begin, pad_end, stride,
                                      rows_first=algorithm.rows_first)
    elif algorithm.copy == "padded":
        copy, xv, _, _ = padded_copy(node, ctx, kb, x, in_hw, pad_begin, pad_end, algorithm.rows_first)
    else:
        copy, xv = [], View(kb.input(x).buffer, (planar.batch, planar.channels, *in_hw))
    spec = planar.spec(over_padded_copy=algorithm.copy != "none")
    yv = View(kb.output(final).buffer, (planar.batch, planar.out_channels, *planar.out_spatial))
    bv = kb.input(bias) if bias is not None else None
    parallel, split_blocks = _threads(ctx, planar)
    tiled = TiledConv(kb, ctx, node, spec, xv, w, yv, bv, epilogue, final.dtype.name, ctx.tiles, algorithm.mode,
                      parallel=split_blocks, rows_first=algorithm.rows_first)
    body = kb.loops([planar.batch], lambda idx: tiled.emit_image(idx[0]))
    ctx.emit(kb, copy + (mark_outer(body) if parallel and not split_blocks and tiled.shares_nothing else body))


def lower_conv_im2col(node: Node, ctx: LoweringContext, planar: ConvGeometry, algorithm: ConvAlgorithm) -> None:
    """Emit the Conv `node` as a copy of its column matrix and a matrix product over it (a
    pointwise convolution over the flattened pixels)."""
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    copy, cbuf, rows = im2col(node, ctx, kb, x, planar.in_spatial, planar.out_spatial, list(planar.kernel),
                              list(planar.strides), list(planar.dilations), list(planar.pad_begin))
    spec = im2col_spec(planar)
    yv = View(kb.output(final).buffer, (planar.batch, planar.out_channels, *planar.out_spatial))
    bv = kb.input(bias) if bias is not None else None
    parallel, split_blocks = _threads(ctx, planar)
    gemm = TiledConv(kb, ctx, node, spec, View(cbuf, (planar.batch, rows, *planar.out_spatial)), w, yv, bv,
                     epilogue, final.dtype.name, ctx.tiles, algorithm.mode, parallel=split_blocks)
    body = kb.loops([planar.batch], lambda idx: gemm.emit(idx[0], const(0, INDEX)))
    ctx.emit(kb, copy + (mark_outer(body) if parallel and not split_blocks and gemm.shares_nothing else body))


def _threads(ctx: LoweringContext, planar: ConvGeometry) -> tuple[bool, bool]:
    """Whether the convolution runs on threads, and whether it does by splitting the blocks of
    output channels of one image of one group (TiledConv `parallel`); otherwise several images
    or groups split the outermost of those loops (when the kernel has no shared scratch)."""
    macs = planar.batch * planar.out_channels * planar.group_in * math.prod(planar.out_spatial) \
        * planar.kernel[0] * planar.kernel[1]
    parallel = pays(ctx, macs)
    return parallel, parallel and planar.batch == 1 and planar.groups == 1


# An input image larger than this is not re-read by each block of output channels (see
# TiledConv.emit): about half of a big core's L2.
STREAM_LIMIT_BYTES = 512 * 1024
BAND_BYTES = 128 * 1024
BAND_TILE_BYTES = 8 * 1024

# Vectors of output pixels per flat depthwise tile: one broadcast weight feeds them all, and 8
# independent multiply-add chains cover the FMA latency.
FLAT_VECTORS = 8
# Scratch for the shifted copies of one block of channels: well inside L1.
FLAT_BLOCK_BYTES = 16 * 1024


class TiledConv:
    """Emits one image and group of a convolution as register tiles."""

    def __init__(self, kb: KernelBuilder, ctx: LoweringContext, node: Node, spec: ConvSpec, x: View, w: Tensor,
                 y: View, bias: View | None, epilogue: Epilogue, dtype: str, tile: TileConfig, mode: TileMode,
                 parallel: bool = False, rows_first: bool = False) -> None:
        """`x` is the (padded) input image, or for column strides above 1 (outside the
        channels mode) the phase-split copy made by strided_copy; `mode` from algorithm.tile_mode;
        `rows_first` when that copy is row-interleaved (interleave_rows).
        `parallel` (one image, one group): `emit` makes the blocks of output channels a parallel
        loop; the modes with a scratch (grid, channels) get one scratch per slot
        (aot/lowering/parallel.py slot_blocks)."""
        self.kb, self.s, self.xv, self.yv, self.bv = kb, spec, x, y, bias
        self.parallel = parallel
        self.slots = 1
        self.epilogue, self.dt, self.tile = epilogue, dtype, tile
        assert w.data is not None
        pixels = spec.out_h * spec.out_w
        self.mode = mode
        self.rows_first = rows_first
        assert not rows_first or interleave_rows(spec, self.mode)
        if self.mode == "channels":
            self._init_channels(ctx, node, w, pixels)
        elif self.mode == "flat":
            self._init_flat(ctx, node, pixels)
            width = self.width
        elif self.mode == "pointwise":
            width = min(tile.cols, pixels)
        elif self.mode == "grid":
            self.grid_size = (spec.out_h - 1) * spec.in_w + spec.out_w
            width = min(self.grid_size, tile.cols)
            if spec.per_group < tile.rows_for(width, spec.per_group + 1):  # few rows (depthwise): wider tiles
                width = min(self.grid_size, tile.lanes * max(1, min(4, tile.accumulators // spec.per_group)))
            # One block of channels at a time: the scratch holds `rows` grids (per slot).
            block_rows = tile.rows_for(width, spec.per_group)
            self.slots = self._slots(-(-spec.per_group // block_rows))
            self.grid_stride = block_rows * self.grid_size
            self.grid = kb.output(scratch_tensor(ctx, node, (self.slots, block_rows, self.grid_size), dtype,
                                                 "grid")).buffer
        else:
            width = min(tile.cols, spec.out_w)
        self.k = spec.group_in * spec.k_h * spec.k_w
        if self.mode != "channels":
            self.width = width
            self.rows = tile.rows_for(width, spec.per_group)
            weights = np.asarray(w.data)
            if rows_first:  # the reduction runs over (kernel row, channel, kernel column)
                weights = weights.reshape(spec.out_channels, spec.group_in, spec.k_h, spec.k_w).transpose(0, 2, 1, 3)
            packed = pack_weights(weights, spec.groups, self.rows)
            self.wbuf: Buffer = kb.input(ctx.constant(packed, w.name)).buffer
        # Side inputs of a fused epilogue that are whole tensors of the output's shape (or
        # scalars) can be addressed by the flat output index; others need the full index.
        self.flat_epilogue = all(t.shape == epilogue.shape or t.size == 1 for t in epilogue.inputs)
        probe = Var("probe", dtype)
        self.has_epilogue = epilogue.apply(probe, [const(0, INDEX)] * len(epilogue.shape)) is not probe

    @property
    def shares_nothing(self) -> bool:
        """Whether emit's statements for different images and groups touch disjoint memory
        (no scratch reused between them), so a loop over those may be parallel."""
        return self.mode in ("pointwise", "rows")

    def _slots(self, blocks_count: int) -> int:
        return min(SCRATCH_SLOTS, blocks_count) if self.parallel else 1

    def out_index(self, n: Expr, oc: Expr, oh: Expr, ow: Expr) -> list[Expr]:
        return [n, oc, ow] if self.s.nd == 1 else [n, oc, oh, ow]

    def emit_image(self, n: Expr) -> list[Stmt]:
        """Image n, every group."""
        if self.mode == "flat":
            return self._flat(n)
        return self.kb.loops([self.s.groups], lambda g: self.emit(n, g[0]), prefix="g")

    def emit(self, n: Expr, g: Expr) -> list[Stmt]:
        if self.mode == "flat":
            # Every group at once (emit_image's case); also where a caller sees one group: the
            # column matrix of a one-channel im2col is a one-channel "depthwise" conv.
            return self._flat(n)
        if self.mode == "channels":
            return self._channels(n)
        if self.mode == "grid":
            if self.slots > 1:
                return slot_blocks(self.kb, self.s.per_group, self.rows,
                                   lambda oc0, count, slot: self._grid(n, g, oc0, count, slot), "o", self.slots)
            return blocks(self.kb, self.s.per_group, self.rows,
                          lambda oc0, count: self._grid(n, g, oc0, count, const(0, INDEX)), "o")
        split = parallel_blocks if self.parallel else blocks
        if self.mode == "rows" and self._streams_input():
            # Output rows outermost: the input rows one output row reads (a few hundred KB at
            # most) stay in L2 for every block of channels, instead of each block streaming the
            # whole image again from L3 or memory. With the row-interleaved copy this took
            # VGG-19's 64-channel 224x224 conv from 44 to 39 ms (interleaved alone: 64 ms).
            return split(self.kb, self.s.out_h, 1, lambda oh, _: blocks(
                self.kb, self.s.per_group, self.rows, lambda oc0, count: self._row(n, g, oc0, count, oh), "o"), "h")
        s, cols = self.s, self.tile.cols
        itemsize = np.dtype(self.dt).itemsize
        if self.mode == "pointwise" and self._streams_input() and s.group_in * cols * itemsize <= BAND_TILE_BYTES:
            # Short reductions on big images: bands of pixels outermost, so a band of the input
            # (C x band) stays in L2 for every block of output channels instead of each block
            # streaming the whole image (a ResNet-50's 64 -> 256 1x1 convs at 56x56 with their
            # residual Add: 1.11 -> 1.02 ms). With longer reductions (a tile's input column
            # beyond a quarter of L1) the bands measured much slower (256 -> 64: 0.97 -> 1.73 ms).
            band = max(cols, BAND_BYTES // (s.group_in * itemsize) // cols * cols)

            def in_band(q0: Expr, width: int) -> list[Stmt]:
                return blocks(self.kb, s.per_group, self.rows, lambda oc0, count: blocks(
                    self.kb, width, cols, lambda p0, c: self._pointwise_tile(n, g, oc0, count, q0 + p0, c), "p"), "o")

            return split(self.kb, s.out_h * s.out_w, band, in_band, "q")
        body = {"pointwise": self._pointwise, "rows": self._rows}[self.mode]
        return split(self.kb, self.s.per_group, self.rows, lambda oc0, count: body(n, g, oc0, count), "o")

    def _streams_input(self) -> bool:
        """Whether one group's input image is too big to stay in cache between blocks of output
        channels (and there are several blocks)."""
        s = self.s
        image = s.group_in * s.in_h * s.in_w * np.dtype(self.dt).itemsize
        return s.per_group > self.rows and image > STREAM_LIMIT_BYTES

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

    def _init_flat(self, ctx: LoweringContext, node: Node, pixels: int) -> None:
        """A depthwise convolution with unit stride and 'same' padding computed over the flattened
        image (see _flat). The scratch holds the k_w shifted copies, with their margins, of a
        block of channels: all copies of a block are written before any is read, so the vector
        loads never wait on the copies' last scalar stores (store-to-load forwarding fails when
        a load spans several stores; copying and reading each channel in turn measured 20%
        slower on a keyword-spotting net)."""
        s = self.s
        self.mode = "flat"
        self.width = min(pixels, self.tile.lanes * FLAT_VECTORS)
        self.margin = s.p_h * s.in_w + s.p_w
        self.copy_size = self.margin + pixels + (s.k_h - 1 - s.p_h) * s.in_w + (s.k_w - 1 - s.p_w)
        per_channel = s.k_w * self.copy_size
        self.block = max(1, min(s.groups, FLAT_BLOCK_BYTES // (per_channel * np.dtype(self.dt).itemsize)))
        # Threads (one image): blocks of channels split over scratch slots (slot_blocks).
        self.slots = min(SCRATCH_SLOTS, -(-s.groups // self.block)) \
            if s.batch == 1 and pays(ctx, s.groups * pixels * s.k_h * s.k_w) else 1
        self.shifted = self.kb.output(scratch_tensor(ctx, node, (self.slots * self.block, per_channel), self.dt,
                                                     "shifted")).buffer

    def _flat(self, n: Expr) -> list[Stmt]:
        """Output pixel p = oh * W + ow of tap (kh, kw) reads input p + (kh - pad_top) * W + d,
        d = kw - pad_left, across row ends: so every tap of a run of output pixels is one vector
        load, whatever the row width (a 5-pixel row of a keyword-spotting net, 3x3 images at the
        end of a MobileNet), with no junk columns to compute and drop, unlike the padded grid.
        Where ow + d leaves the row, the flat index lands in the neighbouring row at a column
        that no valid tap with this d reads; copy kw of the channel has exactly those columns
        zeroed (and zero margins above and below), so it stands for the padding."""
        s, kb = self.s, self.kb
        pixels = s.out_h * s.out_w
        zero = const(0.0, self.dt)
        src = View(self.xv.buffer, (s.batch, s.channels, pixels))
        per_channel = s.k_w * self.copy_size
        tail = self.copy_size - self.margin - pixels

        def at(slot: Expr, kw: int, i: Expr) -> Expr:
            return slot * per_channel + kw * self.copy_size + i

        # The margins are never written by the copies: zero them once.
        stmts: list[Stmt] = []
        for kw in range(s.k_w):
            stmts += kb.loops([self.slots * self.block, self.margin], lambda i, kw=kw: [
                Store(self.shifted, at(i[0], kw, i[1]), zero)],
                              prefix="z")
            stmts += kb.loops([self.slots * self.block, tail], lambda i, kw=kw: [
                Store(self.shifted, at(i[0], kw, self.margin + pixels + i[1]), zero)], prefix="z")

        def copy(slot: Expr, c: Expr) -> list[Stmt]:
            body: list[Stmt] = []
            for kw in range(s.k_w):
                d = kw - s.p_w
                body += kb.loops([pixels], lambda i, kw=kw: [
                    Store(self.shifted, at(slot, kw, self.margin + i[0]), src.load([n, c, i[0]]))], prefix="s")
                first = s.in_w + d if d < 0 else 0
                body += kb.loops([s.in_h, abs(d)], lambda i, kw=kw, first=first: [
                    Store(self.shifted, at(slot, kw, self.margin + i[0] * s.in_w + first + i[1]), zero)], prefix="m")
            return body

        reduction = Reduction((1, s.k_h, s.k_w), unrolled=2)

        def compute(slot: Expr, c: Expr) -> list[Stmt]:
            def tile(p0: Expr, cols: int) -> list[Stmt]:
                def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
                    _, kh, kw = k
                    assert isinstance(kw, Const)  # unrolled: the copy is known here
                    shift = (kh - s.p_h) * s.in_w + (int(kw.value) - s.p_w)
                    return self.shifted, at(slot, int(kw.value), self.margin + p0 + shift)

                return self._tile(n, c, const(0, INDEX), 1, cols, reduction, b_base, p0, None, None)

            return blocks(kb, pixels, self.width, tile, "p")

        def block(c0: Expr, count: int, slot: Expr) -> list[Stmt]:
            first = slot * self.block
            return (kb.loops([count], lambda i: copy(first + i[0], c0 + i[0]), prefix="b")
                    + kb.loops([count], lambda i: compute(first + i[0], c0 + i[0]), prefix="b"))

        if self.slots > 1:
            return stmts + slot_blocks(kb, s.groups, self.block, block, "c", self.slots)
        return stmts + blocks(kb, s.groups, self.block, lambda c0, count: block(c0, count, const(0, INDEX)), "c")

    def _grid(self, n: Expr, g: Expr, oc0: Expr, count: int, slot: Expr) -> list[Stmt]:
        """Unit-stride convolutions with rows narrower than a vector: the outputs are computed on
        the padded input's grid, q = oh * padded_width + ow, where every tap reads x[q + offset]
        contiguously across row ends; the columns ow >= out_w of that grid are junk, which a
        second pass (with the fused epilogue) drops while copying the rest into the output.
        (Junk reads stay in the padded image: q stops at the last real output.)"""
        s, kb = self.s, self.kb
        reduction = Reduction((s.group_in, s.k_h, s.k_w), unrolled=2)
        stride_row = s.in_w
        base = slot * self.grid_stride

        def tile(q0: Expr, cols: int) -> list[Stmt]:
            def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
                c, kh, kw = k
                return self.xv.buffer, (self.xv.index([n, g * s.group_in + c, 0, 0]) + q0
                                        + kh * (s.d_h * stride_row) + kw * s.d_w)

            def out_at(i: int, j: Expr) -> Expr:
                return base + i * self.grid_size + q0 + j

            return register_tile(kb, self.dt, self.tile.lanes, count, cols, reduction, self._a_at(g, oc0, count),
                                 b_base, self._init(g, oc0, count), self.grid, out_at)

        stmts = blocks(kb, self.grid_size, self.width, tile, "q")

        def copy_out(idx: list[Expr]) -> list[Stmt]:
            i, oh, ow = idx
            oc = g * s.per_group + oc0 + i
            value = Load(self.grid, base + i * self.grid_size + oh * stride_row + ow)
            apply = self._finish(n, oc, oh * s.out_w + ow, (oh, ow))
            at = self.yv.index([n, oc, oh, ow])
            return [Store(self.yv.buffer, at, apply(value) if apply is not None else value)]

        return stmts + kb.loops([count, s.out_h, s.out_w], copy_out, prefix="g")

    def _a_at(self, g: Expr, oc0: Expr, count: int):
        s = self.s

        def a_at(i: int, k: list[Expr]) -> Expr:
            if self.rows_first:  # packed in (kernel row, channel, kernel column) order
                kc, kw = k
                kflat = kc * s.k_w + kw
            else:
                c, kh, kw = k
                kflat = (c * s.k_h + kh) * s.k_w + kw
            return Load(self.wbuf, (g * s.per_group + oc0) * self.k + kflat * count + i)
        return a_at

    def _init(self, g: Expr, oc0: Expr, count: int) -> list[Expr]:
        s = self.s
        if self.bv is None:
            return [const(0.0, self.dt)] * count
        return [self.bv.load([g * s.per_group + oc0 + i]) for i in range(count)]

    def _finish(self, n: Expr, oc: Expr, pixel: Expr, hw: tuple[Expr, Expr] | None):
        """The fused epilogue for output `pixel` (flat within the plane; (row, column) `hw` when
        known) of channel `oc`, or None when there is nothing to apply."""
        if not self.has_epilogue:
            return None
        s = self.s
        if self.flat_epilogue:
            flat = (n * s.out_channels + oc) * (s.out_h * s.out_w) + pixel
            return lambda value: self.epilogue.apply(value, flat_index=flat)
        if hw is None:
            hw = ((const(0, INDEX), pixel) if s.out_h == 1
                  else (binary("div", pixel, s.out_w), binary("mod", pixel, s.out_w)))
        index = self.out_index(n, oc, *hw)
        return lambda value: self.epilogue.apply(value, index)

    def _tile(self, n: Expr, g: Expr, oc0: Expr, count: int, cols: int, reduction: Reduction,
              b_base, first_pixel: Expr, row: Expr | None, first_col: Expr | None) -> list[Stmt]:
        """A tile of `count` channels from oc0 by `cols` pixels from `first_pixel` of the plane."""
        s = self.s

        def out_at(i: int, j: Expr) -> Expr:
            return self.yv.index([n, g * s.per_group + oc0 + i, const(0, INDEX), const(0, INDEX)]) + first_pixel + j

        finish = None
        if self.has_epilogue:
            def finish(i: int, j: Expr, value: Expr) -> Expr:
                hw = (row, first_col + j) if row is not None and first_col is not None else None
                apply = self._finish(n, g * s.per_group + oc0 + i, first_pixel + j, hw)
                assert apply is not None
                return apply(value)

        return register_tile(self.kb, self.dt, self.tile.lanes, count, cols, reduction, self._a_at(g, oc0, count),
                             b_base, self._init(g, oc0, count), self.yv.buffer, out_at, finish)

    def _rows(self, n: Expr, g: Expr, oc0: Expr, count: int) -> list[Stmt]:
        """Tiles along each output row (any kernel size and dilation, unit column stride)."""
        return self.kb.loops([self.s.out_h], lambda idx: self._row(n, g, oc0, count, idx[0]), prefix="h")

    def _row(self, n: Expr, g: Expr, oc0: Expr, count: int, oh: Expr) -> list[Stmt]:
        """The tiles of output row oh."""
        s, kb = self.s, self.kb
        if self.rows_first:
            # Step kc = kh * C + c of the reduction reads scratch row kc after the first one.
            reduction = Reduction((s.k_h * s.group_in, s.k_w), unrolled=1)
            row_step = self.xv.strides[1]
        else:
            reduction = Reduction((s.group_in, s.k_h, s.k_w), unrolled=2)

        def tile(ow0: Expr, cols: int) -> list[Stmt]:
            def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
                if self.rows_first:
                    kc, kw = k
                    c, kh = const(0, INDEX), const(0, INDEX)
                else:
                    c, kh, kw = k
                ih = oh * s.s_h + kh * s.d_h
                if s.s_w == 1:
                    at = self.xv.index([n, g * s.group_in + c, ih, ow0 + kw * s.d_w])
                else:
                    assert isinstance(kw, Const)  # unrolled: the phase is known here
                    phase, shift = divmod(int(kw.value) * s.d_w, s.s_w)[::-1]
                    at = self.xv.index([n, g * s.group_in + c, ih, phase, ow0 + shift])
                return self.xv.buffer, (at + kc * row_step if self.rows_first else at)

            return self._tile(n, g, oc0, count, cols, reduction, b_base, oh * s.out_w + ow0, oh, ow0)

        return blocks(kb, s.out_w, self.tile.cols, tile, "w")

    def _pointwise(self, n: Expr, g: Expr, oc0: Expr, count: int) -> list[Stmt]:
        """A 1x1 stride-1 convolution: tiles run over the flattened image."""
        s = self.s
        assert s.out_h * s.out_w == s.in_h * s.in_w
        return blocks(self.kb, s.out_h * s.out_w, self.tile.cols,
                      lambda p0, cols: self._pointwise_tile(n, g, oc0, count, p0, cols), "p")

    def _pointwise_tile(self, n: Expr, g: Expr, oc0: Expr, count: int, p0: Expr, cols: int) -> list[Stmt]:
        s = self.s
        reduction = Reduction((s.group_in, 1, 1), unrolled=2)

        def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
            return self.xv.buffer, self.xv.index([n, g * s.group_in + k[0], 0, 0]) + p0

        return self._tile(n, g, oc0, count, cols, reduction, b_base, p0, None, None)
