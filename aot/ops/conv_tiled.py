"""Conv as register tiles (aot/ops/register_tiles.py): the fast path for every 1-D/2-D
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

from aot.ir.graph import Tensor
from aot.kernel.ir import INDEX, Buffer, Expr, Load, Stmt, Var, binary, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import Epilogue, LoweringContext
from aot.ops.conv_kernels import blocks
from aot.ops.register_tiles import Reduction, TileShape, register_tile


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


class TiledConv:
    """Emits one image and group of a convolution as register tiles."""

    def __init__(self, kb: KernelBuilder, ctx: LoweringContext, spec, x: View, w: Tensor, y: View,
                 bias: View | None, epilogue: Epilogue, dtype: str, tile: TileShape) -> None:
        self.kb, self.s, self.xv, self.yv, self.bv = kb, spec, x, y, bias
        self.epilogue, self.dt, self.tile = epilogue, dtype, tile
        assert w.data is not None
        packed = pack_weights(np.asarray(w.data), spec.groups, min(tile.rows, spec.per_group))
        self.wbuf: Buffer = kb.input(ctx.constant(packed, w.name)).buffer
        self.k = spec.group_in * spec.k_h * spec.k_w
        # Side inputs of a fused epilogue that are whole tensors of the output's shape (or
        # scalars) can be addressed by the flat output index; others need the full index.
        self.flat_epilogue = all(t.shape == epilogue.shape or t.size == 1 for t in epilogue.inputs)
        probe = Var("probe", dtype)
        self.has_epilogue = epilogue.apply(probe, [const(0, INDEX)] * len(epilogue.shape)) is not probe

    def out_index(self, n: Expr, oc: Expr, oh: Expr, ow: Expr) -> list[Expr]:
        return [n, oc, ow] if self.s.nd == 1 else [n, oc, oh, ow]

    def emit(self, n: Expr, g: Expr) -> list[Stmt]:
        s, rows = self.s, min(self.tile.rows, self.s.per_group)
        pointwise = s.k_h == s.k_w == 1 and s.s_h == s.s_w == 1
        return blocks(self.kb, s.per_group, rows,
                      lambda oc0, count: (self._pointwise(n, g, oc0, count) if pointwise
                                          else self._rows(n, g, oc0, count)), "o")

    def _a_at(self, g: Expr, oc0: Expr, count: int):
        s = self.s

        def a_at(i: int, k: list[Expr]) -> Expr:
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

        return register_tile(self.kb, self.dt, count, cols, reduction, self._a_at(g, oc0, count), b_base,
                             self._init(g, oc0, count), self.yv.buffer, out_at, finish)

    def _rows(self, n: Expr, g: Expr, oc0: Expr, count: int) -> list[Stmt]:
        """Tiles along each output row (any kernel size and dilation, unit column stride)."""
        s, kb = self.s, self.kb
        reduction = Reduction((s.group_in, s.k_h, s.k_w), unrolled=2)

        def row(idx: list[Expr]) -> list[Stmt]:
            oh = idx[0]

            def tile(ow0: Expr, cols: int) -> list[Stmt]:
                def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
                    c, kh, kw = k
                    return self.xv.buffer, self.xv.index([n, g * s.group_in + c, oh * s.s_h + kh * s.d_h,
                                                          ow0 + kw * s.d_w])

                return self._tile(n, g, oc0, count, cols, reduction, b_base, oh * s.out_w + ow0, oh, ow0)

            return blocks(kb, s.out_w, self.tile.cols, tile, "w")

        return kb.loops([s.out_h], row, prefix="h")

    def _pointwise(self, n: Expr, g: Expr, oc0: Expr, count: int) -> list[Stmt]:
        """A 1x1 stride-1 convolution: tiles run over the flattened image."""
        s, kb = self.s, self.kb
        reduction = Reduction((s.group_in, 1, 1), unrolled=2)
        assert s.out_h * s.out_w == s.in_h * s.in_w

        def tile(p0: Expr, cols: int) -> list[Stmt]:
            def b_base(k: list[Expr]) -> tuple[Buffer, Expr]:
                return self.xv.buffer, self.xv.index([n, g * s.group_in + k[0], 0, 0]) + p0

            return self._tile(n, g, oc0, count, cols, reduction, b_base, p0, None, None)

        return blocks(kb, s.out_h * s.out_w, self.tile.cols, tile, "p")
