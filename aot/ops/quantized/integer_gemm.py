"""Register tiles for an integer matrix product with constant weights, its output columns in the
vector lanes: Y[i, j] = finish(start[j] + sum_k A[i, k] B'[j, k], j), for QGemm.

The convolution tiles (integer_tiles.py) put pixels in the lanes and broadcast a weight quad per
output channel; a fully connected layer of one row (a batch of 1) has no pixels to fill them, so
here the lanes hold output columns: B' (the weights less their zero points, N x K) is packed at
compile time as [N / lanes][K / 4][lanes][4] signed bytes, and each step is one DotAdd of a
vector of weight quads by one quad of A's row broadcast (vpdpbusd, AVX2's exact sequence, sdot).
A is copied once per run as the bytes the step multiplies (uint8 on x86, int8 on Arm: A + 128 or
A - 128 where its type differs, the difference folded into the start). NEON without the dot
product (rpi4, rpi3) takes PairDotAdd (smull, smlal2, sadalp: 16 multiply-adds in 3), where no
weight is -128. Each output as its own dot product (two or three vector steps, then a horizontal
sum and a scalar requantisation) would run slower than the float build (`python -m benchmarks.int8`
on MLPerf Tiny's autoencoder).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node
from aot.kernel.intrinsics import (
    DotAdd,
    PairDotAdd,
    PairLoad,
    PairSplat,
    QuadLoad,
    QuadSplat,
)
from aot.kernel.ir import (
    INDEX,
    Assign,
    Buffer,
    Declare,
    Expr,
    Stmt,
    Store,
    Var,
    VecLoad,
    VecStore,
    const,
)
from aot.kernel.vectorize import index_step, lanewise, narrowed_store
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext
from aot.ops.quantized.integer_terms import ACCUMULATOR, UNSIGNED_SHIFT, signed_byte, unsigned_byte, wrap_int32
from aot.ops.scratch import scratch_tensor

QUAD = 4
MAX_ROWS = 4  # rows of A per tile: each row's broadcast quad serves all of the tile's vectors
MAX_VECTORS = 8  # vectors of output columns per tile (8 dependent dot chains hide its latency)

Finish = Callable[[Expr, Expr], Expr]  # (the accumulator with its start, column j) -> the output value
StoreAt = Callable[[Expr, Expr, Expr], Stmt]  # (row i, column j, value) -> the store


@dataclass(frozen=True)
class GemmOperands:
    """A [rows x depth] (read by `a_load(i, k)`, int8 or uint8) times B'^T, B' = `weights` [N x
    depth] (int64, each within int8), each column's sum starting from `start` [N] (int64: bias
    and zero-point terms, wrapping to int32 as the sums do)."""

    rows: int
    depth: int
    a_dtype: str
    a_load: Callable[[Expr, Expr], Expr]
    weights: np.ndarray
    start: np.ndarray


def gemm_tiles(node: Node, ctx: LoweringContext, kb: KernelBuilder, op: GemmOperands, finish: Finish,
               store: StoreAt) -> list[Stmt] | None:
    """The product as tiles of up to MAX_ROWS rows by MAX_VECTORS vectors of columns, each output
    requantised in registers (`finish`) and stored by `store`; None where the preset has no dot
    step (the portable presets), the columns do not fill whole vectors, a weight is outside
    int8 (or -128, on NEON without the dot product), or the output has no vector store."""
    dot = ctx.tiles.int8_dot
    columns = op.weights.shape[0]
    lanes = column_lanes(ctx)
    if not weights_fit(ctx, op.weights) or not _stores_in_vectors(finish, store, lanes):
        return None
    signed = dot.signed_bytes
    quads = -(-op.depth // QUAD)
    start = op.start + _shift_correction(op, signed)
    packed = np.zeros((columns // lanes, quads * QUAD, lanes), np.int64)
    packed[:, :op.depth, :] = op.weights.reshape(columns // lanes, lanes, op.depth).transpose(0, 2, 1)
    tiles = packed.reshape(columns // lanes, quads, QUAD, lanes).transpose(0, 1, 3, 2).astype(np.int8)
    weights = kb.input(ctx.constant(np.ascontiguousarray(tiles), f"{node.name}_tiles")).buffer
    starts = kb.input(ctx.constant(wrap_int32(start), f"{node.name}_start")).buffer
    act_type = "int8" if signed else "uint8"
    acts = kb.output(scratch_tensor(ctx, node, (op.rows * quads * QUAD,), np.dtype(act_type), "row_quads")).buffer
    shape = _Shape(lanes, quads, signed, dot.pairwise, weights, starts, acts)
    vectors = columns // lanes
    per_tile = min(vectors, MAX_VECTORS)
    rows = max(1, min(op.rows, MAX_ROWS, ctx.tiles.accumulators // per_tile))

    def over_columns(first_row: Expr, row_count: int) -> list[Stmt]:
        return _blocks(kb, vectors, per_tile, "c", lambda first, count: _tile(
            kb, shape, first_row, row_count, first, count, finish, store))

    return _copy_rows(kb, op, acts, quads, act_type) + _blocks(kb, op.rows, rows, "r", over_columns)


def column_lanes(ctx: LoweringContext) -> int:
    """Output columns per vector: the int8 step's int32 lanes."""
    return ctx.tiles.int8_dot.int32_lanes(ctx.tiles.lanes)


def weights_fit(ctx: LoweringContext, weights: np.ndarray) -> bool:
    """Whether the preset has a dot step and the weights B' [N x K] its tiles: whole vectors of
    columns, each weight within int8 (and not -128 on NEON without the dot product, whose
    PairDotAdd sums two products in 16 bits)."""
    dot = ctx.tiles.int8_dot
    if not dot.chosen or weights.size == 0:
        return False
    if weights.min() < (-127 if dot.pairwise else -128) or weights.max() > 127:
        return False
    return weights.shape[0] % column_lanes(ctx) == 0


