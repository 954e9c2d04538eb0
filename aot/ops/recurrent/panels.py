"""The weights of a recurrent node in the layout a register tile reads, and the tiled products.

Both products of a recurrent node, X W^T (all steps at once) and H_{t-1} R^T (once per step),
are C = A B with B = W[d, rows]^T: the rows of W (or R) for a range of gates become columns of
B. B is stored as column panels (aot/ops/gemm.py, pack_column_panels): for each block of
`cols` gate rows, [k][cols] contiguous, so a tile streams its operands with vector loads. A
constant weight is packed at compile time; a weight computed at run time (a graph input) is
packed by a loop at the start of the kernel into a scratch tensor, so both take the same tiles.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Buffer, Expr, Stmt, const
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext
from aot.lowering.tiles import TileConfig
from aot.ops.contraction.register_tiles import Reduction, TileOperands, TileOutput, register_tile
from aot.ops.contraction.row_updates import blocks
from aot.ops.gemm import matmul_tile_shape, pack_column_panels
from aot.ops.scratch import scratch_tensor


def tile_shape(tiles: TileConfig, dtype: str, m: int, n: int) -> tuple[int, int]:
    """(rows, cols) of the tiles of an m x n product: the Gemm tiles for float32 (with one row,
    a batch-1 step, they widen along the gate rows to keep enough accumulators in flight);
    other float types have no vector tiles, so a few scalar accumulators."""
    if dtype == "float32":
        return matmul_tile_shape(tiles, m, n)
    return min(m, 4), min(n, 4)


def transposed_panels(ctx: LoweringContext, kb: KernelBuilder, node: Node, weight: Tensor, direction: int,
                      lo: int, hi: int, cols: int, *, role: str) -> tuple[Buffer, list[Stmt]]:
    """B = weight[direction, lo:hi, :]^T ([k, hi - lo]) as column panels `cols` wide: the buffer
    (a kernel parameter named `role`), and the statements that fill it at run time (none for a
    constant weight)."""
    k = weight.shape[2]
    if weight.is_constant:
        assert weight.data is not None
        b = np.ascontiguousarray(weight.data[direction, lo:hi, :].T)
        return kb.input(ctx.constant(pack_column_panels(b, cols), f"{weight.name}_panels"), role).buffer, []
    n = hi - lo
    out = kb.output(scratch_tensor(ctx, node, (k * n,), weight.dtype, f"{role}{direction}_{lo}"), role)
    wv = kb.input(weight)
    stmts: list[Stmt] = []
    for j0 in range(0, n, cols):
        width = min(cols, n - j0)

        def pack(idx: list[Expr], j0: int = j0, width: int = width) -> list[Stmt]:
            c, r = idx
            return [out.store_flat(const(j0 * k, INDEX) + r * width + c, wv.load([direction, lo + j0 + c, r]))]
        stmts += kb.loops([width, k], pack, prefix="p")
    return out.buffer, stmts


def panel_product(kb: KernelBuilder, lanes: int, dtype: str, rows: int, n: int, k: int, shape: tuple[int, int],
                  panels: Buffer, *, a_at: Callable[[int, Expr], Expr], out: Buffer,
                  out_at: Callable[[int, Expr], Expr], finish: Callable[[int, Expr, Expr], Expr] | None) -> list[Stmt]:
    """out[out_at(i, j)] = finish(i, j, sum_r a_at(i, r) * B[r, j]) for i < rows, j < n, B in
    `panels` (column panels shape[1] wide), as register tiles of `shape`: a loop over the full
    panels, then the narrower last one. The row blocks are written out (rows are few: the
    batch), so `i` is always a Python int: a_at and finish may use per-row locals (a row's time
    step)."""
    tile_rows, cols = shape

    def column_block(j0: Expr, width: int) -> list[Stmt]:
        stmts: list[Stmt] = []
        for i0 in range(0, rows, tile_rows):
            count = min(tile_rows, rows - i0)
            tail = None
            if finish is not None:
                def tail(i: int, j: Expr, value: Expr, i0: int = i0) -> Expr:
                    return finish(i0 + i, j0 + j, value)
            stmts += register_tile(
                kb, dtype, lanes, count, width, Reduction((k,)),
                TileOperands(a_at=lambda i, r, i0=i0: a_at(i0 + i, r[0]),
                             b_base=lambda r: (panels, j0 * k + r[0] * width)),
                TileOutput(init=[const(0.0, dtype)] * count, out=out,
                           out_at=lambda i, j, i0=i0: out_at(i0 + i, j0 + j), finish=tail))
        return stmts

    return blocks(kb, n, cols, column_block, "j")
