"""Conv as register tiles over output pixels (aot/ops/contraction/register_tiles.py): the fast
path for every 1-D/2-D convolution whose groups have several output channels.

Each tile is a block of output channels (rows) by a run of output pixels (columns) of one output
row, accumulated over (input channel, kernel row, kernel column) with the kernel columns written
out. A 1x1, stride-1 convolution is a matrix product over the flattened image (pointwise mode),
so its pixel runs cross output rows; unit-stride convolutions with rows that tile badly compute
on the padded grid (grid mode); the others tile each output row (rows mode). Padding has been
turned into a zero-bordered copy of the input (copies.py), so every tap of every tile reads
inside the image and no load is guarded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Const, Expr, Load, Stmt, Store, Var, binary, cast, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, parallel_blocks, slot_blocks
from aot.ops.contraction.register_tiles import Reduction, TileConfig, TileOperands, TileOutput, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.algorithm import TileMode, interleave_rows
from aot.ops.conv.geometry import ConvSpec
from aot.ops.conv.packing import pack_weights
from aot.ops.scratch import scratch_tensor

# An input image larger than this is not re-read by each block of output channels (see
# TiledConv.emit): about half of a big core's L2.
STREAM_LIMIT_BYTES = 512 * 1024
BAND_BYTES = 128 * 1024
# An input image beyond this stays in no L2 of an AVX-512 core (1-2 MB) alongside the weights
# and output that stream through it (TiledConv._in_place_band).
L2_INPUT_BYTES = 1024 * 1024
# Cores with at least this L2 (AVX-512 ones) read large inputs in place (TiledConv._in_place_band,
# _weights_outweigh_panel).
LARGE_L2_BYTES = 1024 * 1024
BAND_TILE_BYTES = 8 * 1024
# On 512-bit vector targets, a pointwise conv reads its input in place rather than through the
# panel when the weights, read once per band, would be more than this many times its input
# (TiledConv._weights_outweigh_panel).
PANEL_WEIGHT_TRAFFIC = 4
# Float32 lanes of a 512-bit vector target (AVX-512), whose cores the choices above and the
# channel tiles' width (channel_tiles.py) were measured on.
WIDE_LANES = 16
# The reduction (input channels x taps) from which pointwise and rows tiles take
# TileConfig.wide_cols pixels.
WIDE_TILE_REDUCTION = 64


@dataclass(frozen=True)
class ConvJob:
    """One convolution's operands as its tile emitters read them: the node (which names its
    scratch and packed weights), its geometry, the input view `x`, the constant weights `w`, the
    output view `y`, the bias (or None), the fused epilogue and the output's dtype."""

    node: Node
    spec: ConvSpec
    x: View
    w: Tensor
    y: View
    bias: View | None
    epilogue: Epilogue
    dtype: str


