"""Conv 3x3, stride 1, as Winograd minimal filtering F(m x m, 3 x 3) (Lavin & Gray, "Fast
Algorithms for Convolutional Neural Networks", 2016).

A direct 3x3 convolution spends 9 multiply-adds per output per input channel. Winograd cuts the
output into m x m tiles; each tile's (m + 2) x (m + 2) input patch d and each 3x3 filter g go
through fixed linear transforms, after which the convolution is an element-wise product summed
over input channels:

    Y_tile = A^T [ sum_c (G g_c G^T) * (B^T d_c B) ] A

The sum over c, for each of the (m + 2)^2 transform positions `xi`, is a matrix product
U[xi] (OC x C, the transformed weights, made at compile time) times V[xi] (C x tiles, the
transformed input), done by the same register tiles as every other conv (aot/ops/
contraction/register_tiles.py). F(2x2, 3x3) spends 16 multiply-adds per 4 outputs instead of 36: 2.25x
fewer, for a transform of the input and the output that costs additions only.

Numerics: the transforms reassociate the 9 taps (F(2, 3)'s G has halves: exact in binary), so
results differ from a direct convolution by rounding, like any other fast-convolution library's
(onnxruntime's NCHWc kernels sum in yet another order); the tests compare with onnxruntime at
the usual 1e-4. Packages that must match a direct sum bit for bit compile with
`--conv-algorithm direct`.

Layout of the work, per image:
  * the input is copied once into a zero-padded, column-phase-split scratch (copies.
    strided_copy with stride m), extended to whole tiles: element j of a tile row's patch is
    phase j % m at column tx + j // m, so every patch element of consecutive tiles is one
    contiguous vector load;
  * the tile rows go in blocks whose transformed input V[xi][c][tile] (xi outermost) stays in
    L2: for each block, the input transform, then for each block of output channels and each
    run of tiles, the (m + 2)^2 register-tile products into a small scratch M that stays in L1,
    and straight away the output transform, bias and fused epilogue (Relu, a residual Add...)
    into the output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.intrinsics import VecZip
from aot.kernel.ir import (
    INDEX,
    VECTOR_DTYPES,
    Buffer,
    Const,
    Declare,
    Expr,
    If,
    Load,
    Loop,
    Splat,
    Stmt,
    Store,
    Var,
    VecArith,
    VecLoad,
    VecStore,
    binary,
    const,
    lt,
    vector_of,
)
from aot.kernel.vectorize import lanewise
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, pays, slot_blocks
from aot.ops.attrs import required_input
from aot.ops.contraction.register_tiles import Reduction, TileOperands, TileOutput, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.copies import strided_copy
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.conv.packing import pack_weights
from aot.ops.scratch import scratch_tensor


@dataclass(frozen=True)
class WinogradTransforms:
    """F(m x m, 3 x 3): B^T ((m+2) x (m+2)), G ((m+2) x 3) and A^T (m x (m+2))."""

    m: int
    bt: tuple[tuple[float, ...], ...]
    g: tuple[tuple[float, ...], ...]
    at: tuple[tuple[float, ...], ...]

    @property
    def alpha(self) -> int:
        """The side of an input patch (and of the transformed tiles)."""
        return self.m + 2

    def filter_transform(self, w: np.ndarray) -> np.ndarray:
        """[OC, C, 3, 3] -> [alpha * alpha, OC, C]: G g G^T for every filter, in float64 and
        rounded once."""
        g = np.asarray(self.g, dtype=np.float64)
        u = np.einsum("ak,ockl,bl->aboc", g, w.astype(np.float64), g)
        return u.reshape(self.alpha * self.alpha, w.shape[0], w.shape[1]).astype(w.dtype)


F2X2_3X3 = WinogradTransforms(
    m=2,
    bt=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
    g=((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
    at=((1, 1, 1, 0), (0, 1, -1, -1)),
)

# Transformed input of one block of tile rows ((m+2)^2 x C x tiles floats, at least one run of
# tiles), which every block of output channels reads: 32 KiB ran as fast as 256 KiB (SqueezeNet,
# ResNet-8, 14x14 to 56x56 convs, measured 8 KiB to 256 KiB) and keeps the arena small (ResNet-8:
# 536 KiB with 256 KiB blocks, 312 KiB with these; 264 KiB without Winograd).
V_BLOCK_BYTES = 32 * 1024


def combine(coefficients: Sequence[float], terms: Sequence[Expr]) -> Expr:
    """sum_k coefficients[k] * terms[k], skipping zeros and multiplying only by non-units; lane by
    lane for vector terms."""
    pairs = [(c, term) for c, term in zip(coefficients, terms) if c != 0]
    lanes = VECTOR_DTYPES[pairs[0][1].dtype][1] if pairs[0][1].dtype in VECTOR_DTYPES else 1
    if lanes > 1 and len(pairs) > 1 and pairs[0][0] == -1 and pairs[1][0] == 1:
        # Vectors have no negation: -t0 + t1 is t1 - t0, exactly (IEEE subtraction adds the negation).
        pairs[0], pairs[1] = pairs[1], pairs[0]
    value: Expr | None = None
    for c, term in pairs:
        if value is None:
            value = term if c == 1 else _arith("mul", _scalar(float(c), lanes), term)
        elif c == 1:
            value = _arith("add", value, term)
        elif c == -1:
            value = _arith("sub", value, term)
        else:
            value = _arith("add", value, _arith("mul", _scalar(float(c), lanes), term))
    assert value is not None
    return value


def _scalar(value: float, lanes: int) -> Expr:
    c = const(value, "float32")
    return c if lanes == 1 else Splat(c, lanes)


def _arith(op: str, a: Expr, b: Expr) -> Expr:
    """a op b, lane by lane for vectors; -1 * t as the negation it is for scalars."""
    if a.dtype in VECTOR_DTYPES:
        return VecArith(op, a, b)
    if op == "mul" and isinstance(a, Const) and a.value == -1.0:
        return -b
    return binary(op, a, b)


def _load(buffer: Buffer, index: Expr, lanes: int) -> Expr:
    return Load(buffer, index) if lanes == 1 else VecLoad(buffer, index, lanes)


def _store(buffer: Buffer, index: Expr, value: Expr, lanes: int) -> Stmt:
    return Store(buffer, index, value) if lanes == 1 else VecStore(buffer, index, value)


def lower_conv_winograd(node: Node, ctx: LoweringContext, geometry: ConvGeometry) -> None:
    """Emit the Conv `node` (validated, chosen for Winograd by algorithm.choose_algorithm) as
    Winograd F(2x2, 3x3)."""
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    kb = ctx.builder(node)
    # Named in the kernel's C comment and in `aot report`: which convolutions run as Winograd.
    kb.op = "Conv/winograd" + kb.op[len(node.op_type):]
    final, epilogue = ctx.epilogue(node, kb)
    emitter = _Winograd(ctx, node, kb, x, w, bias, final, epilogue, pad_begin=list(geometry.pad_begin),
                        pad_end=list(geometry.pad_end), tf=F2X2_3X3)
    ctx.emit(kb, emitter.copy + kb.loops([x.shape[0]], lambda idx: emitter.image(idx[0]), prefix="n"))


class _Winograd:
    def __init__(self, ctx: LoweringContext, node: Node, kb: KernelBuilder, x: Tensor, w: Tensor,
                 bias: Tensor | None, final: Tensor, epilogue: Epilogue, *, pad_begin: list[int], pad_end: list[int],
                 tf: WinogradTransforms) -> None:
        self.kb, self.tf, self.epilogue = kb, tf, epilogue
        self.dt = final.dtype.name
        batch, self.channels, in_h, in_w = x.shape
        self.out_channels, self.out_h, self.out_w = final.shape[1], final.shape[2], final.shape[3]
        m, alpha = tf.m, tf.alpha
        self.tiles_h, self.tiles_w = -(-self.out_h // m), -(-self.out_w // m)
        # The padded copy covers whole tiles: (m * tiles + 2) rows and columns.
        bottom = m * self.tiles_h + 2 - in_h - pad_begin[0]
        right = m * self.tiles_w + 2 - in_w - pad_begin[1]
        assert bottom >= pad_end[0] and right >= pad_end[1]
        self.copy, self.xv, _, _ = strided_copy(node, ctx, kb, x, (in_h, in_w), pad_begin, [bottom, right], m)
        self.yv = View(kb.output(final).buffer, final.shape)
        self.bv = kb.input(bias) if bias is not None else None
        tiles = ctx.tiles
        itemsize = final.dtype.itemsize
        cols = tiles.wide_cols
        # Tile rows per run of tiles (the columns of one register tile): whole rows when a row
        # of tiles is narrower than a tile, else one row in pieces.
        self.run_rows = max(1, cols // self.tiles_w) if self.tiles_w < cols else 1
        self.run_rows = min(self.run_rows, self.tiles_h)
        per_row = alpha * alpha * self.channels * self.tiles_w * itemsize
        block = max(1, min(self.tiles_h, V_BLOCK_BYTES // per_row))
        # Whole runs per block, unless the block is the whole image.
        self.block_rows = block if block == self.tiles_h else max(self.run_rows, block // self.run_rows * self.run_rows)
        self.run_cols = self.run_rows * self.tiles_w if self.run_rows > 1 else min(cols, self.tiles_w)
        # Output channels per register tile, which fixes the transformed weights' packing: sized
        # for a full run of tiles whatever this image's width, so that shape variants of one
        # model (one package, aot/compiler.py) share one array of them.
        self.rows = tiles.rows_for(cols, self.out_channels)
        self.lanes = tiles.lanes
        u = tf.filter_transform(np.asarray(w.data))  # [xi][OC][C]
        packed = np.concatenate([pack_weights(u[xi].reshape(self.out_channels, self.channels, 1, 1), 1, self.rows)
                                 for xi in range(alpha * alpha)])
        self.wbuf: Buffer = kb.input(ctx.constant(packed, w.name)).buffer
        # Threads: blocks of tile rows are independent (each transforms its own input), so they
        # split over scratch slots; an image of one block transforms its input first and splits
        # its blocks of output channels (each with its own M).
        full_blocks = self.tiles_h // self.block_rows
        macs = batch * self.out_channels * self.channels * self.out_h * self.out_w * 9
        threads = batch == 1 and pays(ctx, macs)
        channel_blocks = -(-self.out_channels // self.rows)
        self.split_channels = threads and full_blocks < 2 and channel_blocks > 1
        if self.split_channels:
            self.block_rows = self.tiles_h
        self.slots = 1 if not threads else max(1, min(SCRATCH_SLOTS, channel_blocks if self.split_channels
                                                      else full_blocks))
        v_slots = 1 if self.split_channels else self.slots
        self.v_size = alpha * alpha * self.channels * self.block_rows * self.tiles_w
        self.m_size = alpha * alpha * self.rows * self.run_cols
        self.vbuf = kb.output(scratch_tensor(ctx, node, (v_slots, self.v_size), self.dt, "winograd_v")).buffer
        self.mbuf = kb.output(scratch_tensor(ctx, node, (self.slots, self.m_size), self.dt, "winograd_m")).buffer
        probe = Var("probe", self.dt)
        self.has_epilogue = epilogue.apply(probe, [const(0, INDEX)] * 4) is not probe
        # Lanes of the transforms written as vectors (1: the compiler's vectoriser does it). The
        # output transform's vectors hold one output column of 4 tiles each, zipped into
        # consecutive columns: F(2x2) only, and only with an epilogue that has a lane-wise form.
        self.transform_lanes = tiles.loops_in_vectors
        self.output_lanes = self.transform_lanes if tf.m == 2 and self.transform_lanes == 4 else 1
        if self.output_lanes > 1 and self.has_epilogue:
            at = [Var(name, INDEX) for name in "nchw"]
            vector = Var("vector", vector_of(self.dt, self.output_lanes))
            if self._epilogue_lanes(vector, at) is None:
                self.output_lanes = 1

    def _epilogue_lanes(self, vector: Expr, index: list[Expr]) -> Expr | None:
        """The epilogue applied to `vector`, the outputs at `index` and the next lanes - 1 columns."""
        probe = Var("probe", self.dt)
        after = index[:-1] + [index[-1] + 1]
        return lanewise(self.epilogue.apply(probe, index), self.epilogue.apply(probe, after), probe, vector,
                        self.output_lanes)

    def _along(self, extent: int, lanes: int, body: Callable[[Expr, int], list[Stmt]], prefix: str) -> list[Stmt]:
        """body(start, width) over [0, extent): vectors of `lanes`, then the rest one by one."""
        whole = extent // lanes if lanes > 1 else 0
        stmts = self.kb.loops([whole], lambda i: body(i[0] * lanes, lanes), prefix=prefix) if whole else []
        if extent > whole * lanes:
            stmts += self.kb.loops([extent - whole * lanes], lambda i: body(i[0] + whole * lanes, 1), prefix=prefix)
        return stmts

    def image(self, n: Expr) -> list[Stmt]:
        zero = const(0, INDEX)
        if self.split_channels:
            return (self._input_transform(n, zero, self.tiles_h, zero)
                    + slot_blocks(self.kb, self.out_channels, self.rows,
                                  lambda oc0, rows, slot: self._channel_block(n, zero, self.tiles_h, zero, oc0, rows,
                                                                              slot), "o", self.slots))

        def block(ty0: Expr, count: int, slot: Expr) -> list[Stmt]:
            return self._input_transform(n, ty0, count, slot) + blocks(
                self.kb, self.out_channels, self.rows,
                lambda oc0, rows: self._channel_block(n, ty0, count, slot, oc0, rows, slot), "o")

        if self.slots > 1:
            return slot_blocks(self.kb, self.tiles_h, self.block_rows, block, "t", self.slots)
        return blocks(self.kb, self.tiles_h, self.block_rows, lambda ty0, count: block(ty0, count, const(0, INDEX)),
                      "t")

    def _v_at(self, slot: Expr, xi: Expr | int, c: Expr, tile: Expr) -> Expr:
        """V[xi][c][tile] of a block (tile = row within the block * tiles_w + column)."""
        columns = self.block_rows * self.tiles_w
        return slot * self.v_size + xi * (self.channels * columns) + c * columns + tile

    def _input_transform(self, n: Expr, ty0: Expr, count: int, slot: Expr) -> list[Stmt]:
        """V = B^T d B for the patch d of every tile of tile rows [ty0, ty0 + count), every channel."""
        tf, kb = self.tf, self.kb
        m, alpha = tf.m, tf.alpha

        def tiles(c: Expr, r: Expr, tx: Expr, lanes: int) -> list[Stmt]:
            """Tiles tx .. tx + lanes - 1 of tile row r (their patches' elements are consecutive)."""
            top = (ty0 + r) * m
            patch = [[_load(self.xv.buffer, self.xv.index([n, c, top + i, j % m, tx + j // m]), lanes)
                      for j in range(alpha)] for i in range(alpha)]
            dtype = self.dt if lanes == 1 else vector_of(self.dt, lanes)
            stmts: list[Stmt] = []
            rows: list[list[Expr]] = []  # d B: row i, column j = sum_k d[i][k] B^T[j][k]
            for i in range(alpha):
                row = []
                for j in range(alpha):
                    v = kb.var("wt", dtype)
                    stmts.append(Declare(v, combine(tf.bt[j], patch[i])))
                    row.append(v)
                rows.append(row)
            tile = r * self.tiles_w + tx
            for i in range(alpha):
                for j in range(alpha):
                    value = combine(tf.bt[i], [rows[k][j] for k in range(alpha)])
                    stmts.append(_store(self.vbuf, self._v_at(slot, i * alpha + j, c, tile), value, lanes))
            return stmts

        return kb.loops([self.channels, count], lambda idx: self._along(
            self.tiles_w, self.transform_lanes, lambda tx, lanes: tiles(idx[0], idx[1], tx, lanes), "v"), prefix="v")

    def _channel_block(self, n: Expr, ty0: Expr, count: int, v_slot: Expr, oc0: Expr, rows: int,
                       m_slot: Expr) -> list[Stmt]:
        """Output channels [oc0, oc0 + rows) of tile rows [ty0, ty0 + count), run by run of tiles:
        the (m+2)^2 products into M, then the output transform."""
        kb = self.kb
        if self.run_rows > 1 or self.tiles_w == self.run_cols:
            # Runs of whole tile rows.
            def run(r0: Expr, run_rows: int) -> list[Stmt]:
                return self._run(n, ty0, oc0, rows, r0, run_rows, const(0, INDEX), self.tiles_w, last_column=True,
                                 v_slot=v_slot, m_slot=m_slot)
            return blocks(kb, count, self.run_rows, run, "r")

        def row(idx: list[Expr]) -> list[Stmt]:
            def piece(tx0: Expr, width: int, last: bool) -> list[Stmt]:
                return self._run(n, ty0, oc0, rows, idx[0], 1, tx0, width, last_column=last, v_slot=v_slot,
                                 m_slot=m_slot)
            # The run ending at the last tile column goes on its own (its last tile may be partial).
            full, tail = divmod(self.tiles_w, self.run_cols)
            last_start, last_width = (full * self.run_cols, tail) if tail else ((full - 1) * self.run_cols,
                                                                             self.run_cols)
            return (blocks(kb, last_start, self.run_cols, lambda tx0, width: piece(tx0, width, False), "x")
                    + piece(const(last_start, INDEX), last_width, True))
        return kb.loops([count], row, prefix="r")

    def _run(self, n: Expr, ty0: Expr, oc0: Expr, rows: int, r0: Expr, run_rows: int, tx0: Expr, width: int,
             *, last_column: bool, v_slot: Expr, m_slot: Expr) -> list[Stmt]:
        """Output channels [oc0, oc0 + rows) of the tiles (ty0 + r0 + r, tx0 + q) for r < run_rows,
        q < width. `last_column`: the run ends at the last tile column."""
        tf, kb = self.tf, self.kb
        alpha2 = tf.alpha * tf.alpha
        cols = run_rows * width
        first_tile = r0 * self.tiles_w + tx0
        xi = kb.var("xi")
        m_base = m_slot * self.m_size

        def m_at(x: Expr | int, i: Expr | int, j: Expr) -> Expr:
            return m_base + x * (self.rows * self.run_cols) + i * self.run_cols + j

        product = register_tile(
            kb, self.dt, self.lanes, rows, cols, Reduction((self.channels,)),
            TileOperands(a_at=lambda i, k: Load(self.wbuf, xi * (self.out_channels * self.channels)
                                                + oc0 * self.channels + k[0] * rows + i),
                         b_base=lambda k: (self.vbuf, self._v_at(v_slot, xi, k[0], first_tile))),
            TileOutput(init=[const(0.0, self.dt)] * rows, out=self.mbuf, out_at=lambda i, j: m_at(xi, i, j)))
        stmts: list[Stmt] = [Loop(xi, alpha2, product)]
        # A loop over the channels, not one copy each: the kernel stays small enough for the
        # compilers (written out, UBSan builds of a conv took half a minute in clang's register
        # allocator).
        channel = kb.var("oi")
        stmts.append(Loop(channel, rows, self._output_transform(
            n, ty0 + r0, oc0 + channel, run_rows, tx0, width, last_column, lambda x, j: m_at(x, channel, j))))
        return stmts

    def _output_transform(self, n: Expr, ty: Expr, oc: Expr, run_rows: int, tx0: Expr, width: int,
                          last_column: bool, m_at: Callable[[int, Expr], Expr]) -> list[Stmt]:
        """Y = A^T M A (+ bias, the epilogue) for output channel oc of the run's tiles, storing
        only the outputs inside the image (the last tile row and column may be partial)."""
        tf, kb = self.tf, self.kb
        m, alpha = tf.m, tf.alpha
        rows_in_last = self.out_h - m * (self.tiles_h - 1)
        cols_in_last = self.out_w - m * (self.tiles_w - 1)
        partial_cols = last_column and cols_in_last < m

        def tiles(r: Expr, q: Expr, cols_here: int, out_rows: range, lanes: int) -> list[Stmt]:
            """Tiles q .. q + lanes - 1 of the run's tile row r."""
            j = r * width + q
            tile_m = [[_load(self.mbuf, m_at(a * alpha + b, j), lanes) for b in range(alpha)] for a in range(alpha)]
            dtype = self.dt if lanes == 1 else vector_of(self.dt, lanes)
            stmts: list[Stmt] = []
            left: list[list[Expr]] = []  # A^T M: row a, column b
            # Only the columns of A^T M that the stored outputs use (a partial tile uses fewer).
            used = [any(tf.at[b][k] != 0 for b in range(cols_here)) for k in range(alpha)]
            for a in out_rows:
                row = []
                for k in range(alpha):
                    value = combine(tf.at[a], [tile_m[t][k] for t in range(alpha)])
                    if used[k]:
                        v = kb.var("ot", dtype)
                        stmts.append(Declare(v, value))
                        value = v
                    row.append(value)
                left.append(row)
            oh0, ow0 = (ty + r) * m, (tx0 + q) * m
            bias = self.bv.load([oc]) if self.bv is not None else None
            if lanes > 1:
                return stmts + self._zipped_rows(n, oc, oh0, ow0, out_rows, left, bias, lanes)
            for a, row in zip(out_rows, left):
                for b in range(cols_here):
                    value = combine(tf.at[b], row)
                    if bias is not None:
                        value = value + bias
                    index = [n, oc, oh0 + a, ow0 + b]
                    if self.has_epilogue:
                        value = self.epilogue.apply(value, index)
                    stmts.append(self.yv.store(index, value))
            return stmts

        def all_columns(r: Expr, out_rows: range) -> list[Stmt]:
            full = width - 1 if partial_cols else width
            stmts = self._along(full, self.output_lanes, lambda q, lanes: tiles(r, q, m, out_rows, lanes), "q")
            if partial_cols:
                stmts += tiles(r, const(width - 1, INDEX), cols_in_last, out_rows, 1)
            return stmts

        def tile_row(idx: list[Expr]) -> list[Stmt]:
            r = idx[0]
            if rows_in_last == m:
                return all_columns(r, range(m))
            # The last tile row of the image keeps only its first rows_in_last output rows.
            return all_columns(r, range(rows_in_last)) + [
                If(lt(ty + r, const(self.tiles_h - 1, INDEX)), all_columns(r, range(rows_in_last, m)))]

        return kb.loops([run_rows], tile_row, prefix="rr")

    def _zipped_rows(self, n: Expr, oc: Expr, oh0: Expr, ow0: Expr, out_rows: range, left: list[list[Expr]],
                     bias: Expr | None, lanes: int) -> list[Stmt]:
        """Output rows `out_rows` of `lanes` whole F(2x2) tiles from A^T M (`left`, vectors over the
        tiles): each row's two columns as vectors, zipped into 2 * lanes consecutive outputs."""
        stmts: list[Stmt] = []
        for a, row in zip(out_rows, left):
            columns = []
            for b in range(self.tf.m):
                value = combine(self.tf.at[b], row)
                if bias is not None:
                    value = VecArith("add", value, Splat(bias, lanes))
                v = self.kb.var("ot", value.dtype)
                stmts.append(Declare(v, value))
                columns.append(v)
            for half in range(2):
                index = [n, oc, oh0 + a, ow0 + half * lanes]
                zipped: Expr | None = self.kb.var("oz", columns[0].dtype)
                stmts.append(Declare(zipped, VecZip(columns[0], columns[1], half == 1)))
                if self.has_epilogue:
                    zipped = self._epilogue_lanes(zipped, index)
                    assert zipped is not None  # checked when the lanes were chosen
                stmts.append(VecStore(self.yv.buffer, self.yv.index(index), zipped))
        return stmts
