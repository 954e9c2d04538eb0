"""The input projection of a recurrent node: X W^T + biases for every step at once.

projected[d, row, g] = sum_i X[row, i] W[d, g, i] + Wb[d, g] + Rb[d, g], where `row` runs over
X's rows in X's own order (t * batch + b in layout 0, b * seq + t in layout 1), so X is read as
the plain [rows, input] matrix it is. It is one register-tiled matrix product per direction
(aot/ops/gemm.py, tiled_matmul) over W^T packed into column panels, the biases added in the
tiles' epilogue; for a GRU with linear_before_reset the hidden gate's Rb stays out (the
recurrence adds it inside the reset product), so its columns are a product of their own.
"""

from __future__ import annotations

from dataclasses import dataclass

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import Expr
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import pays
from aot.ops.gemm import tiled_matmul
from aot.ops.recurrent.panels import tile_shape, transposed_panels


@dataclass(frozen=True)
class Segment:
    """Gate rows [lo, hi) of W/R, and whether the projection adds their recurrent bias Rb."""

    lo: int
    hi: int
    recurrent_bias: bool = True


def projection_segments(gates: int, hidden: int, linear_before_reset: bool) -> list[Segment]:
    if linear_before_reset:
        return [Segment(0, 2 * hidden), Segment(2 * hidden, 3 * hidden, recurrent_bias=False)]
    return [Segment(0, gates * hidden)]


def emit_projection(ctx: LoweringContext, node: Node, x: Tensor, w: Tensor, bias: Tensor | None,
                    projected: Tensor, directions: int, segments: list[Segment]) -> None:
    """One kernel per direction and segment (each a single tiled product, so it may be parallel)."""
    for d in range(directions):
        for seg in segments:
            _emit_segment(ctx, node, x, w, bias, projected, d, seg)


def _emit_segment(ctx: LoweringContext, node: Node, x: Tensor, w: Tensor, bias: Tensor | None,
                  projected: Tensor, d: int, seg: Segment) -> None:
    rows, gh, k = projected.shape[1], projected.shape[2], x.shape[2]
    dt = projected.dtype.name
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (rows, k))
    pv = kb.output(projected)
    bv = kb.input(bias) if bias is not None else None
    n = seg.hi - seg.lo
    shape = tile_shape(ctx.tiles, dt, rows, n)
    panels, pack = transposed_panels(ctx, kb, node, w, d, seg.lo, seg.hi, shape[1], role="w_panels")

    def finish(value: Expr, i: Expr, j: Expr) -> Expr:
        if bv is None:
            return value
        out = value + bv.load([d, j + seg.lo])
        return out + bv.load([d, j + seg.lo + gh]) if seg.recurrent_bias else out

    product = tiled_matmul(kb, ctx.tiles, pv.buffer, dt, rows, n, k, a_at=lambda i, r: xv.load([i, r]),
                           b_row=lambda r, j0, width: j0 * k + r * width, b_buffer=panels,
                           y_at=lambda i, j: pv.index([d, i, j + seg.lo]), finish=finish,
                           parallel=not pack and pays(ctx, rows * n * k), shape=shape)
    ctx.emit(kb, pack + product)
