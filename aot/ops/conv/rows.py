"""1-D and 2-D Conv as vectorisable row updates (see aot/ops/contraction/row_updates.py for the scheme).

Two shapes of loop nest:

* pointwise (1x1 kernel, stride 1, no padding): a matrix product W[OC x C] . X[C x H*W] per image,
  tiled over whole output rows so a tile of every output row being accumulated stays in L1;
* everything else (3x3, strided, dilated, padded, grouped, depthwise): for each block of output
  channels and each output row, the rows are initialised with the bias and then updated by
  groups of taps. The valid kernel rows for an output row and the valid output columns for a
  kernel column are computed here, at compile time, so the loops carry no bounds checks.
  Depthwise convolutions (one input channel per group) chain every tap of the window into one
  update of the row. Padded convolutions first copy the input into a zero-bordered scratch
  image, so that every output row is a single full-width vector loop.

A 1-D convolution is the 2-D one with a single row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, Load, Loop, Stmt, Store, Var, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.lowering.parallel import mark_outer, pays
from aot.ops.attrs import required_input
from aot.ops.contraction.row_updates import (
    WEIGHT_REGISTERS,
    Step,
    blocks,
    fill_rows,
    index,
    row_block_gemm,
    update_rows,
    valid_range,
)
from aot.ops.conv.tiled import (
    TiledConv,
    channel_tiles_pay,
    flat_depthwise_fits,
    im2col,
    interleave_rows,
    scratch_image,
    strided_copy,
    tile_mode,
    use_im2col,
)

# Output channels updated together by one vector loop (they share every input load).
CHANNEL_BLOCK = 4
# Elements of one output row tile in the pointwise kernel: CHANNEL_BLOCK rows of this many floats
# plus one input row stay well inside a 32 KiB L1 data cache.
POINTWISE_TILE = 512


def lower_conv_rows(node: Node, ctx: LoweringContext, groups: int, kernel: list[int], strides: list[int],
                    dilations: list[int], pad_begin: list[int], pad_end: list[int]) -> bool:
    """Emit the Conv `node` (already validated by lower_conv) as row kernels; False if this
    node's shape is not one they handle (the caller then uses the generic loop nest)."""
    x = required_input(node, 0, "X")
    w = required_input(node, 1, "W")
    bias = node.input(2)
    y = node.outputs[0]
    assert y is not None
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    if final.dtype != y.dtype or min(pad_begin + pad_end) < 0:
        return False  # the output buffer holds partial sums, so it must have the sums' type
    nd = x.rank - 2
    if nd == 1:  # one row: height 1, no vertical stride, dilation or padding
        kernel, strides, dilations = [1, *kernel], [1, *strides], [1, *dilations]
        pad_begin, pad_end = [0, *pad_begin], [0, *pad_end]
    batch, channels = x.shape[0], x.shape[1]
    in_h, in_w = (1, x.shape[2]) if nd == 1 else x.shape[2:]
    out_channels = y.shape[1]
    out_h, out_w = (1, y.shape[2]) if nd == 1 else y.shape[2:]
    tiled = w.is_constant and y.dtype.kind == "f"
    macs = batch * out_channels * (channels // groups) * out_h * out_w * kernel[0] * kernel[1]
    # Threads: one image of one group splits its blocks of output channels (TiledConv), several
    # images or groups the outermost of those loops (when the kernel has no shared scratch).
    parallel = pays(ctx, macs)
    split_blocks = parallel and batch == 1 and groups == 1
    if tiled and use_im2col(channels, groups, kernel, strides, (out_h, out_w), ctx.tiles, y.dtype.itemsize):
        # A matrix product over the flattened pixels of the column matrix: a pointwise conv.
        copy, cbuf, rows = im2col(node, ctx, kb, x, (in_h, in_w), (out_h, out_w), kernel, strides, dilations,
                                  pad_begin)
        spec = _ConvSpec(
            batch=batch, channels=rows, groups=1, group_in=rows, per_group=out_channels,
            out_channels=out_channels, in_h=out_h, in_w=out_w, out_h=out_h, out_w=out_w, k_h=1, k_w=1,
            s_h=1, s_w=1, d_h=1, d_w=1, p_h=0, p_w=0, nd=nd)
        yv = View(kb.output(final).buffer, (batch, out_channels, out_h, out_w))
        bv = kb.input(bias) if bias is not None else None
        channel_tiles = channel_tiles_pay(1, out_channels, (out_h, out_w), (1, 1), (1, 1), out_w, ctx.tiles,
                                          y.dtype.name, rows)
        gemm = TiledConv(kb, ctx, node, spec, View(cbuf, (batch, rows, out_h, out_w)), w, yv, bv, epilogue,
                         y.dtype.name, ctx.tiles, channel_tiles, parallel=split_blocks)
        body = kb.loops([batch], lambda idx: gemm.emit(idx[0], const(0, INDEX)))
        ctx.emit(kb, copy + (mark_outer(body) if parallel and not split_blocks and gemm.shares_nothing else body))
        return True
    channel_tiles = tiled and channel_tiles_pay(
        groups, out_channels, (out_h, out_w), (kernel[0], kernel[1]), (strides[0], strides[1]),
        in_w + pad_begin[1] + pad_end[1], ctx.tiles, y.dtype.name, channels // groups * kernel[0] * kernel[1])
    phase_split = tiled and strides[1] > 1 and not channel_tiles
    def conv_spec(in_h: int, in_w: int, pad_begin: list[int]) -> _ConvSpec:
        """The convolution over an input of in_h x in_w (padded by a copy, or not) with pad_begin."""
        return _ConvSpec(
            batch=batch, channels=channels, groups=groups, group_in=channels // groups,
            per_group=out_channels // groups, out_channels=out_channels, in_h=in_h, in_w=in_w,
            out_h=out_h, out_w=out_w, k_h=kernel[0], k_w=kernel[1], s_h=strides[0], s_w=strides[1],
            d_h=dilations[0], d_w=dilations[1], p_h=pad_begin[0], p_w=pad_begin[1], nd=nd,
        )

    unpadded = conv_spec(in_h, in_w, pad_begin)
    padded_h, padded_w = in_h + pad_begin[0] + pad_end[0], in_w + pad_begin[1] + pad_end[1]
    mode = tile_mode(conv_spec(padded_h, padded_w, [0, 0]), ctx.tiles, y.dtype.name, channel_tiles) if tiled else ""
    rows_first = False  # whether the scratch copy of the input is row-interleaved
    if tiled and not channel_tiles and flat_depthwise_fits(unpadded, ctx.tiles, y.dtype.name):
        # Depthwise with 'same' padding: TiledConv makes its own shifted copies (no padded image).
        copy, xv = [], View(kb.input(x).buffer, (batch, channels, in_h, in_w))
    elif phase_split:
        rows_first = interleave_rows(unpadded, mode)
        copy, xv, in_h, in_w = strided_copy(node, ctx, kb, x, (in_h, in_w), pad_begin, pad_end, strides[1],
                                            rows_first=rows_first)
        pad_begin, pad_end = [0, 0], [0, 0]
    elif any(pad_begin) or any(pad_end):
        # Copy the input into a zero-bordered scratch image first: then every tap of every output
        # column reads inside the image, each output row is one unbroken vector loop (no border
        # pieces, which cost scalar remainders on short rows), and the copy is cheap next to the
        # k_h * k_w * out_channels passes over the input that the convolution makes. The kernel
        # binds the scratch once, as an output, and reads it back through that same pointer.
        rows_first = tiled and interleave_rows(unpadded, mode)
        copy, xv, in_h, in_w = _padded_copy(node, ctx, kb, x, (in_h, in_w), pad_begin, pad_end, rows_first)
        pad_begin, pad_end = [0, 0], [0, 0]
    else:
        copy, xv = [], View(kb.input(x).buffer, (batch, channels, in_h, in_w))
    spec = conv_spec(in_h, in_w, pad_begin) if copy else unpadded
    yv = View(kb.output(final).buffer, (batch, out_channels, out_h, out_w))
    bv = kb.input(bias) if bias is not None else None
    if tiled:
        tiled = TiledConv(kb, ctx, node, spec, xv, w, yv, bv, epilogue, y.dtype.name, ctx.tiles, channel_tiles,
                          parallel=split_blocks, rows_first=rows_first)
        body = kb.loops([batch], lambda idx: tiled.emit_image(idx[0]))
        ctx.emit(kb, copy + (mark_outer(body) if parallel and not split_blocks and tiled.shares_nothing else body))
        return True
    wv = View(kb.input(w).buffer, (out_channels, spec.group_in, spec.k_h, spec.k_w))
    emitter = _RowEmitter(kb, spec, xv, wv, yv, bv, epilogue, y.dtype.name)
    pointwise = spec.k_h == spec.k_w == 1 and spec.s_h == spec.s_w == 1 and not any(pad_begin) \
        and not any(pad_end)
    body = emitter.pointwise if pointwise else emitter.direct
    ctx.emit(kb, copy + kb.loops([batch, groups], lambda idx: body(idx[0], idx[1])))
    return True


def _padded_copy(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, in_hw: tuple[int, int],
                 pad_begin: list[int], pad_end: list[int], rows_first: bool) -> tuple[list[Stmt], View, int, int]:
    """Statements copying X into a new scratch tensor with zero borders, at the start of the
    convolution's own kernel (one kernel per node, and the scratch lives only while it runs),
    row-interleaved when `rows_first` (aot/ops/conv/tiled.py interleave_rows); the scratch,
    viewed as [n][c][row][column], which the convolution then reads, and its 2-D size."""
    batch, channels = x.shape[0], x.shape[1]
    in_h, in_w = in_hw
    (top, left), (bottom, right) = pad_begin, pad_end
    height, width = in_h + top + bottom, in_w + left + right
    dst = scratch_image(ctx, node, kb, (batch, channels, height, width), x, "padded", rows_first)
    src = View(kb.input(x).buffer, (batch, channels, in_h, in_w))
    zero = const(0.0, x.dtype.name)

    def plane(idx: list[Expr]) -> list[Stmt]:
        n, c = idx
        def zeros(r0: int, rows: int, c0: int, cols: int) -> list[Stmt]:
            return kb.loops([rows, cols], lambda r: [dst.store([n, c, r[0] + r0, r[1] + c0], zero)], prefix="z")

        def interior(r: list[Expr]) -> list[Stmt]:
            ih, iw = r
            return [dst.store([n, c, ih + top, iw + left], src.load([n, c, ih, iw]))]

        def edges(r: list[Expr]) -> list[Stmt]:
            ih = r[0]
            left_cols = kb.loops([left], lambda q: [dst.store([n, c, ih + top, q[0]], zero)], prefix="z")
            right_cols = kb.loops([right], lambda q: [dst.store([n, c, ih + top, q[0] + left + in_w], zero)],
                                  prefix="z")
            return left_cols + right_cols

        return (zeros(0, top, 0, width) + kb.loops([in_h], edges, prefix="r")
                + kb.loops([in_h, in_w], interior, prefix="r") + zeros(top + in_h, bottom, 0, width))

    return kb.loops([batch, channels], plane), dst, height, width


class _ConvSpec:
    def __init__(self, **values: int) -> None:
        for key, value in values.items():
            setattr(self, key, int(value))

    batch: int
    channels: int
    groups: int
    group_in: int
    per_group: int
    out_channels: int
    in_h: int
    in_w: int
    out_h: int
    out_w: int
    k_h: int
    k_w: int
    s_h: int
    s_w: int
    d_h: int
    d_w: int
    p_h: int
    p_w: int
    nd: int


class _RowEmitter:
    def __init__(self, kb: KernelBuilder, spec: _ConvSpec, xv: View, wv: View, yv: View, bv: View | None,
                 epilogue: Epilogue, dtype: str) -> None:
        self.kb, self.s, self.xv, self.wv, self.yv, self.bv = kb, spec, xv, wv, yv, bv
        self.epilogue, self.dt = epilogue, dtype
        probe = Var("probe", dtype)
        self.has_epilogue = epilogue.apply(probe, self.out_index(index(0), index(0), index(0), index(0))) is not probe

    def out_index(self, n: Expr, oc: Expr, oh: Expr, ow: Expr) -> list[Expr]:
        """The index of the node's own output (1-D convolutions have no row dimension)."""
        return [n, oc, ow] if self.s.nd == 1 else [n, oc, oh, ow]

    def bias(self, oc: Expr) -> Expr:
        return self.bv.load([oc]) if self.bv is not None else const(0.0, self.dt)

    def finish(self, n: Expr, ocs: Sequence[Expr], oh0: Expr, rows: int) -> list[Stmt]:
        """Apply the fused epilogue to output rows [oh0, oh0 + rows) of channels `ocs`."""
        if not self.has_epilogue:
            return []
        kb, out = self.kb, self.yv.buffer

        def row(r: list[Expr]) -> list[Stmt]:
            oh, ow = oh0 + r[0], r[1]
            stmts: list[Stmt] = []
            for oc in ocs:
                at = self.yv.index([n, oc, oh, ow])
                stmts.append(Store(out, at, self.epilogue.apply(Load(out, at), self.out_index(n, oc, oh, ow))))
            return stmts

        return kb.loops([rows, self.s.out_w], row, prefix="e")

    def channel_blocks(self, g: Expr, block: int, emit: Callable[[list[Expr]], list[Stmt]]) -> list[Stmt]:
        s = self.s
        return blocks(self.kb, s.per_group, block,
                      lambda m0, count: emit([g * s.per_group + m0 + j for j in range(count)]), "o")

    # -- 1x1, stride 1, unpadded: a matrix product per image ---------------------------------
    def pointwise(self, n: Expr, g: Expr) -> list[Stmt]:
        s = self.s
        block = min(CHANNEL_BLOCK, s.per_group)
        k_unroll = max(1, WEIGHT_REGISTERS // block)
        rows_per_tile = max(1, POINTWISE_TILE // s.out_w)
        xbuf = self.xv.buffer

        def per_block(ocs: list[Expr]) -> list[Stmt]:
            def tile(r0: Expr, rows: int) -> list[Stmt]:
                p0 = r0 * s.out_w
                gemm = row_block_gemm(
                    self.kb, self.yv.buffer, self.dt, ocs, p0, rows * s.out_w, s.group_in,
                    row_at=lambda oc, p: self.yv.index([n, oc, 0, 0]) + p,
                    a_at=lambda oc, c: self.wv.load([oc, c, 0, 0]),
                    b_at=lambda c, p: Load(xbuf, self.xv.index([n, g * s.group_in + c, 0, 0]) + p),
                    init=[self.bias(oc) for oc in ocs], k_unroll=k_unroll)
                return gemm + self.finish(n, ocs, r0, rows)
            return blocks(self.kb, s.out_h, rows_per_tile, tile, "t")

        return self.channel_blocks(g, block, per_block)

    # -- general direct convolution, one output row at a time --------------------------------
    def direct(self, n: Expr, g: Expr) -> list[Stmt]:
        s = self.s
        depthwise = s.group_in == 1
        block = max(1, min(CHANNEL_BLOCK, s.per_group, WEIGHT_REGISTERS // s.k_w))
        col_ranges = [valid_range(s.out_w, s.in_w, s.s_w, kw * s.d_w - s.p_w) for kw in range(s.k_w)]
        # Consecutive output rows that see the same valid kernel rows share one loop.
        segments: list[tuple[int, int, int, int]] = []  # first row, row count, kh_lo, kh_hi
        for oh in range(s.out_h):
            kh_lo, kh_hi = valid_range(s.k_h, s.in_h, s.d_h, oh * s.s_h - s.p_h)
            if segments and segments[-1][2:] == (kh_lo, kh_hi) and segments[-1][0] + segments[-1][1] == oh:
                first, count, _, _ = segments[-1]
                segments[-1] = (first, count + 1, kh_lo, kh_hi)
            else:
                segments.append((oh, 1, kh_lo, kh_hi))

        def per_block(ocs: list[Expr]) -> list[Stmt]:
            stmts: list[Stmt] = []
            for first, count, kh_lo, kh_hi in segments:
                var = self.kb.var("oh") if count > 1 else None
                oh = var + first if var is not None else index(first)
                body = self.row(n, g, ocs, oh, kh_lo, kh_hi, col_ranges, depthwise)
                stmts += [Loop(var, count, body)] if var is not None else body
            return stmts

        return self.channel_blocks(g, block, per_block)

    def row(self, n: Expr, g: Expr, ocs: list[Expr], oh: Expr, kh_lo: int, kh_hi: int,
            col_ranges: list[tuple[int, int]], depthwise: bool) -> list[Stmt]:
        s, kb, out = self.s, self.kb, self.yv.buffer
        rows = [(lambda p, oc=oc: self.yv.index([n, oc, oh, p])) for oc in ocs]
        stmts = fill_rows(kb, out, rows, [self.bias(oc) for oc in ocs], s.out_w)

        def taps(c: Expr, kh: Expr) -> list[Step]:
            ih = oh * s.s_h + kh * s.d_h - s.p_h
            return [Step([self.wv.load([oc, c, kh, kw]) for oc in ocs],
                         lambda p, kw=kw: self.xv.load([n, g * s.group_in + c, ih, p * s.s_w + kw * s.d_w - s.p_w]),
                         lo, hi)
                    for kw, (lo, hi) in enumerate(col_ranges)]

        if depthwise:
            # One input channel: chain the whole window (every valid kernel row) into one update.
            steps = [t for kh in range(kh_lo, kh_hi) for t in taps(index(0), index(kh))]
            stmts += update_rows(kb, out, rows, steps, self.dt)
        elif kh_hi > kh_lo:
            per_channel = len(ocs) * s.k_w
            c_unroll = max(1, WEIGHT_REGISTERS // per_channel)

            def kernel_row(kh: Expr) -> list[Stmt]:
                return blocks(kb, s.group_in, c_unroll,
                              lambda c0, count: update_rows(
                                  kb, out, rows, [t for u in range(count) for t in taps(c0 + u, kh)], self.dt),
                              "c")

            if kh_hi - kh_lo == 1:
                stmts += kernel_row(index(kh_lo))
            else:
                kvar = kb.var("kh")
                stmts.append(Loop(kvar, kh_hi - kh_lo, kernel_row(kvar + kh_lo)))
        return stmts + self.finish(n, ocs, oh, 1)
