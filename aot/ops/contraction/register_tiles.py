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

from aot.kernel.affine import offset_form
from aot.kernel.intrinsics import LaneSplat, WidenLoad
from aot.kernel.ir import (
    INDEX,
    INT_DTYPES,
    Assign,
    Buffer,
    Const,
    Declare,
    Expr,
    Load,
    MulAdd,
    Splat,
    Stmt,
    Store,
    Var,
    VecLoad,
    VecStore,
    cast,
    const,
    vector_of,
)
from aot.kernel.vectorize import lanewise
from aot.lowering.builder import KernelBuilder
from aot.lowering.tiles import DEFAULT_TILES, TileConfig

__all__ = ["DEFAULT_TILES", "Reduction", "TileConfig", "TileOperands", "TileOutput", "register_tile", "vector_starts"]


@dataclass(frozen=True)
class Reduction:
    """The reduction loop nest: `extents` outermost first; the innermost `unrolled` dimensions are
    written out step by step (e.g. the kernel window of a convolution), the others are loops.

    Only the outermost dimension should be a loop: the accumulators then live in one loop, which
    is what the SLP vectorisers handle (gcc 12 leaves accumulators that cross two nested loops in
    scalar registers and on the stack, measured 8x slower)."""

    extents: tuple[int, ...]
    unrolled: int = 0


@dataclass(frozen=True)
class TileOperands:
    """What a tile multiplies at reduction step `k` (one index per extent): a_at(i, k), row i's
    operand, broadcast over the columns; and the row of B that `b_base(k)` points to (buffer,
    index of element 0), whose element j column j reads."""

    a_at: Callable[[int, list[Expr]], Expr]
    b_base: Callable[[list[Expr]], tuple[Buffer, Expr]]


@dataclass(frozen=True)
class TileOutput:
    """Where a tile's sums go: out[out_at(i, j)], contiguous in j, each starting from init[i]
    (or, `resume`, from what out holds: a partial sum over earlier reduction steps) and passed
    through `finish`(i, j, sum) (the fused epilogue, alpha/beta...) when there is one."""

    init: Sequence[Expr]
    out: Buffer
    out_at: Callable[[int, Expr], Expr]
    finish: Callable[[int, Expr, Expr], Expr] | None = None
    resume: bool = False


@dataclass(frozen=True)
class _Accumulators:
    """A tile's accumulators: per row, a vector of `lanes` at each of `starts` (`vectors`) or,
    when the columns are fewer than the lanes, a scalar per column of `scalars` (`singles`)."""

    dtype: str
    lanes: int
    vdtype: str
    starts: list[int]
    scalars: list[int]
    vectors: list[list[Var]]
    singles: list[list[Var]]


