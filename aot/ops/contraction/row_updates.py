"""Loop-nest building blocks for Conv, Gemm and MatMul that C compilers and LLVM vectorise.

The naive lowering of a contraction puts the reduction innermost (`acc += x * w` per output
element, with a bounds check per convolution tap); no compiler vectorises that without
reassociating floats. Here the innermost loop instead runs over a contiguous run of *outputs*
(a convolution output row, a matrix row) and updates them in place:

    y[j][p] = ((y[j][p] + w[j][0] * x[0][p]) + w[j][1] * x[1][p]) + ...      for p in [lo, hi)

* Several output rows `j` share each `x` load (register blocking over output channels / rows).
* Several reduction steps `t` (taps, input channels, k) are chained in one expression, so each
  output element is loaded and stored once per group of steps rather than once per step. The
  chain keeps the sequential summation order, so nothing is reassociated: NaN/Inf and rounding
  follow IEEE 754 exactly as written, and the C and LLVM backends, printing the same IR, agree
  bit for bit.
* The weights of a group are scalar locals declared before the loop (one broadcast register
  each), and every loop bound is a compile-time constant: padding is handled by computing in
  Python, per tap, the range of outputs whose input lies inside the image, so the vector loop
  has no per-element condition.

The rows are accumulated in the output buffer itself, initialised with the bias, and the fused
epilogue (`ctx.epilogue`) is applied by a final pass over each block while it is still in cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aot.kernel.ir import INDEX, Buffer, Declare, Expr, Load, Loop, Stmt, Store, Var, const
from aot.lowering.builder import KernelBuilder

# Scalar weights held live across one vector loop (OB rows x T steps). AVX2 and NEON have 16 or
# 32 vector registers; about 12 broadcast weights leave room for the x loads and the row values.
WEIGHT_REGISTERS = 12


def index(value: int) -> Expr:
    return const(value, INDEX)


@dataclass(frozen=True)
class Step:
    """One reduction step of a group: its weight per output row, and its input operand at inner
    position `p` (valid for p in [lo, hi))."""

    weights: Sequence[Expr]
    operand: Callable[[Expr], Expr]
    lo: int
    hi: int


def declare_weights(kb: KernelBuilder, steps: Sequence[Step], dtype: str) -> tuple[list[Stmt], list[list[Expr]]]:
    """Scalar locals for the steps' weights (hoisted out of the vector loop by construction)."""
    decls: list[Stmt] = []
    names: list[list[Expr]] = []
    for step in steps:
        row: list[Expr] = []
        for w in step.weights:
            v = kb.var("w", dtype)
            decls.append(Declare(v, w))
            row.append(v)
        names.append(row)
    return decls, names


def update_rows(kb: KernelBuilder, out: Buffer, rows: Sequence[Callable[[Expr], Expr]], steps: Sequence[Step],
                dtype: str) -> list[Stmt]:
    """`out[rows[j](p)] += sum_t steps[t].weights[j] * steps[t].operand(p)` in step order.

    Steps may cover different ranges of p (convolution taps near the padding): the p axis is cut
    at every range boundary, and each piece gets one constant-bound loop over the steps active
    there, so no element is ever checked inside a loop.
    """
    decls, weights = declare_weights(kb, steps, dtype)
    cuts = sorted({b for s in steps for b in (s.lo, s.hi)})
    loops: list[Stmt] = []
    for lo, hi in zip(cuts, cuts[1:]):
        active = [t for t, s in enumerate(steps) if s.lo <= lo and hi <= s.hi]
        if not active or hi <= lo:
            continue
        var = kb.var("p")
        p: Expr = var + index(lo) if hi - lo > 1 else index(lo)
        body: list[Stmt] = []
        operands = {t: steps[t].operand(p) for t in active}
        for j, row in enumerate(rows):
            at = row(p)
            value: Expr = Load(out, at)
            for t in active:
                value = value + weights[t][j] * operands[t]
            body.append(Store(out, at, value))
        loops += [Loop(var, hi - lo, body)] if hi - lo > 1 else body
    return [*decls, *loops] if loops else []


def fill_rows(kb: KernelBuilder, out: Buffer, rows: Sequence[Callable[[Expr], Expr]], values: Sequence[Expr],
              length: int) -> list[Stmt]:
    """out[rows[j](p)] = values[j] for p in [0, length)."""
    if length <= 0:
        return []
    var = kb.var("p")
    p: Expr = var if length > 1 else index(0)
    body: list[Stmt] = [Store(out, row(p), v) for row, v in zip(rows, values)]
    return [Loop(var, length, body)] if length > 1 else body