class TiledConv:
    """Emits one image and group of a convolution as register tiles over pixels (pointwise,
    grid and rows modes); the channels and flat modes are subclasses (channel_tiles.py,
    flat_depthwise.py) that share its tiles, weights and epilogue."""

    def __init__(self, kb: KernelBuilder, ctx: LoweringContext, job: ConvJob, tile: TileConfig, mode: TileMode,
                 parallel: bool = False, rows_first: bool = False) -> None:
        """`job.x` is the (padded) input image, or for column strides above 1 (outside the
        channels mode) the phase-split copy made by strided_copy; `mode` from algorithm.tile_mode;
        `rows_first` when that copy is row-interleaved (interleave_rows).
        `parallel` (one image, one group): `emit` makes the blocks of output channels a parallel
        loop; the modes with a scratch (grid, channels) get one scratch per slot
        (aot/lowering/parallel.py slot_blocks)."""
        spec, w, epilogue, dtype = job.spec, job.w, job.epilogue, job.dtype
        self.kb, self.s, self.xv, self.yv, self.bv = kb, spec, job.x, job.y, job.bias
        self.parallel = parallel
        self.slots = 1
        self.epilogue, self.dt, self.tile = epilogue, dtype, tile
        assert w.data is not None
        self.mode = mode
        self.rows_first = rows_first
        assert not rows_first or interleave_rows(spec, self.mode)
        self.k = spec.group_in * spec.k_h * spec.k_w
        self.subsampled = False
        self.taps: Buffer | None = None  # rows mode, channel tiles: the steps' operand offsets (_tap_offsets)
        # pixels per tile, at most: wider for long reductions, where fewer operand loads per
        # multiply-add pay for the wider tiles' ragged ends (ShuffleNet's grouped 1x1 convs of
        # 60-240 channels per group ran 9% slower with them)
        wide = mode in ("pointwise", "rows") and spec.groups == 1 and self.k >= WIDE_TILE_REDUCTION
        self.cols = tile.wide_cols if wide else tile.cols
        self._prepare(ctx, job.node, w)
        # Side inputs of a fused epilogue that are whole tensors of the output's shape (or
        # scalars) can be addressed by the flat output index; others need the full index.
        self.flat_epilogue = all(t.shape == epilogue.shape or t.size == 1 for t in epilogue.inputs)
        probe = Var("probe", dtype)
        self.has_epilogue = epilogue.apply(probe, [const(0, INDEX)] * len(epilogue.shape)) is not probe

    def _prepare(self, ctx: LoweringContext, node: Node, w: Tensor) -> None:
        """The tile width, the scratch (grid mode) and the packed weights."""
        spec, tile = self.s, self.tile
        if self.mode == "pointwise":
            width = min(self.cols, spec.out_h * spec.out_w)
        elif self.mode == "grid":
            self.grid_size = (spec.out_h - 1) * spec.in_w + spec.out_w
            width = tile.cols_for_rows(min(self.grid_size, tile.cols), spec.per_group, self.grid_size)
            # One block of channels at a time: the scratch holds `rows` grids (per slot).
            block_rows = tile.rows_for(width, spec.per_group)
            self.slots = self._slots(-(-spec.per_group // block_rows))
            self.grid_stride = block_rows * self.grid_size
            self.grid = self.kb.output(scratch_tensor(ctx, node, (self.slots, block_rows, self.grid_size), self.dt,
                                                      "grid")).buffer
        else:
            width = min(self.cols, spec.out_w)
        self._pack(ctx, node, w, width)
        if self.mode == "rows" and self.tile.steps_in_a_loop(self.rows, self.width, self.k):
            self.taps = self._tap_table(ctx, node)
        if self.mode == "pointwise":
            # A strided view of the input (a strided 1x1 conv's subsampled image, tiled.py).
            self.subsampled = self.xv.strides[-1] != 1 or (spec.out_h > 1 and self.xv.strides[-2] != spec.in_w)
            self._prepare_panel(ctx, node)

    def _pack(self, ctx: LoweringContext, node: Node, w: Tensor, width: int) -> None:
        """Tiles `width` pixels wide, and the weights packed for their rows (packing.py)."""
        spec = self.s
        self.width, self.rows = self._adopted_rows(ctx, node, width)
        weights = np.asarray(w.data)
        if self.rows_first:  # the reduction runs over (kernel row, channel, kernel column)
            weights = weights.reshape(spec.out_channels, spec.group_in, spec.k_h, spec.k_w).transpose(0, 2, 1, 3)
        packed = pack_weights(weights, spec.groups, self.rows)
        self.wbuf: Buffer = self.kb.input(ctx.constant(packed, w.name)).buffer

    def _adopted_rows(self, ctx: LoweringContext, node: Node, width: int) -> tuple[int, int]:
        """The tile width and rows (output channels per tile, which fix the weights' packing):
        the register budget's for `width`, or the rows the model's first shape chose
        (ctx.preferred), so that shape variants in one package share one packed array. Fewer
        rows fit any width; more fit a narrower tile (keyword_cnn's second conv at 49 and 98
        frames: 12 rows of 24 pixels, then 12 of 32 rather than 8 of 48)."""
        key = ("tile rows", node.outputs[0].name if node.outputs[0] is not None else node.name)
        rows = self.tile.rows_for(width, self.s.per_group)
        preferred = ctx.preferred.get(key)
        if self.mode != "grid" and isinstance(preferred, int) and preferred != rows:
            fitting = next((w for w in range(width, 0, -1) if self.tile.rows_for(w, self.s.per_group) >= preferred),
                           None)
            if fitting is not None:
                width, rows = fitting, preferred
        ctx.choices.append((key, rows))
        return width, rows

    def _tap_table(self, ctx: LoweringContext, node: Node) -> Buffer:
        """The constant table of _tap_offsets, an input of the kernel."""
        return self.kb.input(ctx.constant(self._tap_offsets(), f"{node.name}_taps")).buffer

    def _tap_offsets(self) -> np.ndarray:
        """Where each step of a tile's reduction reads its operand (row), in elements from the
        first step's, in the order the weights are packed: (kernel row, channel, kernel column)
        over a row-interleaved copy, else (channel, kernel row, kernel column); a kernel column
        of a strided convolution over the phase-split copy (a 5-D view) reads its phase."""
        s, strides = self.s, self.xv.strides

        def column(kw: int) -> int:
            if len(strides) == 4:
                return kw * s.d_w * strides[3]
            shift, phase = divmod(kw * s.d_w, s.s_w)
            return phase * strides[3] + shift * strides[4]

        if self.rows_first:
            rows = [kc * strides[1] for kc in range(s.k_h * s.group_in)]
        else:
            rows = [c * strides[1] + kh * s.d_h * strides[2] for c in range(s.group_in) for kh in range(s.k_h)]
        return np.array([row + column(kw) for row in rows for kw in range(s.k_w)], dtype=np.int32)

    def _prepare_panel(self, ctx: LoweringContext, node: Node) -> None:
        """Pointwise convolutions with long reductions (a tile's input column beyond
        BAND_TILE_BYTES) and several blocks of output channels read their input through a
        packed panel: a band of pixels copied into [block of `cols` pixels]
        [channel][cols], so that each tile's reduction reads one contiguous run. Read in place,
        the column's channels sit a plane apart: at 56x56 (12544 bytes) they fall into 16 of a
        32 KiB L1's 64 sets, and at 14x14 (784 bytes) each straddles two lines, so 256 or 512
        channels' lines no longer fit in L1 and every block of output channels re-read the band
        from L2 (on AVX2, times onnxruntime's: 1024 -> 256 at 14x14 1.47-1.53 -> 0.91-1.0).
        Strided 1x1 convs always read through it (their input subsampled while it is packed).
        Not for scalar targets (microcontrollers: RAM first)."""
        s, cols = self.s, self.cols
        itemsize = np.dtype(self.dt).itemsize
        pixels = s.out_h * s.out_w
        band = max(cols, min(BAND_BYTES // (s.group_in * itemsize), pixels) // cols * cols)
        self.band = 0
        if self.subsampled:  # the input is readable only through the panel
            assert not self.parallel and self.tile.lanes > 1
            band = max(cols, min(band, -(-pixels // cols) * cols))
        elif (self.parallel or self.tile.lanes == 1 or s.per_group <= self.rows
                or s.group_in * cols * itemsize <= BAND_TILE_BYTES or pixels < 2 * cols
                or 2 * band > pixels  # (the panel would take half of a small input's memory again)
                or self._weights_outweigh_panel(band, itemsize)):
            return
        self.band = band
        shape = (self.band // cols, s.group_in, cols)
        self.panel = View(self.kb.output(scratch_tensor(ctx, node, shape, self.dt, "panel")).buffer, shape)

    def _weights_outweigh_panel(self, band: int, itemsize: int) -> bool:
        """Whether, on a core with a large L2 (LARGE_L2_BYTES), reading the weights once per band
        costs more than the panel saves: each band runs every block of output channels, so the weights are
        read bands times, from L3 or memory once they outgrow L2. AVX-512 cores (L2 1-2 MB,
        Intel's L1 48 KB) keep a 14x14 input in L2 read in place, where 1x1 convs whose weights
        the bands would read several times are faster in place and those with small weights
        through the panel. On AVX2 targets (L2 512 KB) the panel stays. `python -m
        benchmarks.layers` on ResNet-50 shows both forms' time per layer."""
        s = self.s
        if self.tile.l2_bytes < LARGE_L2_BYTES:
            return False
        bands = -(-s.out_h * s.out_w // band)
        weight_bytes = s.per_group * s.group_in * itemsize
        input_bytes = s.group_in * s.in_h * s.in_w * itemsize
        return weight_bytes * bands > PANEL_WEIGHT_TRAFFIC * input_bytes

    @property
    def shares_nothing(self) -> bool:
        """Whether emit's statements for different images and groups touch disjoint memory
        (no scratch reused between them), so a loop over those may be parallel."""
        return self.mode == "rows" or (self.mode == "pointwise" and not self.band)

    def _slots(self, blocks_count: int) -> int:
        return min(SCRATCH_SLOTS, blocks_count) if self.parallel else 1

    def out_index(self, n: Expr, oc: Expr, oh: Expr, ow: Expr) -> list[Expr]:
        return [n, oc, ow] if self.s.nd == 1 else [n, oc, oh, ow]

    def emit_image(self, n: Expr, prologue: Callable[[Expr, Expr], list[Stmt]] | None = None) -> list[Stmt]:
        """Image n, every group, each after `prologue(n, group)` when given (the copy of the
        input channel it reads, tiled.py)."""
        return self.kb.loops([self.s.groups], lambda g: (prologue(n, g[0]) if prologue else []) + self.emit(n, g[0]),
                             prefix="g")

    def emit(self, n: Expr, g: Expr) -> list[Stmt]:
        """Image n, group g."""
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
        s, cols = self.s, self.cols
        if self.mode == "pointwise" and self.band:
            return blocks(self.kb, s.out_h * s.out_w, self.band, lambda q0, width: self._panel_band(n, g, q0, width),
                          "q")
        band = self._in_place_band()
        if band:
            def in_band(q0: Expr, width: int) -> list[Stmt]:
                return blocks(self.kb, s.per_group, self.rows, lambda oc0, count: blocks(
                    self.kb, width, cols, lambda p0, c: self._pointwise_tile(n, g, oc0, count, q0 + p0, c), "p"), "o")

            return split(self.kb, s.out_h * s.out_w, band, in_band, "q")
        body = {"pointwise": self._pointwise, "rows": self._rows}[self.mode]
        return split(self.kb, self.s.per_group, self.rows, lambda oc0, count: body(n, g, oc0, count), "o")

    def _in_place_band(self) -> int:
        """Pixels per band where a pointwise conv that reads its input in place runs bands of
        pixels outermost, so that a band of the input (C x band) stays in L2 for every block of
        output channels instead of each block streaming the whole image from L3 or memory; 0
        where blocks of output channels stay outermost.
        - Short reductions (a tile's input column within BAND_TILE_BYTES): bands of BAND_BYTES
          (a ResNet-50's 64 -> 256 1x1 convs at 56x56 with their residual Add run faster so).
        - Long ones, on 512-bit targets (which read them in place where the panel would re-read
          the weights too often, _weights_outweigh_panel), where the input is beyond
          L2_INPUT_BYTES: bands of STREAM_LIMIT_BYTES. The bands re-read the weights once each,
          far fewer bytes than each block of output channels re-reading the input (`python -m
          benchmarks.layers` on ResNet-50 shows its 512 -> 256 convs at 28x28). One thread:
          threads split the blocks of output channels, the measured form."""
        s, cols = self.s, self.cols
        if self.mode != "pointwise" or self.band or not self._streams_input():
            return 0
        column = s.group_in * np.dtype(self.dt).itemsize
        if column * cols <= BAND_TILE_BYTES:
            return max(cols, BAND_BYTES // column // cols * cols)
        if self.parallel or self.tile.l2_bytes < LARGE_L2_BYTES or column * s.in_h * s.in_w <= L2_INPUT_BYTES:
            return 0
        return max(cols, STREAM_LIMIT_BYTES // column // cols * cols)

    def _streams_input(self) -> bool:
        """Whether one group's input image is too big to stay in cache between blocks of output
        channels (and there are several blocks)."""
        s = self.s
        image = s.group_in * s.in_h * s.in_w * np.dtype(self.dt).itemsize
        return s.per_group > self.rows and image > STREAM_LIMIT_BYTES

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

            return register_tile(kb, self.dt, self.tile.lanes, count, cols, reduction,
                                 TileOperands(self._a_at(g, oc0, count), b_base),
                                 TileOutput(self._init(g, oc0, count), self.grid, out_at))

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
            if len(k) == 1:  # the steps of a loop over _tap_offsets, in the packing's order
                kflat = k[0]
            elif self.rows_first:  # packed in (kernel row, channel, kernel column) order
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
              b_base, first_pixel: Expr, *, row: Expr | None, first_col: Expr | None) -> list[Stmt]:
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

        return register_tile(self.kb, self.dt, self.tile.lanes, count, cols, reduction,
                             TileOperands(self._a_at(g, oc0, count), b_base),
                             TileOutput(self._init(g, oc0, count), self.yv.buffer, out_at, finish))

    def _rows(self, n: Expr, g: Expr, oc0: Expr, count: int) -> list[Stmt]:
        """Tiles along each output row (any kernel size and dilation, unit column stride)."""
        return self.kb.loops([self.s.out_h], lambda idx: self._row(n, g, oc0, count, idx[0]), prefix="h")

    def _row(self, n: Expr, g: Expr, oc0: Expr, count: int, oh: Expr) -> list[Stmt]:
        """The tiles of output row oh."""
        s, kb = self.s, self.kb
        row_step = self.xv.strides[1]  # rows_first: step kc = kh * C + c reads the copy's row kc
        if self.taps is not None:
            reduction = Reduction((s.group_in * s.k_h * s.k_w,))
        elif self.rows_first:
            reduction = Reduction((s.k_h * s.group_in, s.k_w), unrolled=1)
        else:
            reduction = Reduction((s.group_in, s.k_h, s.k_w), unrolled=2)

        def tile(ow0: Expr, cols: int) -> list[Stmt]:
            def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
                if self.taps is None:
                    return tap(k)
                buffer, first = tap([const(0, INDEX)] * (2 if self.rows_first else 3))
                return buffer, first + cast(Load(self.taps, k[0]), INDEX)

            def tap(k: list[Expr]) -> tuple[Buffer, Expr]:
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

            return self._tile(n, g, oc0, count, cols, reduction, b_base, oh * s.out_w + ow0, row=oh, first_col=ow0)

        return blocks(kb, s.out_w, self.cols, tile, "w")

    def _pointwise(self, n: Expr, g: Expr, oc0: Expr, count: int) -> list[Stmt]:
        """A 1x1 stride-1 convolution: tiles run over the flattened image."""
        s = self.s
        assert s.out_h * s.out_w == s.in_h * s.in_w
        return blocks(self.kb, s.out_h * s.out_w, self.cols,
                      lambda p0, cols: self._pointwise_tile(n, g, oc0, count, p0, cols), "p")

    def _panel_band(self, n: Expr, g: Expr, q0: Expr, width: int) -> list[Stmt]:
        """The pixels [q0, q0 + width): its whole blocks of `cols` packed into the panel, then
        every block of output channels over them (a ragged last block reads the input)."""
        s, kb, cols = self.s, self.kb, self.cols
        whole, tail = divmod(width, cols)

        def source(pixel: Expr, c: Expr) -> Expr:
            if self.subsampled:
                row, col = binary("div", pixel, s.out_w), binary("mod", pixel, s.out_w)
                return self.xv.load([n, g * s.group_in + c, row, col])
            return Load(self.xv.buffer, self.xv.index([n, g * s.group_in + c, 0, 0]) + pixel)

        def pack(block: Expr, count: int) -> list[Stmt]:
            if self.subsampled:  # pixels outer: each one's row and column computed once
                return kb.loops([count, s.group_in], lambda idx: [
                    self.panel.store([block, idx[1], idx[0]], source(q0 + block * cols + idx[0], idx[1]))], prefix="k")
            return kb.loops([s.group_in, count], lambda idx: [
                self.panel.store([block, idx[0], idx[1]], source(q0 + block * cols + idx[1], idx[0]))], prefix="k")

        def tile(oc0: Expr, count: int) -> list[Stmt]:
            return blocks(kb, width, cols, lambda p0, c: self._pointwise_tile(
                n, g, oc0, count, q0 + p0, c, p0 if c == cols or self.subsampled else None), "p")

        packing = kb.loops([whole], lambda idx: pack(idx[0], cols), prefix="k")
        if tail and self.subsampled:  # else the ragged last block reads the input itself
            packing += pack(const(whole, INDEX), tail)
        return packing + blocks(kb, s.per_group, self.rows, tile, "o")

    def _pointwise_tile(self, n: Expr, g: Expr, oc0: Expr, count: int, p0: Expr, cols: int,
                        panel_at: Expr | None = None) -> list[Stmt]:
        """A tile of pixels [p0, p0 + cols), read from the input or, given `panel_at` (the
        block's first pixel within the band), from the packed panel."""
        s = self.s
        reduction = Reduction((s.group_in, 1, 1), unrolled=2)

        def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
            if panel_at is not None:
                return self.panel.buffer, panel_at * s.group_in + k[0] * self.cols  # the panel's row stride
            return self.xv.buffer, self.xv.index([n, g * s.group_in + k[0], 0, 0]) + p0

        return self._tile(n, g, oc0, count, cols, reduction, b_base, p0, row=None, first_col=None)