@dataclass(frozen=True)
class _Shape:
    lanes: int
    quads: int
    signed: bool
    pairs: bool  # NEON without the dot product: PairDotAdd of operands in pair order
    weights: Buffer
    starts: Buffer
    acts: Buffer


def _shift_correction(op: GemmOperands, signed: bool) -> np.ndarray:
    """What the start gains when A is read shifted: sum_k (A +- 128) B' = sum_k A B' +- 128 colsum."""
    sums = op.weights.sum(axis=1)
    if signed and op.a_dtype == "uint8":  # read as A - 128
        return UNSIGNED_SHIFT * sums
    if not signed and op.a_dtype == "int8":  # read as A + 128
        return -UNSIGNED_SHIFT * sums
    return np.zeros_like(sums)


def _copy_rows(kb: KernelBuilder, op: GemmOperands, acts: Buffer, quads: int, act_type: str) -> list[Stmt]:
    """A's rows as the bytes the steps multiply, each padded with zeros to whole quads (whose
    weights are zero)."""
    width = quads * QUAD

    def value(i: Expr, k: Expr) -> Expr:
        a = op.a_load(i, k)
        if a.dtype == act_type:
            return a
        return signed_byte(a) if act_type == "int8" else unsigned_byte(a)

    body = kb.loops([op.rows, op.depth], lambda i: [Store(acts, i[0] * width + i[1], value(i[0], i[1]))],
                    prefix="a")
    if width > op.depth:
        body += kb.loops([op.rows, width - op.depth], lambda i: [
            Store(acts, i[0] * width + op.depth + i[1], const(0, act_type))], prefix="a")
    return body


def _blocks(kb: KernelBuilder, count: int, size: int, prefix: str,
            block: Callable[[Expr, int], list[Stmt]]) -> list[Stmt]:
    """`block(first, size)` over [0, count) in blocks of `size`: a loop over the whole ones, then
    the rest as one block of fewer."""
    whole, rest = divmod(count, size)
    out = kb.loops([whole], lambda b: block(b[0] * size, size), prefix=prefix) if whole else []
    return out + (block(const(whole * size, INDEX), rest) if rest else [])


def _tile(kb: KernelBuilder, shape: _Shape, first_row: Expr, rows: int, first_vector: Expr, vectors: int,
          finish: Finish, store: StoreAt) -> list[Stmt]:
    """Rows [first_row, + rows) by column vectors [first_vector, + vectors): the accumulators
    start from their columns' starts, each step multiplies every row's broadcast quad by every
    vector of weight quads, and each accumulator is finished and stored as one vector."""
    lanes = shape.lanes
    accs = [[kb.var("acc", f"int32x{lanes}") for _ in range(vectors)] for _ in range(rows)]
    body: list[Stmt] = [Declare(acc, VecLoad(shape.starts, (first_vector + v) * lanes, lanes))
                        for row in accs for v, acc in enumerate(row)]

    def step(q: list[Expr]) -> list[Stmt]:
        load = PairLoad if shape.pairs else QuadLoad
        operands = [load(shape.weights, ((first_vector + v) * shape.quads + q[0]) * (lanes * QUAD), lanes * QUAD)
                    for v in range(vectors)]
        out: list[Stmt] = []
        for r, row in enumerate(accs):
            at = ((first_row + r) * shape.quads + q[0]) * QUAD
            if shape.pairs:
                pair = PairSplat(shape.acts, at, QUAD)
                out += [Assign(acc, PairDotAdd(acc, pair, w)) for acc, w in zip(row, operands)]
            else:
                quad = QuadSplat(shape.acts, at, QUAD, lanes)
                out += [Assign(acc, DotAdd(acc, quad, w, shape.signed)) for acc, w in zip(row, operands)]
        return out

    body += kb.loops([shape.quads], step, prefix="k")
    probe = Var("probe", ACCUMULATOR)
    for r, row in enumerate(accs):
        i = first_row + r
        for v, acc in enumerate(row):
            j = (first_vector + v) * lanes
            stored = _vector_store(store(i, j, finish(probe, j)), store(i, j + 1, finish(probe, j + 1)),
                                   lanes, probe, acc)
            assert stored is not None  # (gemm_tiles checked that the store has a vector form)
            body.append(stored)
    return body


def _stores_in_vectors(finish: Finish, store: StoreAt, lanes: int) -> bool:
    """Whether an output's store has a vector form (checked on a probe accumulator)."""
    probe = Var("probe", ACCUMULATOR)
    vector = Var("vector", f"int32x{lanes}")
    i = Var("row", INDEX)
    return _vector_store(store(i, const(0, INDEX), finish(probe, const(0, INDEX))),
                         store(i, const(1, INDEX), finish(probe, const(1, INDEX))), lanes, probe, vector) is not None


def _vector_store(first: Stmt, second: Stmt, lanes: int, probe: Var, vector: Expr) -> Stmt | None:
    """The vector form of two neighbouring outputs' stores: a NarrowStore of requantised bytes,
    or a VecStore of float32 values (QGemm without y_zero_point) or int32 sums (MatMulInteger)."""
    narrowed = narrowed_store(first, second, lanes, probe, vector)
    if narrowed is not None:
        return narrowed
    if not (isinstance(first, Store) and isinstance(second, Store) and first.buffer == second.buffer
            and first.buffer.dtype in ("float32", "int32") and index_step(first.index, second.index) == 1):
        return None
    value = lanewise(first.value, second.value, probe, vector, lanes, integers=True)
    return None if value is None else VecStore(first.buffer, first.index, value)