def blocks(kb: KernelBuilder, total: int, size: int, emit: Callable[[Expr, int], list[Stmt]],
           prefix: str) -> list[Stmt]:
    """Cover [0, total) with blocks of `size` (a loop over the full blocks) and one shorter tail;
    `emit(start, count)` builds one block."""
    size = max(1, min(size, total))
    full, tail = divmod(total, size)
    stmts: list[Stmt] = []
    if full == 1:
        stmts += emit(index(0), size)
    elif full > 1:
        var: Var = kb.var(prefix)
        body = emit(var * size, size)
        if body:
            stmts.append(Loop(var, full, body))
    if tail:
        stmts += emit(index(full * size), tail)
    return stmts


def valid_range(out_size: int, in_size: int, stride: int, offset: int) -> tuple[int, int]:
    """The outputs o in [0, out_size) whose input position o * stride + offset is in [0, in_size)."""
    lo = (-offset + stride - 1) // stride if offset < 0 else 0  # ceil(-offset / stride)
    last = in_size - 1 - offset
    hi = min(out_size, last // stride + 1) if last >= 0 else 0
    lo = min(lo, out_size)
    return lo, max(lo, hi)


def row_block_gemm(kb: KernelBuilder, out: Buffer, dtype: str, m_rows: Sequence[Expr], n_lo: Expr, n: int, k: int,
                   row_at: Callable[[Expr, Expr], Expr], *, a_at: Callable[[Expr, Expr], Expr],
                   b_at: Callable[[Expr, Expr], Expr], init: Sequence[Expr], k_unroll: int) -> list[Stmt]:
    """out[row_at(i, j)] = init[i] + sum_k a_at(i, k) * b_at(k, j) for the rows `m_rows` and the
    columns j in [n_lo, n_lo + n), with j innermost and contiguous.

    The reduction runs in chunks of `k_unroll` steps chained into one update (sequential order
    within and across chunks, so the sum is the plain k = 0, 1, 2, ... sum).
    """
    rows = [(lambda p, i=i: row_at(i, n_lo + p)) for i in m_rows]
    stmts = fill_rows(kb, out, rows, init, n)

    def chunk(k0: Expr, count: int) -> list[Stmt]:
        steps = [Step([a_at(i, k0 + u) for i in m_rows], lambda p, u=u: b_at(k0 + u, n_lo + p), 0, n)
                 for u in range(count)]
        return update_rows(kb, out, rows, steps, dtype)

    return stmts + blocks(kb, k, k_unroll, chunk, "k")


# Rows of a matrix product updated together, and the column tile they sweep: ROW_BLOCK rows of
# COLUMN_TILE floats plus the B rows of one k chunk stay inside L1.
ROW_BLOCK = 4
COLUMN_TILE = 512


def matmul_rows(kb: KernelBuilder, out: Buffer, dtype: str, m: int, n: int, k: int,
                a_at: Callable[[Expr, Expr], Expr], b_at: Callable[[Expr, Expr], Expr],
                *, y_at: Callable[[Expr, Expr], Expr],
                finish: Callable[[Expr, Expr, Expr], Expr] | None) -> list[Stmt]:
    """Y[i, j] = finish(sum_k A[i, k] * B[k, j], i, j) for an m x n output.

    Column tiles outermost (a k x tile panel of B is reused by every row block from cache), then
    blocks of ROW_BLOCK rows, accumulated in Y and finished (alpha, beta * C, the fused epilogue)
    while the block is in cache. `finish` returning its value unchanged skips that pass.
    """
    block = min(ROW_BLOCK, m)
    k_unroll = max(1, WEIGHT_REGISTERS // block)
    probe = Var("probe", dtype)
    needs_finish = finish is not None and finish(probe, index(0), index(0)) is not probe

    def column_tile(j0: Expr, width: int) -> list[Stmt]:
        def row_block(i0: Expr, count: int) -> list[Stmt]:
            rows = [i0 + r for r in range(count)]
            stmts = row_block_gemm(kb, out, dtype, rows, j0, width, k, row_at=y_at, a_at=a_at, b_at=b_at,
                                   init=[const(0.0, dtype)] * count, k_unroll=k_unroll)
            if needs_finish:
                assert finish is not None
                var = kb.var("e")
                j: Expr = j0 + var if width > 1 else j0
                body: list[Stmt] = [Store(out, y_at(i, j), finish(Load(out, y_at(i, j)), i, j)) for i in rows]
                stmts += [Loop(var, width, body)] if width > 1 else body
            return stmts
        return blocks(kb, m, block, row_block, "i")

    return blocks(kb, n, COLUMN_TILE, column_tile, "j")
