"""Copies of a convolution's input that its kernels read instead of the input itself, made at the
start of the convolution's own kernel (one kernel per node, so the scratch lives only while it
runs; the kernel binds it once, as an output, and reads it back through that same pointer):

* padded: a zero-bordered image, so every tap of every output column reads inside it;
* strided: a zero-bordered image whose columns are split into `stride` phases, so a run of
  output columns of a strided convolution reads a contiguous run of the copy;
* im2col: the column matrix, for the matrix product over flattened pixels.

Each is stored as given or row-interleaved ([n][row][c][...], see algorithm.interleave_rows).
"""

from __future__ import annotations

from collections.abc import Callable

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Expr, Stmt, Store, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.contraction.row_updates import valid_range
from aot.ops.scratch import scratch_tensor


def padded_copy(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, in_hw: tuple[int, int],
                 pad_begin: list[int], pad_end: list[int], rows_first: bool) -> tuple[list[Stmt], View, int, int]:
    """Statements copying X into a new scratch tensor with zero borders, at the start of the
    convolution's own kernel (one kernel per node, and the scratch lives only while it runs),
    row-interleaved when `rows_first` (algorithm.interleave_rows); the scratch,
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

        return (zeros(0, top, 0, width) + kb.loops([in_h], edges, roles=["iy"])
                + kb.loops([in_h, in_w], interior, roles=["iy", "ix"]) + zeros(top + in_h, bottom, 0, width))

    return kb.loops([batch, channels], plane, roles=["n", "c"]), dst, height, width




def strided_copy(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, in_hw: tuple[int, int],
                 pad_begin: list[int], pad_end: list[int], stride: int,
                 *, fill: float = 0.0, rows_first: bool = False) -> tuple[list[Stmt], View, int, int]:
    """Statements copying X into a zero-padded scratch image whose columns are split into
    `stride` phases, [n][c][row][phase][column // stride]: output column ow of tap kw then reads
    phase (kw * dilation) % stride at column ow + (kw * dilation) // stride, so a run of output
    columns reads a contiguous run of the scratch, as the tiles' vector loads need. The padding
    holds `fill` (MaxPool pads with -inf). `rows_first` stores it row-interleaved (see
    interleave_rows). Returns the statements, the scratch viewed as [n][c][row][phase][column]
    and its padded (height, width)."""
    batch, channels = x.shape[0], x.shape[1]
    layout = PhaseLayout(in_hw, pad_begin, pad_end, stride)
    dst = scratch_image(ctx, node, kb, (batch, channels, *layout.shape), x, "strided", rows_first)
    src = View(kb.input(x).buffer, (batch, channels, *in_hw))
    zero = const(fill, x.dtype.name)
    stmts = kb.loops([batch, channels], lambda nc: layout.border(
        kb, lambda h, p, q: dst.store([nc[0], nc[1], h, p, q], zero)), prefix="b")
    stmts += layout.interior(kb, [batch, channels], lambda nc, h, p, q, value: dst.store([*nc, h, p, q], value),
                             lambda nc, ih, iw: src.load([*nc, ih, iw]))
    return stmts, dst, layout.height, layout.width


def strided_channel_copy(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, in_hw: tuple[int, int],
                         pad_begin: list[int], pad_end: list[int],
                         stride: int) -> tuple[list[Stmt], View, Callable[[Expr, Expr], list[Stmt]]]:
    """The column-phase copy of strided_copy, one channel at a time into a scratch of one
    channel's size, for a depthwise convolution that copies channel c just before computing it:
    the copy is then read back from L1 rather than L2, and the scratch is a channel's, not the
    image's. Returns the statements filling its border (once: the copies never touch it), the
    scratch viewed as [n][c][row][phase][column] (every n and c the same plane) and the
    statements copying channel c of image n into it."""
    batch, channels = x.shape[0], x.shape[1]
    layout = PhaseLayout(in_hw, pad_begin, pad_end, stride)
    plane = View(kb.output(scratch_tensor(ctx, node, layout.shape, x.dtype, "strided")).buffer, layout.shape)
    dst = View(plane.buffer, (batch, channels, *layout.shape), (0, 0, *plane.strides))
    src = View(kb.input(x).buffer, (batch, channels, *in_hw))
    zero = const(0.0, x.dtype.name)
    border = layout.border(kb, lambda h, p, q: plane.store([h, p, q], zero))

    def copy_channel(n: Expr, c: Expr) -> list[Stmt]:
        return layout.interior(kb, [], lambda _, h, p, q, value: plane.store([h, p, q], value),
                               lambda _, ih, iw: src.load([n, c, ih, iw]))

    return border, dst, copy_channel


class PhaseLayout:
    """Where a column-phase copy puts an image of `in_hw` padded by `pad_begin`/`pad_end`:
    [row][phase][column // stride] of `shape`, and which columns of each phase hold the input."""

    def __init__(self, in_hw: tuple[int, int], pad_begin: list[int], pad_end: list[int], stride: int) -> None:
        self.in_h, self.in_w = in_hw
        (self.top, self.left), (bottom, right) = pad_begin, pad_end
        self.height, self.width = self.in_h + self.top + bottom, self.in_w + self.left + right
        self.stride = stride
        per_phase = -(-self.width // stride)
        self.shape = (self.height, stride, per_phase)
        self.columns = [valid_range(per_phase, self.in_w, stride, phase - self.left) for phase in range(stride)]

    def border(self, kb: KernelBuilder, store: Callable[[Expr, Expr, Expr], Stmt]) -> list[Stmt]:
        """Statements storing the padding through `store(row, phase, column)`."""
        return fill_phase_border(kb, store, self.shape, (self.top, self.top + self.in_h), self.columns)

    def interior(self, kb: KernelBuilder, outer: list[int], store: Callable[..., Stmt],
                 load: Callable[[list[Expr], Expr, Expr], Expr]) -> list[Stmt]:
        """Statements copying the input, loops over `outer` (their indices passed on as the
        first argument) around each: `store(outer, row, phase, column, value)` of
        `load(outer, input row, input column)`."""
        stride, left, top, lead = self.stride, self.left, self.top, len(outer)
        # The columns every phase copies go in one loop that stores all phases from consecutive
        # loads: an interleaved access group, which the compilers vectorise as whole-vector loads and
        # shuffles (a loop per phase of 24 strided loads became scalar inserts: 2x slower on a
        # MobileNet's 3x3/2 depthwise convs).
        columns = self.columns
        joint = (max(lo for lo, _ in columns), min(hi for _, hi in columns))
        pieces = [(phase, lo, hi) for phase, (lo, hi) in enumerate(columns)]
        stmts: list[Stmt] = []
        if joint[1] > joint[0]:
            pieces = [(p, lo, hi) for phase, (lo, hi) in enumerate(columns)
                      for p, lo, hi in ((phase, lo, joint[0]), (phase, joint[1], hi))]

            def together(idx: list[Expr]) -> list[Stmt]:
                ih, col = idx[lead], idx[lead + 1] + joint[0]
                return [store(idx[:lead], ih + top, const(phase, INDEX), col,
                              load(idx[:lead], ih, col * stride + (phase - left))) for phase in range(stride)]

            stmts += kb.loops([*outer, self.in_h, joint[1] - joint[0]], together, prefix="s")
        for phase, lo, hi in pieces:
            if hi <= lo:
                continue

            def copy(idx: list[Expr], phase: int = phase, lo: int = lo) -> list[Stmt]:
                ih, col = idx[lead], idx[lead + 1] + lo
                return [store(idx[:lead], ih + top, const(phase, INDEX), col,
                              load(idx[:lead], ih, col * stride + (phase - left)))]

            stmts += kb.loops([*outer, self.in_h, hi - lo], copy, prefix="s")
        return stmts


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



def im2col(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: Tensor, in_hw: tuple[int, int],
           out_hw: tuple[int, int], kernel: list[int], strides: list[int], *, dilations: list[int],
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
    stmts = kb.loops([cols.shape[0] * rows * out_h * out_w], lambda i: [Store(cols.buffer, i[0], zero)], roles=["i"])
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

            stmts += kb.loops([batch, channels, h_hi - h_lo, w_hi - w_lo], copy, roles=["n", "c", "oy", "ox"])
    return stmts, cols.buffer, rows




def fill_phase_border(kb: KernelBuilder, store: Callable[[Expr, Expr, Expr], Stmt], shape: tuple[int, int, int],
                      rows: tuple[int, int], columns: list[tuple[int, int]]) -> list[Stmt]:
    """Statements storing the padding value (through `store(row, phase, column)`) in the cells of
    a [row][phase][column] scratch image that a copy of the input leaves untouched: every row
    outside `rows`, and in those rows, the columns of each phase outside its `columns` range.
    Filling only the border, not the whole image before the copy, halves the stores of a copy
    without padding (a strided stem or MaxPool)."""
    height, phases, per_phase = shape
    first, last = rows
    stmts: list[Stmt] = []
    for a, b in ((0, first), (last, height)):
        if b > a:
            stmts += kb.loops([b - a, phases, per_phase], lambda i, a=a: [store(i[0] + a, i[1], i[2])], prefix="z")
    for phase, (lo, hi) in enumerate(columns):
        for a, b in ((0, lo), (max(lo, hi), per_phase)):
            if b > a and last > first:
                stmts += kb.loops([last - first, b - a], lambda i, a=a, phase=phase: [
                    store(i[0] + first, const(phase, INDEX), i[1] + a)], prefix="z")
    return stmts
