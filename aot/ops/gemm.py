"""Gemm and MatMul: Y = alpha * op(A) op(B) + beta * C, and numpy-style batched matmul.

Both are row-blocked i-k-j products (aot/ops/contraction/row_updates.py, matmul_rows): the innermost loop
runs along a row of Y and a row of op(B), which the compiler vectorises.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.ir.sizes import element_count
from aot.kernel.ir import Buffer, Expr, Stmt, Var, cast, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import mark_outer, parallel_blocks, pays
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input
from aot.ops.contraction.register_tiles import Reduction, TileConfig, TileOperands, TileOutput, register_tile
from aot.ops.contraction.row_updates import blocks, index, matmul_rows
from aot.ops.quantized.weights import column_scales, kept_quantized, quantized_weight


@register("Gemm")
def lower_gemm(node: Node, ctx: LoweringContext) -> None:
    a = required_input(node, 0, "A")
    b = required_input(node, 1, "B")
    c = node.input(2)
    y = node.outputs[0]
    assert y is not None
    if a.rank != 2 or b.rank != 2:
        raise fail(node, f"A {list(a.shape)} and B {list(b.shape)} must be matrices")
    if a.dtype.kind != "f":
        raise fail(node, f"dtype {a.dtype}: Gemm is implemented for float types")
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    av, yv = kb.input(a), kb.output(final)
    if node.attr("transA", 0):
        av = av.permute([1, 0])
    m, k = av.shape
    b_shape = tuple(reversed(b.shape)) if node.attr("transB", 0) else b.shape
    if b_shape[0] != k or y.shape != (m, b_shape[1]):
        raise fail(node, f"op(A) {list(av.shape)} x op(B) {list(b_shape)} does not give Y {list(y.shape)}")
    n = b_shape[1]
    parallel = pays(ctx, m * n * k)
    cv = kb.input(c).broadcast_to((m, n)) if c is not None and beta != 0.0 else None
    dt = y.dtype.name
    weights, scales = constant_weights(b, kb, ctx, 0 if node.attr("transB", 0) else 1)

    def finish(value: Expr, i: Expr, j: Expr) -> Expr:
        result: Expr = value if scales is None else value * scales.load([j])
        result = result if alpha == 1.0 else result * const(alpha, dt)
        if cv is not None:
            result = result + (cv.load([i, j]) if beta == 1.0 else cv.load([i, j]) * const(beta, dt))
        return epilogue.apply(result, [i, j])

    if weights is not None:
        # A constant op(B) is stored in the layout the kernel reads (data layout only): column
        # panels, each [k][panel width], for the tiles; B^T pre-transposed for the row kernel.
        b_data = np.ascontiguousarray(weights.T if node.attr("transB", 0) else weights)
        if tileable(n, dt):
            shape = packed_tile_shape(node, ctx, m, n, b.shape)
            packed = kb.input(ctx.constant(pack_column_panels(b_data, shape[1]), b.name)).buffer
            ctx.emit(kb, tiled_matmul(kb, ctx.tiles, yv.buffer, dt, m, n, k, a_at=lambda i, r: av.load([i, r]),
                                      b_row=lambda r, j0, width: j0 * k + r * width, b_buffer=packed,
                                      y_at=lambda i, j: yv.index([i, j]), finish=finish, parallel=parallel,
                                      shape=shape))
            return
        bv = kb.input(ctx.constant(b_data, b.name)) if node.attr("transB", 0) or scales is not None else kb.input(b)
    else:
        bv = kb.input(b)
        if node.attr("transB", 0):
            bv = bv.permute([1, 0])
    if tileable(n, dt) and bv.strides[-1] == 1:
        ctx.emit(kb, tiled_matmul(kb, ctx.tiles, yv.buffer, dt, m, n, k, a_at=lambda i, r: av.load([i, r]),
                                  b_row=lambda r, j0, width: bv.index([r, j0]), b_buffer=bv.buffer,
                                  y_at=lambda i, j: yv.index([i, j]), finish=finish, parallel=parallel))
        return
    ctx.emit(kb, matmul_rows(kb, yv.buffer, dt, m, n, k, a_at=lambda i, r: av.load([i, r]),
                             b_at=lambda r, j: as_float(bv.load([r, j]), dt), y_at=lambda i, j: yv.index([i, j]),
                             finish=finish))


def constant_weights(b: Tensor, kb: KernelBuilder, ctx: LoweringContext,
                     column_axis: int) -> tuple[np.ndarray | None, View | None]:
    """B's values when known at compile time: its data, or the integers of a weight kept
    quantised (aot/ops/quantized/weights.py) with a view of its per-column scales; (None, None)
    for a B computed at run time."""
    if b.is_constant:
        return b.data, None
    weight = quantized_weight(b) if b.producer is not None and kept_quantized(b.producer) else None
    if weight is None:
        return None, None
    scales = column_scales(weight, column_axis, b.shape[column_axis])
    assert scales is not None  # kept_quantized checked it
    return weight.values, kb.input(ctx.constant(scales, f"{b.name}_scale"))


def as_float(value: Expr, dtype: str) -> Expr:
    """An operand of a float product: integers (weights kept quantised) converted."""
    return value if value.dtype == dtype else cast(value, dtype)

@register("MatMul")
def lower_matmul(node: Node, ctx: LoweringContext) -> None:
    a = required_input(node, 0, "A")
    b = required_input(node, 1, "B")
    y = node.outputs[0]
    assert y is not None
    if a.dtype.kind != "f":
        raise fail(node, f"dtype {a.dtype}: MatMul is implemented for float types")
    if a.rank == 0 or b.rank == 0:
        raise fail(node, "MatMul inputs must have rank >= 1")
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    av, yv = kb.input(a), kb.output(final)
    # numpy rules: a 1-D A is a row vector, a 1-D B a column vector; both extra dims are dropped.
    a_shape = (1, *a.shape) if a.rank == 1 else a.shape
    b_shape = (*b.shape, 1) if b.rank == 1 else b.shape
    av = View(av.buffer, a_shape)
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    dt = y.dtype.name
    packed = None
    shape = matmul_tile_shape(ctx.tiles, m, n)
    weights, scales = constant_weights(b, kb, ctx, 1) if b.rank == 2 else (None, None)
    if weights is not None and (tileable(n, dt) or scales is not None) and k == k2:
        # Weights (a constant matrix shared by every batch): column panels, as Gemm stores them.
        shape = packed_tile_shape(node, ctx, m, n, b.shape)
        packed = kb.input(ctx.constant(pack_column_panels(np.asarray(weights), shape[1]), b.name)).buffer
        bv = View(packed, b_shape)  # only for shapes and broadcasting below; indexed by b_row
    else:
        bv = View(kb.input(b).buffer, b_shape)

    def finish(value: Expr, index: list[Expr]) -> Expr:
        return epilogue.apply(value if scales is None else value * scales.load([index[-1]]), index)

    if k != k2:
        raise fail(node, f"A {list(a.shape)} and B {list(b.shape)}: inner dimensions differ")
    batch = _broadcast_batch(node, a_shape[:-2], b_shape[:-2])
    full = (*batch, m, n)
    if y.size != element_count(full):
        raise fail(node, f"output shape {list(y.shape)} does not match {list(full)}")
    a_b = av.broadcast_to((*batch, m, k)) if batch else av
    b_b = bv.broadcast_to((*batch, k, n)) if batch else bv
    y_full = View(yv.buffer, full)
    tiled = packed is not None or (tileable(n, dt) and b_b.strides[-1] == 1)
    parallel = pays(ctx, element_count(full) * k)
    # Batches of products: the outermost batch loop is the parallel one; one product: its tiles.
    split_batch = parallel and element_count(batch) > 1

    def b_row(bi: list[Expr], r: Expr, j0: Expr, width: int) -> Expr:
        return j0 * k + r * width if packed is not None else b_b.index([*bi, r, j0])

    def body(bi: list[Expr]) -> list[Stmt]:
        # The fusion plan only gives MatMuls with operands of rank >= 2 an epilogue, so the output
        # index here is the output tensor's own index.
        if tiled:
            return tiled_matmul(kb, ctx.tiles, yv.buffer, dt, m, n, k, a_at=lambda i, r: a_b.load([*bi, i, r]),
                                b_row=lambda r, j0, width: b_row(bi, r, j0, width), b_buffer=b_b.buffer,
                                y_at=lambda i, j: y_full.index([*bi, i, j]),
                                finish=lambda value, i, j: finish(value, [*bi, i, j]),
                                parallel=parallel and not split_batch, shape=shape)
        # (The untiled product stays serial within one batch: its top level mixes loops and tails.)
        return matmul_rows(kb, yv.buffer, dt, m, n, k, a_at=lambda i, r: a_b.load([*bi, i, r]),
                           b_at=lambda r, j: b_b.load([*bi, r, j]), y_at=lambda i, j: y_full.index([*bi, i, j]),
                           finish=lambda value, i, j: finish(value, [*bi, i, j]))

    stmts = kb.loops(batch, body, prefix="b")
    ctx.emit(kb, mark_outer(stmts) if split_batch else stmts)


def tileable(n: int, dtype: str) -> bool:
    """Register tiles (which also need B's rows contiguous) for float32 products of 4+ columns."""
    return dtype == "float32" and n >= 4


def matmul_tile_shape(tiles: TileConfig, m: int, n: int) -> tuple[int, int]:
    """(rows, cols) of the tiles of an m x n product. With few rows (a batch-1 fully connected
    layer) the tiles widen along the columns so that enough accumulators are in flight. A's
    rows are K apart: broadcast one by one."""
    tiles = tiles.one_by_one()
    rows = min(m, tiles.rows_for(tiles.cols, m))
    if tiles.lane_broadcasts and not tiles.by_scalar and tiles.vectorises_loops:
        # A multiply by lane reads each row's A value from a vector register, and gcc loads the
        # tile's A values together: rows x vectors accumulators, the B vectors and one register
        # per row must fit, or two accumulators spill in the inner loop (6 x 16 on aarch64;
        # `python -m benchmarks.arm_profile --hot-blocks` on a ViT block shows the str/ldr).
        # LLVM's schedule keeps its 6 rows without spilling, and runs fewer instructions with them.
        vectors = -(-tiles.cols // tiles.lanes)
        rows = max(1, min(rows, (tiles.registers - vectors) // (vectors + 1)))
    vectors = tiles.accumulators // rows
    if tiles.lanes <= 4:
        # Arm's multiply-adds read registers only (x86's read B from memory): each B vector needs
        # a register beside its accumulators. armv7's 12 accumulators of a batch-1 layer with their
        # 12 B vectors spill (`python -m benchmarks.arm_profile` on the autoencoder shows the vldr/vstr).
        vectors = min(vectors, (tiles.registers - 1) // (rows + 1))
    cols = tiles.cols if rows >= 4 else max(tiles.cols, tiles.lanes * vectors)
    return rows, min(cols, n)


def packed_tile_shape(node: Node, ctx: LoweringContext, m: int, n: int,
                      weight_shape: tuple[int, ...]) -> tuple[int, int]:
    """The tiles of a product with constant weights, which decide how the weights are packed:
    another shape's column width where one was chosen (LoweringContext.preferred: a shape variant
    of the model), so that both read one copy of the weights; the rows then fit the accumulators."""
    own = matmul_tile_shape(ctx.tiles, m, n)
    key = ctx.choice_key(node, tuple(weight_shape))
    preferred = ctx.preferred.get(key)
    shape = own
    if isinstance(preferred, tuple) and len(preferred) == 2 and preferred[1] != own[1]:
        cols = min(int(preferred[1]), n)
        shape = (min(m, ctx.tiles.one_by_one().rows_for(cols, m)), cols)
    ctx.choices.append((key, shape))
    return shape


def pack_column_panels(b: np.ndarray, cols: int) -> np.ndarray:
    """B [k, n] as consecutive column panels of `cols` (the last one narrower), each [k][width]:
    a tile then reads its operand rows from one contiguous stream."""
    return np.concatenate([np.ascontiguousarray(b[:, j0:j0 + cols]).reshape(-1)
                           for j0 in range(0, b.shape[1], cols)]).astype(b.dtype, copy=False)


def tiled_matmul(kb: KernelBuilder, tiles: TileConfig, out: Buffer, dtype: str, m: int, n: int, k: int,
                 a_at: Callable[[Expr, Expr], Expr], *, b_row: Callable[[Expr, Expr, int], Expr], b_buffer: Buffer,
                 y_at: Callable[[Expr, Expr], Expr],
                 finish: Callable[[Expr, Expr, Expr], Expr], parallel: bool = False,
                 shape: tuple[int, int] | None = None) -> list[Stmt]:
    """Y[i, j] = finish(sum_k A[i, k] * B[k, j], i, j) as register tiles: blocks of rows of A
    (broadcasts) by runs of columns of B and Y (vectors); `b_row(r, j0, width)` is the index of
    B[r, j0] in `b_buffer` for the column block [j0, j0 + width), whose row is contiguous.
    `parallel`: the column panels (or, with one panel, the row blocks) are a parallel loop; each
    tile writes its own outputs only. `shape`: (rows, cols) of the tiles, by default
    matmul_tile_shape's; packed weights must have been packed in panels of those cols."""
    rows, cols = shape or matmul_tile_shape(tiles, m, n)
    split_cols = parallel and n > cols
    split_rows = parallel and not split_cols and m > rows
    probe = Var("probe", dtype)
    needs_finish = finish(probe, index(0), index(0)) is not probe

    def column_block(j0: Expr, width: int) -> list[Stmt]:
        def row_block(i0: Expr, count: int) -> list[Stmt]:
            tail = None
            if needs_finish:
                def tail(i: int, j: Expr, value: Expr) -> Expr:
                    return finish(value, i0 + i, j0 + j)
            return register_tile(kb, dtype, tiles.lanes, count, width, Reduction((k,)),
                                 TileOperands(a_at=lambda i, kk: a_at(i0 + i, kk[0]),
                                              b_base=lambda kk: (b_buffer, b_row(kk[0], j0, width))),
                                 TileOutput(init=[const(0.0, dtype)] * count, out=out,
                                            out_at=lambda i, j: y_at(i0 + i, j0) + j, finish=tail))
        return (parallel_blocks if split_rows else blocks)(kb, m, rows, row_block, "i")

    return (parallel_blocks if split_cols else blocks)(kb, n, cols, column_block, "j")


def _broadcast_batch(node: Node, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    rank = max(len(a), len(b))
    a = (1,) * (rank - len(a)) + a
    b = (1,) * (rank - len(b)) + b
    out = []
    for da, db in zip(a, b):
        if da != db and 1 not in (da, db):
            raise fail(node, f"batch dimensions {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db))
    return tuple(out)
