"""Conv as register tiles (aot/ops/contraction/register_tiles.py): the fast path for every 1-D/2-D
convolution whose groups have several output channels.

Each tile is a block of output channels (rows) by a run of output pixels (columns) of one output
row, accumulated over (input channel, kernel row, kernel column) with the kernel columns written
out. A 1x1, stride-1 convolution is a matrix product over the flattened image, so its pixel runs
cross output rows. Padding has been turned into a zero-bordered copy of the input by the caller,
so every tap of every tile reads inside the image and no load is guarded.

The weights are repacked at compile time, block by block of output channels, so that the tile's
broadcasts walk memory contiguously: block b (rows oc0 .. oc0 + r) is stored as [K][r] at offset
oc0 * K, where K = group_in * k_h * k_w. The packed tensor replaces the ONNX weights in the
package (same size).
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Const, Expr, Load, Stmt, Store, Var, binary, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, parallel_blocks, pays, slot_blocks
from aot.ops.contraction.row_updates import blocks, valid_range
from aot.ops.gemm import pack_column_panels
from aot.ops.contraction.register_tiles import Reduction, TileConfig, register_tile, vector_starts
from aot.ops.scratch import fill_phase_border, scratch_tensor


def pack_weights(w: np.ndarray, groups: int, rows: int) -> np.ndarray:
    """[OC, group_in, kh, kw] -> per group, per block of `rows` output channels, [K][rows]."""
    out_channels = w.shape[0]
    per_group = out_channels // groups
    flat = w.reshape(groups, per_group, -1)
    parts = []
    for g in range(groups):
        for oc0 in range(0, per_group, rows):
            parts.append(np.ascontiguousarray(flat[g, oc0:oc0 + rows].T).reshape(-1))
    return np.concatenate(parts).astype(w.dtype, copy=False)


def strided_copy(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, in_hw: tuple[int, int],
                 pad_begin: list[int], pad_end: list[int], stride: int,
                 fill: float = 0.0, rows_first: bool = False) -> tuple[list[Stmt], View, int, int]:
    """Statements copying X into a zero-padded scratch image whose columns are split into
    `stride` phases, [n][c][row][phase][column // stride]: output column ow of tap kw then reads
    phase (kw * dilation) % stride at column ow + (kw * dilation) // stride, so a run of output
    columns reads a contiguous run of the scratch, as the tiles' vector loads need. The padding
    holds `fill` (MaxPool pads with -inf). `rows_first` stores it row-interleaved (see
    interleave_rows). Returns the statements, the scratch viewed as [n][c][row][phase][column]
    and its padded (height, width)."""
    batch, channels = x.shape[0], x.shape[1]
    in_h, in_w = in_hw
    (top, left), (bottom, right) = pad_begin, pad_end
    height, width = in_h + top + bottom, in_w + left + right
    per_phase = -(-width // stride)
    dst = scratch_image(ctx, node, kb, (batch, channels, height, stride, per_phase), x, "strided", rows_first)
    src = View(kb.input(x).buffer, (batch, channels, in_h, in_w))
    zero = const(fill, x.dtype.name)
    columns = [valid_range(per_phase, in_w, stride, phase - left) for phase in range(stride)]
    stmts = kb.loops([batch, channels], lambda nc: fill_phase_border(
        kb, lambda h, p, q: dst.store([nc[0], nc[1], h, p, q], zero), (height, stride, per_phase),
        (top, top + in_h), columns), prefix="b")
    # The columns every phase copies go in one loop that stores all phases from consecutive
    # loads: an interleaved access group, which the compilers vectorise as whole-vector loads and
    # shuffles (a loop per phase of 24 strided loads became scalar inserts: 2x slower on a
    # MobileNet's 3x3/2 depthwise convs).
    joint = (max(lo for lo, _ in columns), min(hi for _, hi in columns))
    pieces = [(phase, lo, hi) for phase, (lo, hi) in enumerate(columns)]
    if joint[1] > joint[0]:
        pieces = [(p, lo, hi) for phase, (lo, hi) in enumerate(columns)
                  for p, lo, hi in ((phase, lo, joint[0]), (phase, joint[1], hi))]

        def together(idx: list[Expr]) -> list[Stmt]:
            n, c, ih, q = idx
            col = q + joint[0]
            return [dst.store([n, c, ih + top, phase, col], src.load([n, c, ih, col * stride + (phase - left)]))
                    for phase in range(stride)]

        stmts += kb.loops([batch, channels, in_h, joint[1] - joint[0]], together, prefix="s")
    for phase, lo, hi in pieces:
        if hi <= lo:
            continue

        def copy(idx: list[Expr], phase: int = phase, lo: int = lo) -> list[Stmt]:
            n, c, ih, q = idx
            col = q + lo
            return [dst.store([n, c, ih + top, phase, col], src.load([n, c, ih, col * stride + (phase - left)]))]

        stmts += kb.loops([batch, channels, in_h, hi - lo], copy, prefix="s")
    return stmts, dst, height, width


def scratch_image(ctx: LoweringContext, node: Node, kb: KernelBuilder, shape: tuple[int, ...], x: Tensor, role: str,
                   rows_first: bool) -> View:
    """A scratch image [n][c][row][...] for `node`, stored as given or row-interleaved
    ([n][row][c][...]), viewed with the logical index order either way."""
    if not rows_first:
        return View(kb.output(scratch_tensor(ctx, node, shape, x.dtype, role)).buffer, shape)
    batch, channels, height, *row = shape
    physical = scratch_tensor(ctx, node, (batch, height, channels, *row), x.dtype, role)
    strides = View(kb.output(physical).buffer, physical.shape).strides
    return View(kb.output(physical).buffer, shape, (strides[0], strides[2], strides[1], *strides[3:]))


def interleave_rows(spec, mode: str) -> bool:  # noqa: ANN001
    """Whether the scratch copy of a convolution's input should be row-interleaved, [n][row][c][...]
    (every channel's row ih, then every channel's row ih + 1): in rows mode with one group and
    no row dilation, kernel row kh of channel c then sits (kh * C + c) rows of the scratch after
    the output row's first input row, so a tile's whole reduction reads one contiguous slab of
    k_h * C rows, a few dozen pages, instead of k_h rows in each of C planes a plane apart (C *
    k_h pages, more than the first-level TLB holds). With output rows outermost
    (TiledConv._streams_input) it took light VGG-19 from 1.21 to 1.06 times onnxruntime's time."""
    return mode == "rows" and spec.groups == 1 and spec.d_h == 1


# Largest column matrix (input channels x kernel taps by output pixels) worth materialising.
IM2COL_LIMIT_BYTES = 256 * 1024


def use_im2col(in_channels: int, groups: int, kernel: list[int], strides: list[int], out_hw: tuple[int, int],
               tile: TileConfig, itemsize: int) -> bool:
    """Strided convolutions whose output rows are narrower than a vector tile poorly row by row
    and cannot use the padded grid (its rows advance by the stride): for those, when the column
    matrix is small (e.g. a keyword-spotting stem: 1 channel x 10x4 taps by 25x5 pixels), copy it
    out once and run the matrix product over the flattened pixels."""
    k = (in_channels // groups) * kernel[0] * kernel[1]
    pixels = out_hw[0] * out_hw[1]
    return (groups == 1 and max(strides) > 1 and out_hw[1] < 2 * tile.lanes
            and k * pixels * itemsize <= IM2COL_LIMIT_BYTES)


def im2col(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, in_hw: tuple[int, int],
           out_hw: tuple[int, int], kernel: list[int], strides: list[int], dilations: list[int],
           pad_begin: list[int]) -> tuple[list[Stmt], Buffer, int]:
    """Statements writing the column matrix [n][(c, kh, kw)][(oh, ow)] of X (zeros where a tap
    falls in the padding), its scratch buffer and its row count K."""
    batch, channels = x.shape[0], x.shape[1]
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    k_h, k_w = kernel
    rows = channels * k_h * k_w
    cols = kb.output(scratch_tensor(ctx, node, (batch, rows, out_h * out_w), x.dtype, "im2col"))
    src = View(kb.input(x).buffer, (batch, channels, in_h, in_w))
    zero = const(0.0, x.dtype.name)
    stmts = kb.loops([cols.shape[0] * rows * out_h * out_w], lambda i: [Store(cols.buffer, i[0], zero)], prefix="z")
    for kh in range(k_h):
        h_lo, h_hi = valid_range(out_h, in_h, strides[0], kh * dilations[0] - pad_begin[0])
        for kw in range(k_w):
            w_lo, w_hi = valid_range(out_w, in_w, strides[1], kw * dilations[1] - pad_begin[1])
            if h_hi <= h_lo or w_hi <= w_lo:
                continue

            def copy(idx: list[Expr], kh: int = kh, kw: int = kw, h_lo: int = h_lo, w_lo: int = w_lo) -> list[Stmt]:
                n, c, r, q = idx
                oh, ow = r + h_lo, q + w_lo
                value = src.load([n, c, oh * strides[0] + (kh * dilations[0] - pad_begin[0]),
                                  ow * strides[1] + (kw * dilations[1] - pad_begin[1])])
                return [cols.store([n, (c * k_h + kh) * k_w + kw, oh * out_w + ow], value)]

            stmts += kb.loops([batch, channels, h_hi - h_lo, w_hi - w_lo], copy, prefix="s")
    return stmts, cols.buffer, rows


def _lanes_used(length: int, cols: int, lanes: int, narrow_costs_full: bool = False) -> int:
    """Lanes computed to cover `length` outputs with tiles of `cols` (a ragged last tile takes
    overlapping vectors, narrower ones for a tail shorter than a register; scalars one lane each).
    With `narrow_costs_full`, a narrower vector counts as a full one (it takes the same issue
    slot), which is the fair measure for rows that are all tail (8 outputs on 16-lane AVX-512)."""
    full, tail = divmod(length, cols)
    width = TileConfig(lanes).width_for(tail)
    if width == 1:
        return full * cols + tail
    return full * cols + len(vector_starts(tail, width)) * (lanes if narrow_costs_full else width)


def pixel_waste(out_hw: tuple[int, int], kernel: tuple[int, int], strides: tuple[int, int], padded_w: int,
                tile: TileConfig) -> float:
    """Lanes computed per output pixel when tiles run over pixels (flattened for a 1x1 unit-stride
    conv, on the padded grid or row by row for other unit-stride ones, row by row when strided)."""
    out_h, out_w = out_hw
    pixels = out_h * out_w
    unit = strides == (1, 1)
    if unit and kernel == (1, 1):
        return _lanes_used(pixels, tile.cols, tile.lanes) / pixels
    # Row by row, a row shorter than a register runs at a fraction of the machine's width.
    rows = out_h * _lanes_used(out_w, tile.cols, tile.lanes, narrow_costs_full=True)
    if not unit:  # strided: row by row over a column-phase copy
        return rows / pixels
    grid = _lanes_used((out_h - 1) * padded_w + out_w, tile.cols, tile.lanes)
    return min(rows, grid) / pixels


def channel_tiles_pay(groups: int, out_channels: int, out_hw: tuple[int, int], kernel: tuple[int, int],
                      strides: tuple[int, int], padded_w: int, tile: TileConfig, dtype: str,
                      reduction: int) -> bool:
    """Whether to vectorise over output channels (see TiledConv._init_channels): the pixels
    would fill vectors badly and there are channels enough for whole tiles. Channel tiles pay a
    scalar, channel-major write of every output (about one cycle each); the lanes they save cost
    `reduction` / lanes vector multiply-adds per output each, so they only win when that saving is
    larger (an RGB stem, 27 taps by 111 pixels, is better row by row: measured 0.74 -> 0.56 ms on
    SqueezeNet's first conv), by a margin: a ResNet-50's 3x3 convs at 28x28 (7% of the lanes
    wasted on the padded grid, 1152 taps: a saving of 5) gain 6% from channel tiles, at 56x56
    (3.5%, 576 taps: 1.3) they lose 1%."""
    if groups != 1 or tile.lanes == 1 or dtype != "float32" or out_channels < tile.lanes:
        return False
    waste = pixel_waste(out_hw, kernel, strides, padded_w, tile)
    return (waste - 1.0) * reduction / tile.lanes > 2.0


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


def flat_depthwise_fits(spec, tile: TileConfig, dtype: str) -> bool:  # noqa: ANN001
    """A depthwise convolution (one input and one output channel per group) with unit stride and
    dilation and 'same' padding (output the size of the input), over at least one vector of
    pixels: TiledConv's flat mode."""
    return (spec.group_in == 1 and spec.per_group == 1 and dtype == "float32" and tile.lanes > 1
            and spec.s_h == spec.s_w == spec.d_h == spec.d_w == 1
            and (spec.out_h, spec.out_w) == (spec.in_h, spec.in_w)
            and 0 <= spec.p_w < spec.in_w and spec.k_w - 1 - spec.p_w < spec.in_w
            and spec.p_h >= 0 and spec.k_h - 1 - spec.p_h >= 0
            and spec.out_h * spec.out_w >= tile.lanes)


def _grid_pays(spec, tile: TileConfig) -> bool:  # noqa: ANN001
    """Whether computing on the padded grid wastes less than tiling each output row: rows pay
    for their ragged ends (55 outputs take 64 lanes), the grid for its junk columns (2 of every
    57 for a padded 3x3) plus the pass that compacts it."""
    if spec.out_w < tile.lanes:
        return True
    rows_work = spec.out_h * _lanes_used(spec.out_w, tile.cols, tile.lanes)
    grid_work = _lanes_used((spec.out_h - 1) * spec.in_w + spec.out_w, tile.cols, tile.lanes)
    return grid_work * 1.05 < rows_work


def tile_mode(spec, tile: TileConfig, dtype: str, channel_tiles: bool) -> str:  # noqa: ANN001
    """How TiledConv computes the convolution `spec` (over its padded or phase-split input)."""
    if channel_tiles:
        return "channels"
    if flat_depthwise_fits(spec, tile, dtype):
        return "flat"
    unit_stride = spec.s_h == spec.s_w == 1
    if unit_stride and spec.k_h == spec.k_w == 1:
        return "pointwise"
    if unit_stride and spec.out_h > 1 and _grid_pays(spec, tile):
        # Rows that tile badly (narrower than a vector, or a ragged end in every row): compute
        # on the padded grid instead (see TiledConv._grid).
        return "grid"
    return "rows"


class TiledConv:
    """Emits one image and group of a convolution as register tiles."""

    def __init__(self, kb: KernelBuilder, ctx: LoweringContext, node: Node, spec, x: View, w: Tensor, y: View,
                 bias: View | None, epilogue: Epilogue, dtype: str, tile: TileConfig,
                 channel_tiles: bool = False, parallel: bool = False, rows_first: bool = False) -> None:
        """`x` is the (padded) input image, or for column strides above 1 (without
        `channel_tiles`, see channel_tiles_pay) the phase-split copy made by strided_copy;
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
        self.mode = tile_mode(spec, tile, dtype, channel_tiles)
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
