"""ConvTranspose as register tiles over its stride phases (phases.py), for constant float32
weights and one or two spatial dims, any groups (depthwise too), strides, dilations, padding and
output_padding.

For output row oh = ph + s_h * qh, each tile is a block of output channels by a run of the
phase's columns qw, accumulated over (input channel, row tap, column tap) from the input rows
qh + row offset, read contiguously along qw (aot/ops/contraction/register_tiles.py, the tile of
Conv, Gemm and MatMul). Column phases with the same input offsets share one tile, as extra rows
that reuse its input vectors: kernel == stride (2x2, stride 2) is then one matrix product per
row phase, every output computed once and no multiply by an inserted zero. The tile lands in a
small scratch, which a second pass interleaves into the output row, adding the fused epilogue
(residual Add, BatchNorm, Relu...). Padding that reads outside the input becomes a zero-bordered
copy of it (aot/ops/conv/copies.py), so no load is guarded. The weights are repacked at compile
time in the order the tiles broadcast them.
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Const, Expr, Load, Stmt, Store, const
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, pays, slot_blocks
from aot.ops.attrs import required_input
from aot.ops.contraction.register_tiles import Reduction, TileOperands, TileOutput, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.copies import padded_copy
from aot.ops.conv_transpose.geometry import TransposeGeometry
from aot.ops.conv_transpose.phases import Phase, column_sets, copy_padding, dim_phases, pack_phase
from aot.ops.scratch import scratch_tensor


def _planar(geo: TransposeGeometry) -> TransposeGeometry:
    """The 2-D form: a 1-D transposed convolution gets a row dimension of height 1."""
    if geo.nd == 2:
        return geo
    return TransposeGeometry(geo.batch, geo.channels, geo.out_channels, geo.groups, (1, *geo.in_spatial),
                             (1, *geo.out_spatial), (1, *geo.kernel), (1, *geo.strides), (1, *geo.dilations),
                             (0, *geo.pad_begin))


def lower_phase_tiles(node: Node, ctx: LoweringContext, geometry: TransposeGeometry) -> None:
    _PhaseTiles(node, ctx, geometry).emit()


class _PhaseTiles:
    """One ConvTranspose lowered as phase tiles: the geometry's phases, the packed weights, the
    scratch, and the loops that fill the scratch and interleave it into the output."""

    def __init__(self, node: Node, ctx: LoweringContext, geometry: TransposeGeometry) -> None:
        x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
        self.geometry = geometry
        self.geo = geo = _planar(geometry)
        self.kb = kb = ctx.builder(node)
        (in_h, in_w), (out_h, out_w) = geo.in_spatial, geo.out_spatial
        self.rows = dim_phases(in_h, out_h, geo.kernel[0], geo.strides[0], geo.dilations[0], geo.pad_begin[0])
        self.cols = dim_phases(in_w, out_w, geo.kernel[1], geo.strides[1], geo.dilations[1], geo.pad_begin[1])
        (self.top, bottom), (self.left, right) = copy_padding(in_h, self.rows), copy_padding(in_w, self.cols)
        final, self.epilogue = ctx.epilogue(node, kb)
        if self.top or bottom or self.left or right:
            self.copy, self.xv, _, _ = padded_copy(node, ctx, kb, x, (in_h, in_w), [self.top, self.left],
                                                   [bottom, right], False)
        else:
            self.copy, self.xv = [], View(kb.input(x).buffer, (geo.batch, geo.channels, in_h, in_w))
        self.yv = View(kb.output(final).buffer, (geo.batch, geo.out_channels, out_h, out_w))
        self.bv = kb.input(bias) if bias is not None else None
        self.dt, self.tile = final.dtype.name, ctx.tiles.one_by_one()
        longest = max(ph.outputs for ph in self.cols)
        rows = geo.per_group * len([ph for ph in self.cols if ph.outputs])
        # Few rows (a detector's one-channel map: 2 column phases) take wider tiles.
        self.width = self.tile.cols_for_rows(min(self.tile.cols, longest), rows, longest)
        # Accumulator rows a tile of `width` columns affords, evened out over all the rows.
        budget = self.tile.rows_for(self.width, rows)
        self.sets = column_sets(self.cols, budget)
        self.block = max(1, min(geo.per_group, budget // max(len(s) for s in self.sets)))  # channels per tile
        self.wbuf, self.bases = self._packed_weights(ctx, w)
        macs = geo.batch * geo.channels * geo.per_group * int(np.prod(geo.in_spatial)) * int(np.prod(geo.kernel))
        self.common = min(ph.outputs for ph in self.rows)
        # Threads split the output rows of one image (one group), each slot with its own scratch.
        threaded = pays(ctx, macs) and geo.batch == geo.groups == 1 and self.common >= 2
        self.slots = min(SCRATCH_SLOTS, self.common) if threaded else 1
        self.plane = len(self.cols) * self.block * self.width
        self.scratch = kb.output(scratch_tensor(ctx, node, (self.slots, len(self.cols), self.block, self.width),
                                                np.dtype(np.float32), "phases")).buffer
        self.flat = all(t.shape == self.epilogue.shape or t.size == 1 for t in self.epilogue.inputs)
        self.min_q = min(ph.outputs for ph in self.cols)
        self.max_q = max(ph.outputs for ph in self.cols)
        self.ctx = ctx

    def _packed_weights(self, ctx: LoweringContext, w: Tensor) -> tuple[Buffer, dict[tuple[int, int], int]]:
        """The weights in the order the tiles broadcast them, and where each (row phase, column
        set) part starts."""
        geo = self.geo
        weights = np.asarray(w.data, dtype=np.float32).reshape(geo.channels, geo.per_group, *geo.kernel)
        packed, bases = [], {}
        offset = 0
        for ph in self.rows:
            for si, column_set in enumerate(self.sets):
                part = pack_phase(weights, geo.groups, ph, column_set, self.block)
                bases[ph.index, si] = offset
                packed.append(part)
                offset += part.size
        return self.kb.input(ctx.constant(np.concatenate(packed), w.name)).buffer, bases

    def emit(self) -> None:
        body = self.kb.loops([self.geo.batch, self.geo.groups], lambda idx: self._image(idx[0], idx[1]), prefix="n")
        self.ctx.emit(self.kb, self.copy + body)

    def _finish(self, n: Expr, oc: Expr, oh: Expr, ow: Expr, value: Expr) -> Expr:
        if self.flat:
            return self.epilogue.apply(value, flat_index=self.yv.index([n, oc, oh, ow]))
        return self.epilogue.apply(value, [n, oc, ow] if self.geometry.nd == 1 else [n, oc, oh, ow])

    def _column_block(self, n: Expr, g: Expr, oc0: Expr, count: int, ph: Phase, qh: Expr, q0: Expr, span: int,
                      *, slot: Expr) -> list[Stmt]:
        """Columns q0 .. q0 + span of every column phase of output row ph + s_h * qh."""
        stmts: list[Stmt] = []
        for si, column_set in enumerate(self.sets):
            stmts += self._phase_tile(si, column_set, n, g, oc0, count, ph, qh, q0=q0, span=span, slot=slot)
        oh = qh * self.geo.strides[0] + ph.index

        def write(idx: list[Expr]) -> list[Stmt]:
            return self._interleave(n, g, oc0, ph, oh, q0, slot, idx[0], j=idx[1])

        # The last column (when phases differ in length) is one static block: unroll it.
        if span == 1:
            return stmts + self.kb.loops([count], lambda i: write([i[0], const(0, INDEX)]), prefix="c")
        return stmts + self.kb.loops([count, span], write, prefix="c")

    def _interleave(self, n: Expr, g: Expr, oc0: Expr, ph: Phase, oh: Expr, q0: Expr, slot: Expr, i: Expr,
                    *, j: Expr) -> list[Stmt]:
        """Output channel oc0 + i, column q0 + j of every column phase: from the scratch into the
        output row, through the fused epilogue."""
        geo, yv, bv = self.geo, self.yv, self.bv
        oc = g * geo.per_group + oc0 + i
        out: list[Stmt] = []
        for cp in self.cols:
            if not cp.outputs:
                continue
            # Only the static block past min_q can hold columns a shorter phase lacks.
            if isinstance(q0, Const) and isinstance(j, Const) and int(q0.value) + int(j.value) >= cp.outputs:
                continue
            ow = (q0 + j) * geo.strides[1] + cp.index
            value: Expr = Load(self.scratch, slot * self.plane + (const(cp.index * self.block, INDEX) + i) * self.width
                               + j)
            if not cp.taps or not ph.taps:  # no tap lands on this phase: bias alone
                value = self._finish(n, oc, oh, ow, bv.load([oc]) if bv is not None else const(0.0, self.dt))
            out.append(Store(yv.buffer, yv.index([n, oc, oh, ow]), value))  # a tile's value is finished
        return out

    def _phase_tile(self, si: int, column_set: tuple[Phase, ...], n: Expr, g: Expr, oc0: Expr, count: int,
                    ph: Phase, qh: Expr, *, q0: Expr, span: int, slot: Expr) -> list[Stmt]:
        if not ph.taps or not column_set[0].taps:
            return []
        geo, xv, bv = self.geo, self.xv, self.bv
        col_taps = column_set[0].taps
        k = geo.group_in * len(ph.taps) * len(col_taps)
        rows_here = count * len(column_set)
        base = self.bases[ph.index, si]

        def a_at(i: int, tap: list[Expr]) -> Expr:
            c, th, tw = tap
            kflat = (c * len(ph.taps) + th) * len(col_taps) + tw
            return Load(self.wbuf, const(base, INDEX) + (g * geo.per_group + oc0) * (len(column_set) * k)
                        + kflat * rows_here + i)

        def b_base(tap: list[Expr]) -> tuple[Buffer, Expr]:
            c, th, tw = tap
            assert isinstance(th, Const) and isinstance(tw, Const)
            row = qh + (ph.taps[int(th.value)][1] + self.top)
            return xv.buffer, xv.index([n, g * geo.group_in + c, row, q0 + (col_taps[int(tw.value)][1] + self.left)])

        def out_at(i: int, j: Expr) -> Expr:
            oc_i, ci = divmod(i, len(column_set))
            return slot * self.plane + const((column_set[ci].index * self.block + oc_i) * self.width, INDEX) + j

        def finish(i: int, j: Expr, value: Expr) -> Expr:
            """The fused epilogue on the tile's accumulators, in registers where it is lane-wise
            along the phase's columns (an activation: its vector form; register_tiles.py), so
            that the interleaving pass only copies."""
            oc_i, ci = divmod(i, len(column_set))
            oh, ow = qh * geo.strides[0] + ph.index, (q0 + j) * geo.strides[1] + column_set[ci].index
            return self._finish(n, g * geo.per_group + oc0 + oc_i, oh, ow, value)

        init = [bv.load([g * geo.per_group + oc0 + i // len(column_set)]) if bv is not None else const(0.0, self.dt)
                for i in range(rows_here)]
        reduction = Reduction((geo.group_in, len(ph.taps), len(col_taps)), unrolled=2)
        return register_tile(self.kb, self.dt, self.tile.lanes, rows_here, span, reduction, TileOperands(a_at, b_base),
                             TileOutput(init, self.scratch, out_at, finish))

    def _output_row(self, n: Expr, g: Expr, ph: Phase, qh: Expr, slot: Expr) -> list[Stmt]:
        def channels(oc0: Expr, count: int) -> list[Stmt]:
            body = blocks(self.kb, self.min_q, self.width,
                          lambda q0, span: self._column_block(n, g, oc0, count, ph, qh, q0, span, slot=slot), "q")
            if self.max_q > self.min_q:
                body += self._column_block(n, g, oc0, count, ph, qh, const(self.min_q, INDEX),
                                           self.max_q - self.min_q, slot=slot)
            return body

        return blocks(self.kb, self.geo.per_group, self.block, channels, "o")

    def _image(self, n: Expr, g: Expr) -> list[Stmt]:
        # Row phases innermost: output rows s_h * qh .. s_h * qh + s_h - 1 are written together
        # from the same few input rows, still in cache. Phases one row longer finish after.
        def rows_at(qh0: Expr, count: int, slot: Expr) -> list[Stmt]:
            return self.kb.loops([count], lambda qh: [s for ph in self.rows
                                                      for s in self._output_row(n, g, ph, qh0 + qh[0], slot)],
                                 prefix="h")

        zero = const(0, INDEX)
        stmts = (slot_blocks(self.kb, self.common, 1, rows_at, "r", self.slots) if self.slots > 1
                 else rows_at(zero, self.common, zero))
        for ph in self.rows:
            if ph.outputs > self.common:
                stmts += self._output_row(n, g, ph, const(self.common, INDEX), zero)
        return stmts
