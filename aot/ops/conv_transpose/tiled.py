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

from aot.ir.graph import Node
from aot.kernel.ir import INDEX, Buffer, Const, Expr, Load, Stmt, Store, const
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, pays, slot_blocks
from aot.ops.attrs import required_input
from aot.ops.contraction.register_tiles import Reduction, register_tile
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
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    geo = _planar(geometry)
    (in_h, in_w), (out_h, out_w) = geo.in_spatial, geo.out_spatial
    rows = dim_phases(in_h, out_h, geo.kernel[0], geo.strides[0], geo.dilations[0], geo.pad_begin[0])
    cols = dim_phases(in_w, out_w, geo.kernel[1], geo.strides[1], geo.dilations[1], geo.pad_begin[1])
    (top, bottom), (left, right) = copy_padding(in_h, rows), copy_padding(in_w, cols)
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    if top or bottom or left or right:
        copy, xv, _, _ = padded_copy(node, ctx, kb, x, (in_h, in_w), [top, left], [bottom, right], False)
    else:
        copy, xv = [], View(kb.input(x).buffer, (geo.batch, geo.channels, in_h, in_w))
    yv = View(kb.output(final).buffer, (geo.batch, geo.out_channels, out_h, out_w))
    bv = kb.input(bias) if bias is not None else None
    dt, tile = final.dtype.name, ctx.tiles
    width = min(tile.cols, max(ph.outputs for ph in cols))
    # Accumulator rows a tile of `width` columns affords, evened out over all the rows.
    budget = tile.rows_for(width, geo.per_group * len([ph for ph in cols if ph.outputs]))
    sets = column_sets(cols, budget)
    per_set = max(len(s) for s in sets)
    block = max(1, min(geo.per_group, budget // per_set))  # output channels per tile
    weights = np.asarray(w.data, dtype=np.float32).reshape(geo.channels, geo.per_group, *geo.kernel)
    packed, bases = [], {}
    offset = 0
    for ph in rows:
        for si, column_set in enumerate(sets):
            part = pack_phase(weights, geo.groups, ph, column_set, block)
            bases[ph.index, si] = offset
            packed.append(part)
            offset += part.size
    wbuf = kb.input(ctx.constant(np.concatenate(packed), w.name)).buffer
    macs = geo.batch * geo.channels * geo.per_group * int(np.prod(geo.in_spatial)) * int(np.prod(geo.kernel))
    common = min(ph.outputs for ph in rows)
    # Threads split the output rows of one image (one group), each slot with its own scratch.
    slots = min(SCRATCH_SLOTS, common) if pays(ctx, macs) and geo.batch == geo.groups == 1 and common >= 2 else 1
    plane = len(cols) * block * width
    scratch = kb.output(scratch_tensor(ctx, node, (slots, len(cols), block, width), np.dtype(np.float32),
                                       "phases")).buffer
    flat = all(t.shape == epilogue.shape or t.size == 1 for t in epilogue.inputs)
    s_w = geo.strides[1]
    min_q = min(ph.outputs for ph in cols)
    max_q = max(ph.outputs for ph in cols)

    def finish(n: Expr, oc: Expr, oh: Expr, ow: Expr, value: Expr) -> Expr:
        if flat:
            return epilogue.apply(value, flat_index=yv.index([n, oc, oh, ow]))
        return epilogue.apply(value, [n, oc, ow] if geometry.nd == 1 else [n, oc, oh, ow])

    def column_block(n: Expr, g: Expr, oc0: Expr, count: int, ph: Phase, qh: Expr, q0: Expr, span: int,
                     slot: Expr) -> list[Stmt]:
        """Columns q0 .. q0 + span of every column phase of output row ph + s_h * qh."""
        stmts: list[Stmt] = []
        for si, column_set in enumerate(sets):
            stmts += _phase_tile(si, column_set, n, g, oc0, count, ph, qh, q0, span, slot)
        oh = qh * geo.strides[0] + ph.index

        def write(idx: list[Expr]) -> list[Stmt]:
            i, j = idx
            oc = g * geo.per_group + oc0 + i
            out: list[Stmt] = []
            for cp in cols:
                if not cp.outputs:
                    continue
                # Only the static block past min_q can hold columns a shorter phase lacks.
                if isinstance(q0, Const) and isinstance(j, Const) and int(q0.value) + int(j.value) >= cp.outputs:
                    continue
                ow = (q0 + j) * s_w + cp.index
                value: Expr = Load(scratch, slot * plane + (const(cp.index * block, INDEX) + i) * width + j)
                if not cp.taps or not ph.taps:  # no tap lands on this phase: bias alone
                    value = bv.load([oc]) if bv is not None else const(0.0, dt)
                out.append(Store(yv.buffer, yv.index([n, oc, oh, ow]), finish(n, oc, oh, ow, value)))
            return out

        # The last column (when phases differ in length) is one static block: unroll it.
        if span == 1:
            return stmts + kb.loops([count], lambda i: write([i[0], const(0, INDEX)]), prefix="c")
        return stmts + kb.loops([count, span], write, prefix="c")

    def _phase_tile(si: int, column_set: tuple[Phase, ...], n: Expr, g: Expr, oc0: Expr, count: int, ph: Phase,
                    qh: Expr, q0: Expr, span: int, slot: Expr) -> list[Stmt]:
        if not ph.taps or not column_set[0].taps:
            return []
        col_taps = column_set[0].taps
        k = geo.group_in * len(ph.taps) * len(col_taps)
        rows_here = count * len(column_set)
        base = bases[ph.index, si]

        def a_at(i: int, tap: list[Expr]) -> Expr:
            c, th, tw = tap
            kflat = (c * len(ph.taps) + th) * len(col_taps) + tw
            return Load(wbuf, const(base, INDEX) + (g * geo.per_group + oc0) * (len(column_set) * k)
                        + kflat * rows_here + i)

        def b_base(tap: list[Expr]) -> tuple[Buffer, Expr]:
            c, th, tw = tap
            assert isinstance(th, Const) and isinstance(tw, Const)
            row = qh + (ph.taps[int(th.value)][1] + top)
            return xv.buffer, xv.index([n, g * geo.group_in + c, row, q0 + (col_taps[int(tw.value)][1] + left)])

        def out_at(i: int, j: Expr) -> Expr:
            oc_i, ci = divmod(i, len(column_set))
            return slot * plane + const((column_set[ci].index * block + oc_i) * width, INDEX) + j

        init = [bv.load([g * geo.per_group + oc0 + i // len(column_set)]) if bv is not None else const(0.0, dt)
                for i in range(rows_here)]
        return register_tile(kb, dt, tile.lanes, rows_here, span, Reduction((geo.group_in, len(ph.taps),
                                                                             len(col_taps)), unrolled=2),
                             a_at, b_base, init, scratch, out_at)

    def output_row(n: Expr, g: Expr, ph: Phase, qh: Expr, slot: Expr) -> list[Stmt]:
        def channels(oc0: Expr, count: int) -> list[Stmt]:
            body = blocks(kb, min_q, width, lambda q0, span: column_block(n, g, oc0, count, ph, qh, q0, span, slot),
                          "q")
            if max_q > min_q:
                body += column_block(n, g, oc0, count, ph, qh, const(min_q, INDEX), max_q - min_q, slot)
            return body

        return blocks(kb, geo.per_group, block, channels, "o")

    def image(n: Expr, g: Expr) -> list[Stmt]:
        # Row phases innermost: output rows s_h * qh .. s_h * qh + s_h - 1 are written together
        # from the same few input rows, still in cache. Phases one row longer finish after.
        def rows_at(qh0: Expr, count: int, slot: Expr) -> list[Stmt]:
            return kb.loops([count], lambda qh: [s for ph in rows for s in output_row(n, g, ph, qh0 + qh[0], slot)],
                            prefix="h")

        zero = const(0, INDEX)
        stmts = slot_blocks(kb, common, 1, rows_at, "r", slots) if slots > 1 else rows_at(zero, common, zero)
        for ph in rows:
            if ph.outputs > common:
                stmts += output_row(n, g, ph, const(common, INDEX), zero)
        return stmts

    body = kb.loops([geo.batch, geo.groups], lambda idx: image(idx[0], idx[1]), prefix="n")
    ctx.emit(kb, copy + body)
