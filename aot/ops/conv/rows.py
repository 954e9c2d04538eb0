"""1-D and 2-D Conv as vectorisable row updates (see aot/ops/contraction/row_updates.py for the
scheme), for convolutions whose weights are computed at run time or are not floats (the others
are register tiles, tiled.py).

Two shapes of loop nest:

* pointwise (1x1 kernel, stride 1, no padding): a matrix product W[OC x C] . X[C x H*W] per image,
  tiled over whole output rows so a tile of every output row being accumulated stays in L1;
* everything else (3x3, strided, dilated, padded, grouped, depthwise): for each block of output
  channels and each output row, the rows are initialised with the bias and then updated by
  groups of taps. The valid kernel rows for an output row and the valid output columns for a
  kernel column are computed here, at compile time, so the loops carry no bounds checks.
  Depthwise convolutions (one input channel per group) chain every tap of the window into one
  update of the row. Padded convolutions first copy the input into a zero-bordered scratch
  image (copies.padded_copy), so that every output row is a single full-width vector loop.

A 1-D convolution is the 2-D one with a single row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from aot.ir.graph import Node
from aot.kernel.ir import Expr, Load, Loop, Stmt, Store, Var, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
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
from aot.ops.conv.algorithm import ConvAlgorithm
from aot.ops.conv.copies import padded_copy
from aot.ops.conv.geometry import ConvGeometry, ConvSpec
from aot.ops.scratch import scratch_tensor

# Output channels updated together by one vector loop (they share every input load).
CHANNEL_BLOCK = 4
# Elements of one output row tile in the pointwise kernel: CHANNEL_BLOCK rows of this many floats
# plus one input row stay well inside a 32 KiB L1 data cache.
POINTWISE_TILE = 512


def lower_conv_rows(node: Node, ctx: LoweringContext, planar: ConvGeometry, algorithm: ConvAlgorithm) -> None:
    """Emit the Conv `node` (validated, `planar` its 2-D geometry) as row kernels."""
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    (in_h, in_w), (out_h, out_w) = planar.in_spatial, planar.out_spatial
    if algorithm.copy == "padded":
        copy, xv, _, _ = padded_copy(node, ctx, kb, x, (in_h, in_w), list(planar.pad_begin), list(planar.pad_end),
                                     rows_first=False)
    else:
        copy, xv = [], View(kb.input(x).buffer, (planar.batch, planar.channels, in_h, in_w))
    spec = planar.spec(over_padded_copy=algorithm.copy == "padded")
    yv = View(kb.output(final).buffer, (planar.batch, planar.out_channels, out_h, out_w))
    bv = kb.input(bias) if bias is not None else None
    wv = View(kb.input(w).buffer, (planar.out_channels, spec.group_in, spec.k_h, spec.k_w))
    if algorithm.via_plane:
        ctx.emit(kb, copy + _via_plane(node, ctx, kb, planar, spec, (xv, wv, yv, bv), epilogue, final.dtype.name))
        return
    emitter = _RowEmitter(kb, spec, xv, wv, yv, bv, epilogue, final.dtype.name)
    body = emitter.pointwise if algorithm.pointwise else emitter.direct
    ctx.emit(kb, copy + kb.loops([planar.batch, planar.groups], lambda idx: body(idx[0], idx[1])))


def _via_plane(node: Node, ctx: LoweringContext, kb: KernelBuilder, planar: ConvGeometry, spec: ConvSpec,
               views: tuple[View, View, View, View | None], epilogue: Epilogue, dtype: str) -> list[Stmt]:
    """A depthwise convolution one channel at a time: the channel's rows into a scratch plane
    (its epilogue applied there), then the plane copied to the output. Every load of an input
    channel comes before the first store to that output channel, and no channel's stores reach
    a later channel's input, so the planner can write the output over the input (TinyEngine's
    in-place depthwise: N + 1 channels live instead of 2N)."""
    xv, wv, yv, bv = views
    kb.whole_run_in_place = True
    out_h, out_w = planar.out_spatial
    plane = scratch_tensor(ctx, node, (out_h, out_w), np.dtype(dtype), "plane")
    # every (image, channel) writes the same plane: strides 0 for both
    pv = View(kb.output(plane).buffer, (planar.batch, planar.out_channels, out_h, out_w), (0, 0, out_w, 1))
    emitter = _RowEmitter(kb, spec, xv, wv, pv, bv, epilogue, dtype)

    def channel(idx: list[Expr]) -> list[Stmt]:
        n, g = idx
        copy_out = kb.loops([out_h, out_w], lambda p: [yv.store([n, g, p[0], p[1]], pv.load([n, g, p[0], p[1]]))],
                            prefix="q")
        return emitter.direct(n, g) + copy_out

    return kb.loops([planar.batch, planar.groups], channel)


class _RowEmitter:
    def __init__(self, kb: KernelBuilder, spec: ConvSpec, xv: View, wv: View, yv: View, bv: View | None,
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
