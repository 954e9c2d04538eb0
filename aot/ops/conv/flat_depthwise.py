"""Conv as register tiles over the flattened image, for depthwise convolutions with unit stride
and 'same' padding (TiledConv's flat mode, algorithm.flat_depthwise_fits)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Const, Expr, Stmt, Store, const
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import SCRATCH_SLOTS, pays, slot_blocks
from aot.ops.contraction.register_tiles import Reduction
from aot.ops.contraction.row_updates import blocks
from aot.ops.conv.pixel_tiles import TiledConv
from aot.ops.scratch import scratch_tensor

# Vectors of output pixels per flat depthwise tile: one broadcast weight feeds them all, and 8
# independent multiply-add chains cover the FMA latency.
FLAT_VECTORS = 8
# Scratch for the shifted copies of one block of channels: well inside L1.
FLAT_BLOCK_BYTES = 16 * 1024
# The narrowest float vectors (AVX2's) whose shifted copies start at aligned vectors (_init_flat).
ALIGNED_COPY_LANES = 8


class FlatDepthwise(TiledConv):
    block_bytes = FLAT_BLOCK_BYTES  # the scratch of one block of channels' shifted copies, at most
    aligned_copies = True  # see _init_flat

    def _prepare(self, ctx: LoweringContext, node: Node, w: Tensor) -> None:
        self._init_flat(ctx, node, self.s.out_h * self.s.out_w)
        self._pack(ctx, node, w, self.width)

    def emit_image(self, n: Expr, prologue: Callable[[Expr, Expr], list[Stmt]] | None = None) -> list[Stmt]:
        assert prologue is None  # the flat mode reads the input itself
        return self._flat(n)

    def emit(self, n: Expr, g: Expr) -> list[Stmt]:
        # Every group at once (emit_image's case); also where a caller sees one group: the
        # column matrix of a one-channel im2col is a one-channel "depthwise" conv.
        return self._flat(n)

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
        # With vectors of 32 or 64 bytes each copy starts `lead` unread elements early, so that
        # its stores, the plane's pixels from index lead + margin on, are whole aligned vectors:
        # misaligned, half or all of them span two cache lines (`python -m benchmarks.run` on
        # VWW, DS-CNN and ShuffleNet shows it). Not with NEON's 16 bytes (more instructions
        # there, `python -m benchmarks.arm`) nor in the leanest form, which saves bytes.
        lanes = self.tile.lanes if self.aligned_copies and self.tile.lanes >= ALIGNED_COPY_LANES else 1
        self.lead = -self.margin % lanes
        size = self.lead + self.margin + pixels + (s.k_h - 1 - s.p_h) * s.in_w + (s.k_w - 1 - s.p_w)
        self.copy_size = -(-size // lanes) * lanes
        per_channel = s.k_w * self.copy_size
        self.block = max(1, min(s.groups, self.block_bytes // (per_channel * np.dtype(self.dt).itemsize)))
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
        tail = self.copy_size - self.lead - self.margin - pixels

        def at(slot: Expr, kw: int, i: Expr) -> Expr:
            return slot * per_channel + kw * self.copy_size + self.lead + i

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

                return self._tile(n, c, const(0, INDEX), 1, cols, reduction, b_base, p0, row=None, first_col=None)

            return blocks(kb, pixels, self.width, tile, "p")

        def block(c0: Expr, count: int, slot: Expr) -> list[Stmt]:
            first = slot * self.block
            return (kb.loops([count], lambda i: copy(first + i[0], c0 + i[0]), prefix="b")
                    + kb.loops([count], lambda i: compute(first + i[0], c0 + i[0]), prefix="b"))

        if self.slots > 1:
            return stmts + slot_blocks(kb, s.groups, self.block, block, "c", self.slots)
        return stmts + blocks(kb, s.groups, self.block, lambda c0, count: block(c0, count, const(0, INDEX)), "c")


class LeanFlatDepthwise(FlatDepthwise):
    """The flat mode with one channel's shifted copies at a time: the least scratch it can have,
    for a --max-arena plan (aot/planner/budget.py), at the cost of the loads that wait on the
    copies' stores (see _init_flat)."""

    block_bytes = 0
    aligned_copies = False