def vector_starts(cols: int, lanes: int) -> list[int]:
    """Offsets of the vectors of `lanes` covering `cols` >= `lanes` columns: whole vectors, and for
    a ragged end one more overlapping the previous one (its shared columns are computed twice,
    but every update stays a vector operation)."""
    return [min(v * lanes, cols - lanes) for v in range(-(-cols // lanes))]


def register_tile(kb: KernelBuilder, dtype: str, lanes: int, rows: int, cols: int, reduction: Reduction,
                  operands: TileOperands, output: TileOutput) -> list[Stmt]:
    """One tile: out[out_at(i, j)] = finish(i, j, init[i] + sum_k a_at(i, k) * B_k[j]) for i < rows,
    j < cols, with `operands` a_at and B_k (TileOperands) and `output` the rest (TileOutput).

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
    accumulators = _Accumulators(dtype, lanes, vdtype, starts, scalars, acc_v, acc_s)
    stmts = _accumulators(kb, accumulators, output)
    a_at, b_base = operands.a_at, operands.b_base

    def step(k: list[Expr], a_values: list[Expr], lanes_of: _StepLanes | None) -> list[Stmt]:
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
        by_lane: list[Expr | None] = [None] * rows
        if lanes_of is not None:
            declared, by_lane = lanes_of
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
        steps = [[*k, *(const(v, INDEX) for v in u)] for u in itertools.product(*(range(e) for e in inner))]
        a_values = [[a_at(i, ks) for i in range(rows)] for ks in steps]
        plans: list[_StepLanes | None] = [None] * len(steps)
        if kb.lane_broadcasts and vectors and not scalars and lanes == LANE_GROUP:
            plans = (_lane_broadcasts(kb, a_values, vdtype) if kb.lanes_across_steps
                     else [_lane_broadcasts(kb, [values], vdtype)[0] for values in a_values])
        return [s for ks, values, plan in zip(steps, a_values, plans) for s in step(ks, values, plan)]

    stmts += kb.loops(looped, loop_body, prefix="k")
    return stmts + _store_tile(kb, accumulators, cols, output)


def _accumulators(kb: KernelBuilder, acc: _Accumulators, output: TileOutput) -> list[Stmt]:
    """The accumulators declared: from what `output` holds when it resumes a partial sum, else
    from its `init` (a bias loaded once per row, not once per column)."""
    stmts: list[Stmt] = []
    out, out_at = output.out, output.out_at
    for i, (row_v, row_s) in enumerate(zip(acc.vectors, acc.singles)):
        if output.resume:
            stmts += [Declare(v, VecLoad(out, out_at(i, const(at, INDEX)), acc.lanes))
                      for at, v in zip(acc.starts, row_v)]
            stmts += [Declare(v, Load(out, out_at(i, const(j, INDEX)))) for j, v in zip(acc.scalars, row_s)]
            continue
        start = output.init[i]
        if not isinstance(start, (Var, Const)) and (acc.starts or len(acc.scalars) > 1):  # more than one column
            start_var = kb.var("bias", acc.dtype)  # one load of the bias, not one per column
            stmts.append(Declare(start_var, start))
            start = start_var
        stmts += [Declare(v, Splat(start, acc.lanes)) for v in row_v] + [Declare(v, start) for v in row_s]
    return stmts


LANE_GROUP = 4  # broadcast operands loaded as one vector of four floats


_StepLanes = tuple[list[Stmt], list[Expr | None]]  # a step's vector loads, then each row's lane


def _lane_broadcasts(kb: KernelBuilder, a_values: list[list[Expr]], vdtype: str) -> list[_StepLanes | None]:
    """Per written-out reduction step (a_values[step][row]), its rows' broadcast operands as lanes
    of vector loads where at least four of the operands of the steps are consecutive floats of
    one buffer: a packed weight panel's rows, a row of pixels, or the pixels of a convolution's
    kernel row, shared by its taps (a 5x5 conv's 2 pixels x 5 taps are 6 consecutive floats: 2
    loads, not 10; TileConfig.lanes_across_steps, else one step at a time). A run of consecutive
    operands goes in vectors of four from its start, the last one ending at the run's end (it
    overlaps the one before and reads nothing the rows do not); each vector is loaded by the
    first step that uses it. Operands in shorter runs stay broadcasts (None)."""
    loads = [a for values in a_values for a in values]
    if not loads or any(not isinstance(a, Load) or a.buffer.dtype != "float32" for a in loads):
        return [None] * len(a_values)
    lane_at = _runs_in_vectors(loads)  # offset key -> (the load that starts its vector, lane)
    declared: dict[int, Var] = {}
    plans: list[_StepLanes | None] = []
    for values in a_values:
        loaded: list[Stmt] = []
        by_lane: list[Expr | None] = []
        for a in values:
            assert isinstance(a, Load)
            place = lane_at.get(_offset_key(a))
            if place is None:
                by_lane.append(None)
                continue
            first, lane = place
            vector = declared.get(id(first))
            if vector is None:
                vector = declared[id(first)] = kb.var("vab", vdtype)
                loaded.append(Declare(vector, VecLoad(first.buffer, first.index, LANE_GROUP)))
            by_lane.append(LaneSplat(vector, lane))
        plans.append((loaded, by_lane))
    return plans


def _offset_key(load: Load) -> tuple[str, tuple[tuple[int, str], ...], int]:
    terms, constant = offset_form(load.index)
    return load.buffer.name, terms, constant


def _runs_in_vectors(loads: list[Load]) -> dict[tuple[str, tuple[tuple[int, str], ...], int], tuple[Load, int]]:
    """For each operand in a run of at least four consecutive floats: the load starting the
    vector of four that holds it, and its lane."""
    by_address = {_offset_key(a): a for a in reversed(loads)}  # the first load of each address
    groups: dict[tuple[str, tuple[tuple[int, str], ...]], list[int]] = {}
    for name, terms, constant in by_address:
        groups.setdefault((name, terms), []).append(constant)
    placed: dict[tuple[str, tuple[tuple[int, str], ...], int], tuple[Load, int]] = {}
    for (name, terms), offsets in groups.items():
        for run in _consecutive_runs(sorted(offsets)):
            if len(run) < LANE_GROUP:
                continue
            for start in vector_starts(len(run), LANE_GROUP):
                first = by_address[(name, terms, run[start])]
                for lane in range(LANE_GROUP):
                    placed.setdefault((name, terms, run[start + lane]), (first, lane))
    return placed


def _consecutive_runs(offsets: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for offset in offsets:
        if runs and runs[-1][-1] + 1 == offset:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    return runs


def _operand_row(buf: Buffer, index: Expr, lanes: int) -> Expr:
    """`lanes` elements of B's row: loaded, or widened from int8/int16 (weights kept quantised,
    aot/ops/quantized/weights.py)."""
    return WidenLoad(buf, index, lanes) if buf.dtype in INT_DTYPES else VecLoad(buf, index, lanes)


def _operand(buf: Buffer, index: Expr, dtype: str) -> Expr:
    value = Load(buf, index)
    return cast(value, dtype) if buf.dtype != dtype else value


def _store_tile(kb: KernelBuilder, acc: _Accumulators, cols: int, output: TileOutput) -> list[Stmt]:
    """The tile's accumulators stored, through the epilogue in registers where it has a vector
    form, else stored and then finished in a second pass over the tile's outputs."""
    stmts: list[Stmt] = []
    out, out_at, finish, starts, rows = output.out, output.out_at, output.finish, acc.starts, len(acc.vectors)
    finished = _finish_in_registers(finish, acc)
    ragged = any(b - a < acc.lanes for a, b in zip(starts, starts[1:]))
    for i in range(rows):
        vectors, singles = finished[i] if finished is not None else (acc.vectors[i], acc.singles[i])
        if ragged and finished is not None:
            # The overlapping last vector re-stores columns of the one before: compute the row's
            # values (reading what the epilogue loads, a residual...) before any of its stores,
            # so the row reads its inputs first even when its output is written over one of them
            # (aot/planner/in_place.py).
            values = [kb.var("vout", acc.vdtype) for _ in vectors]
            stmts += [Declare(var, value) for var, value in zip(values, vectors)]
            vectors = values
        stmts += [VecStore(out, out_at(i, const(starts[v], INDEX)), value) for v, value in enumerate(vectors)]
        stmts += [Store(out, out_at(i, const(j, INDEX)), value) for j, value in zip(acc.scalars, singles)]
    if finish is not None and finished is None:
        for i in range(rows):
            stmts += kb.loops([cols], lambda j, i=i: [
                Store(out, out_at(i, j[0]), finish(i, j[0], Load(out, out_at(i, j[0]))))], prefix="e")
    return stmts


def _finish_in_registers(finish: Callable[[int, Expr, Expr], Expr] | None,
                         acc: _Accumulators) -> list[tuple[list[Expr], list[Expr]]] | None:
    """What each row stores (its vectors, its scalars) with the epilogue applied lane-wise to
    the accumulators before the store (aot/kernel/vectorize.py: Relu, Clip, a residual Add ...),
    which saves the second pass that reloads, updates and stores every output again (3-6% of a
    conv); None when there is no epilogue or it has no vector form (the caller then runs that
    pass)."""
    if finish is None:
        return None
    probe = Var("__accumulator", acc.dtype)
    finished = []
    for i, (row_v, row_s) in enumerate(zip(acc.vectors, acc.singles)):
        vectors: list[Expr] = []
        for start, value in zip(acc.starts, row_v):
            here = finish(i, const(start, INDEX), probe)
            vector = lanewise(here, finish(i, const(start + 1, INDEX), probe), probe, value, acc.lanes)
            if vector is None:
                return None
            vectors.append(vector)
        finished.append((vectors, [finish(i, const(j, INDEX), value) for j, value in zip(acc.scalars, row_s)]))
    return finished
