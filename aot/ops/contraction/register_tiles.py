"""Register-blocked matrix-product tiles: the inner kernel of Conv, Gemm and MatMul.

A tile computes a ROWS x COLS block of outputs whose accumulators stay in registers for the whole
reduction:

    acc[i][j] = init[i];
    for every reduction step k:            # e.g. (input channel, kernel row, kernel column)
        b[j] = B(k, j)                     # COLS contiguous operands: vector loads
        a    = A(i, k)                     # one broadcast per row
        acc[i][j] = acc[i][j] + a * b[j]
    store(i, j, acc[i][j])

The accumulators are ROWS x COLS scalar locals. Because every extent is a compile-time constant,
C compilers' and LLVM's SLP vectorisers turn each row of COLS scalars into COLS / lanes vector
registers and each update into a fused multiply-add (where contraction is enabled), so the
reduction loop touches memory only for its operands, never for the outputs. The sum over k keeps
the plain sequential order, k = 0, 1, 2, ...

The tile must fit the register file: ROWS x COLS / lanes accumulators plus COLS / lanes operands
and a broadcast. 4 x 16 floats is 8 + 2 + 1 of AVX2's 16 registers and 16 + 4 + 1 of aarch64
NEON's 32 (measured at 100 GFLOP/s on one Zen core with gcc -O3 -march=x86-64-v3; 6 x 16 spills
and halves that).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aot.kernel.affine import affine
from aot.kernel.ir import (
    INDEX,
    INT_DTYPES,
    Assign,
    Buffer,
    Const,
    Declare,
    Expr,
    LaneSplat,
    Load,
    MulAdd,
    Splat,
    Stmt,
    Store,
    Var,
    VecLoad,
    VecStore,
    WidenLoad,
    cast,
    const,
    vector_of,
)
from aot.kernel.vectorize import lanewise
from aot.lowering.builder import KernelBuilder
from aot.lowering.tiles import DEFAULT_TILES, TileConfig

__all__ = ["DEFAULT_TILES", "Reduction", "TileConfig", "register_tile", "vector_starts"]


@dataclass(frozen=True)
class Reduction:
    """The reduction loop nest: `extents` outermost first; the innermost `unrolled` dimensions are
    written out step by step (e.g. the kernel window of a convolution), the others are loops.

    Only the outermost dimension should be a loop: the accumulators then live in one loop, which
    is what the SLP vectorisers handle (gcc 12 leaves accumulators that cross two nested loops in
    scalar registers and on the stack, measured 8x slower)."""

    extents: tuple[int, ...]
    unrolled: int = 0


def vector_starts(cols: int, lanes: int) -> list[int]:
    """Offsets of the vectors of `lanes` covering `cols` >= `lanes` columns: whole vectors, and for
    a ragged end one more overlapping the previous one (its shared columns are computed twice,
    but every update stays a vector operation)."""
    return [min(v * lanes, cols - lanes) for v in range(-(-cols // lanes))]


def register_tile(kb: KernelBuilder, dtype: str, lanes: int, rows: int, cols: int, reduction: Reduction,
                  a_at: Callable[[int, list[Expr]], Expr], b_base: Callable[[list[Expr]], tuple[Buffer, Expr]],
                  init: Sequence[Expr], out: Buffer, out_at: Callable[[int, Expr], Expr],
                  finish: Callable[[int, Expr, Expr], Expr] | None = None, resume: bool = False) -> list[Stmt]:
    """One tile: out[out_at(i, j)] = finish(i, j, init[i] + sum_k a_at(i, k) * B_k[j]) for i < rows,
    j < cols, where B_k[j] is element j of the row that `b_base(k)` points to (buffer, index of
    element 0) and out_at(i, j) is contiguous in j. `resume`: the accumulators start from what
    out holds (a partial sum over earlier reduction steps) instead of from `init`.

    `k` is the list of reduction indices (one per extent). Columns go in vectors of `lanes`
    (float32; a ragged end in one more, overlapping vector) or, when fewer than `lanes`, scalars.
    `finish` (the fused epilogue, alpha/beta...) runs as a second pass over the tile's outputs, still in L1.
    """
    lanes = TileConfig(lanes).width_for(cols) if dtype == "float32" else 1
    starts = vector_starts(cols, lanes) if lanes > 1 else []
    vectors = len(starts)
    scalars = [] if vectors else list(range(cols))
    vdtype = vector_of(dtype, lanes) if vectors else dtype
    acc_v = [[kb.var("vacc", vdtype) for _ in range(vectors)] for _ in range(rows)]
    acc_s = [[kb.var("acc", dtype) for _ in scalars] for _ in range(rows)]
    stmts = _accumulators(kb, dtype, lanes, starts, scalars, acc_v, acc_s, init, (out, out_at) if resume else None)

    def step(k: list[Expr]) -> list[Stmt]:
        body: list[Stmt] = []
        buf, base = b_base(k)
        b_v: list[Var] = []
        b_s: list[Var] = []
        for v in range(vectors):
            var = kb.var("vb", vdtype)
            body.append(Declare(var, _operand_row(buf, base + starts[v], lanes)))
            b_v.append(var)
        for j in scalars:
            var = kb.var("b", dtype)
            body.append(Declare(var, _operand(buf, base + j, dtype)))
            b_s.append(var)
        a_values = [a_at(i, k) for i in range(rows)]
        by_lane: list[Expr | None] = [None] * rows
        if kb.lane_broadcasts and vectors and not scalars and lanes == LANE_GROUP:
            declared, by_lane = _lane_broadcasts(kb, a_values, vdtype)
            body += declared
        for i in range(rows):
            a_value = a_values[i]
            lane_value = by_lane[i]
            if lane_value is not None:
                body += [Assign(acc, MulAdd(acc, lane_value, b)) for acc, b in zip(acc_v[i], b_v)]
                continue
            if vectors and not scalars and isinstance(a_value, Load):
                # broadcast straight from memory (armv7: one vld1 instead of a load and a copy)
                a_v = kb.var("va", vdtype)
                body.append(Declare(a_v, Splat(a_value, lanes)))
                body += [Assign(acc, MulAdd(acc, a_v, b)) for acc, b in zip(acc_v[i], b_v)]
                continue
            a = kb.var("a", dtype)
            body.append(Declare(a, a_value))
            if vectors:
                a_v = kb.var("va", vdtype)
                body.append(Declare(a_v, Splat(a, lanes)))
                body += [Assign(acc, MulAdd(acc, a_v, b)) for acc, b in zip(acc_v[i], b_v)]
            body += [Assign(acc, acc + a * b) for acc, b in zip(acc_s[i], b_s)]
        return body

    extents = list(reduction.extents)
    split = len(extents) - reduction.unrolled
    looped, inner = extents[:split], extents[split:]

    def loop_body(k: list[Expr]) -> list[Stmt]:
        return [s for u in itertools.product(*(range(e) for e in inner))
                for s in step([*k, *(const(v, INDEX) for v in u)])]

    stmts += kb.loops(looped, loop_body, prefix="k")
    return stmts + _store_tile(kb, rows, cols, lanes, vdtype, starts, scalars, acc_v, acc_s, out, out_at, finish,
                               dtype)


def _accumulators(kb: KernelBuilder, dtype: str, lanes: int, starts: list[int], scalars: list[int],
                  acc_v: list[list[Var]], acc_s: list[list[Var]], init: Sequence[Expr],
                  resumed: tuple[Buffer, Callable[[int, Expr], Expr]] | None) -> list[Stmt]:
    """The accumulators declared: from what `resumed` = (out, out_at) holds (a partial sum
    resumed), else from `init` (a bias loaded once per row, not once per column)."""
    stmts: list[Stmt] = []
    for i, (row_v, row_s) in enumerate(zip(acc_v, acc_s)):
        if resumed is not None:
            out, out_at = resumed
            stmts += [Declare(v, VecLoad(out, out_at(i, const(at, INDEX)), lanes)) for at, v in zip(starts, row_v)]
            stmts += [Declare(v, Load(out, out_at(i, const(j, INDEX)))) for j, v in zip(scalars, row_s)]
            continue
        start = init[i]
        if not isinstance(start, (Var, Const)) and (starts or len(scalars) > 1):  # more than one column
            start_var = kb.var("bias", dtype)  # one load of the bias, not one per column
            stmts.append(Declare(start_var, start))
            start = start_var
        stmts += [Declare(v, Splat(start, lanes)) for v in row_v] + [Declare(v, start) for v in row_s]
    return stmts


LANE_GROUP = 4  # broadcast operands loaded as one vector of four floats


def _lane_broadcasts(kb: KernelBuilder, a_values: list[Expr], vdtype: str) -> tuple[list[Stmt], list[Expr | None]]:
    """The rows' broadcast operands as lanes of vector loads, where all of them are consecutive
    floats of one buffer (a packed weight panel's rows, a row of pixels) and there are at least
    four: rows 4g..4g+3 from the load at row 4g, a ragged last group from the load ending at the
    last row (it overlaps the group before, and reads nothing the rows do not). (declarations,
    per-row operand), or ([], Nones) where the rows are not such a run."""
    rows = len(a_values)
    none: list[Expr | None] = [None] * rows
    loads = [a for a in a_values if isinstance(a, Load)]
    if rows < LANE_GROUP or len(loads) != rows or loads[0].buffer.dtype != "float32" \
            or any(a.buffer != loads[0].buffer for a in loads):
        return [], none
    start = affine(loads[0].index)
    if start is None or any(affine(a.index) != (start[0], start[1] + i) for i, a in enumerate(loads)):
        return [], none
    declared: list[Stmt] = []
    by_lane: list[Expr | None] = []
    for group in range(0, rows, LANE_GROUP):
        base = min(group, rows - LANE_GROUP)
        vector = kb.var("vab", vdtype)
        declared.append(Declare(vector, VecLoad(loads[base].buffer, loads[base].index, LANE_GROUP)))
        by_lane += [LaneSplat(vector, i - base) for i in range(group, min(group + LANE_GROUP, rows))]
    return declared, by_lane


def _operand_row(buf: Buffer, index: Expr, lanes: int) -> Expr:
    """`lanes` elements of B's row: loaded, or widened from int8/int16 (weights kept quantised,
    aot/ops/quantized/weights.py)."""
    return WidenLoad(buf, index, lanes) if buf.dtype in INT_DTYPES else VecLoad(buf, index, lanes)


def _operand(buf: Buffer, index: Expr, dtype: str) -> Expr:
    value = Load(buf, index)
    return cast(value, dtype) if buf.dtype != dtype else value


def _store_tile(kb: KernelBuilder, rows: int, cols: int, lanes: int, vdtype: str, starts: list[int],
                scalars: list[int], acc_v: list[list[Var]], acc_s: list[list[Var]], out: Buffer,
                out_at: Callable[[int, Expr], Expr], finish: Callable[[int, Expr, Expr], Expr] | None,
                dtype: str) -> list[Stmt]:
    """The tile's accumulators stored, through the epilogue in registers where it has a vector
    form, else stored and then finished in a second pass over the tile's outputs."""
    stmts: list[Stmt] = []
    finished = _finish_in_registers(finish, rows, starts, scalars, acc_v, acc_s, dtype, lanes)
    ragged = any(b - a < lanes for a, b in zip(starts, starts[1:]))
    for i in range(rows):
        vectors, singles = finished[i] if finished is not None else (acc_v[i], acc_s[i])
        if ragged and finished is not None:
            # The overlapping last vector re-stores columns of the one before: compute the row's
            # values (reading what the epilogue loads, a residual...) before any of its stores,
            # so the row reads its inputs first even when its output is written over one of them
            # (aot/planner/in_place.py).
            values = [kb.var("vout", vdtype) for _ in vectors]
            stmts += [Declare(var, value) for var, value in zip(values, vectors)]
            vectors = values
        stmts += [VecStore(out, out_at(i, const(starts[v], INDEX)), value) for v, value in enumerate(vectors)]
        stmts += [Store(out, out_at(i, const(j, INDEX)), value) for j, value in zip(scalars, singles)]
    if finish is not None and finished is None:
        for i in range(rows):
            stmts += kb.loops([cols], lambda j, i=i: [
                Store(out, out_at(i, j[0]), finish(i, j[0], Load(out, out_at(i, j[0]))))], prefix="e")
    return stmts


def _finish_in_registers(finish: Callable[[int, Expr, Expr], Expr] | None, rows: int, starts: list[int],
                         scalars: list[int], acc_v: list[list[Var]], acc_s: list[list[Var]], dtype: str,
                         lanes: int) -> list[tuple[list[Expr], list[Expr]]] | None:
    """What each row stores (its vectors, its scalars) with the epilogue applied lane-wise to
    the accumulators before the store (aot/kernel/vectorize.py: Relu, Clip, a residual Add ...),
    which saves the second pass that reloads, updates and stores every output again (3-6% of a
    conv); None when there is no epilogue or it has no vector form (the caller then runs that
    pass)."""
    if finish is None:
        return None
    probe = Var("__accumulator", dtype)
    finished = []
    for i in range(rows):
        vectors: list[Expr] = []
        for start, acc in zip(starts, acc_v[i]):
            here = finish(i, const(start, INDEX), probe)
            vector = lanewise(here, finish(i, const(start + 1, INDEX), probe), probe, acc, lanes)
            if vector is None:
                return None
            vectors.append(vector)
        finished.append((vectors, [finish(i, const(j, INDEX), acc) for j, acc in zip(scalars, acc_s[i])]))
    return finished
