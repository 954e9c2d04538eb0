"""Scaled dot-product attention as one kernel over blocks of query rows.

For each batch-head and each block of query rows: the block's scores over all keys,
S = scale * Q_blk K^T (then softcap, mask, causal limit), as register tiles into a scratch block;
each row's max, then e = exp(s - max) in place with its sum; Y_blk = (E V) / sum as register tiles
with the division in their finish. Only one block's scores exist at a time, so the arena grows
with block rows x keys, linearly in the sequence, never with queries x keys; the block is sized to
stay in L1 (`query_block_rows`). Batch-heads are the parallel tasks, each slot with its own scratch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from aot.kernel.ir import (
    INDEX,
    Assign,
    Buffer,
    Declare,
    Expr,
    If,
    Load,
    Stmt,
    binary,
    cast,
    const,
    eq,
    le,
    lt,
    select,
    unary,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.parallel import SCRATCH_SLOTS, pays, slot_blocks
from aot.lowering.tiles import TileConfig
from aot.ops.contraction.row_updates import blocks, matmul_rows
from aot.ops.gemm import matmul_tile_shape, tileable, tiled_matmul
from aot.ops.softmax import SoftmaxRows

# One block's scores fit an L1 data cache: the arena stays small, and blocks of 16 KiB to 256 KiB
# ran alike on ViT- and Whisper-sized attention (`aot bench` on MatMul/Softmax/MatMul graphs).
SCORE_BLOCK_BYTES = 32 * 1024


@dataclass(frozen=True)
class AttentionViews:
    """The operands of one attention, each with the batch dims (`batch`) in front."""
    batch: tuple[int, ...]
    q: View            # [*batch, queries, head]
    keys_t: View       # [*batch, head, keys]: K transposed (any strides)
    v: View            # [*batch, keys, value head]
    y: View            # [*batch, queries, value head]
    bias: View | None = None        # additive float, [*batch, queries, mask keys]
    keep: View | None = None        # bool, [*batch, queries, mask keys]: False masks a key out
    key_counts: View | None = None  # int64 per batch, [*batch]: keys from this on are padding
    scores_out: View | None = None  # [*batch, queries, keys]: the scores, as AttentionMath.scores_out says
    projection_bias: tuple[View, View, View] | None = None  # added to Q, K, V: [*batch, head] each


@dataclass(frozen=True)
class AttentionMath:
    """What the scores go through before the softmax."""
    scale: float
    softcap: float = 0.0                # > 0: softcap * tanh(s / softcap) before the mask
    fill: float = float("-inf")         # the score of a key the bool mask leaves out
    masks_add: bool = False             # the bool mask and the causal limit add `fill` instead
    mask_keys: int | None = None        # the masks cover only the first this many keys (the rest: -inf)
    causal: bool = False                # query i sees keys j <= its position
    offset: int = 0                     # query i's position among the keys: i + offset (or key count - queries)
    window: tuple[int, int] = (-1, -1)  # keys at most (left, right) from the position; -1: unbounded
    empty_rows_zero: bool = False       # a query whose keys are all masked gives zeros (ONNX Attention)
    scores_out: str = ""                # "scaled" (before the masks), "masked" or "probabilities"


def query_block_rows(tiles: TileConfig, queries: int, keys: int) -> int:
    """Query rows per block: whole register tiles whose scores fit SCORE_BLOCK_BYTES (at least one tile)."""
    tile_rows = matmul_tile_shape(tiles, queries, keys)[0]
    fitting = max(1, SCORE_BLOCK_BYTES // (4 * keys))
    return min(queries, max(tile_rows, fitting // tile_rows * tile_rows))


@dataclass(frozen=True)
class _Scratch:
    scores: Buffer   # [slots, block, keys]
    inverse: Buffer  # [slots, block]: 1 / each row's sum
    keys_t: Buffer | None  # [slots, head, keys] where K^T's rows are not contiguous


class _Attention:
    def __init__(self, kb: KernelBuilder, tiles: TileConfig, views: AttentionViews, math_: AttentionMath,
                 block: int, slots: int) -> None:
        self.kb, self.tiles, self.views, self.math, self.block, self.slots = kb, tiles, views, math_, block, slots
        self.queries, self.head = views.q.shape[-2:]
        self.keys, self.value_head = views.v.shape[-2:]
        self.dt = views.y.buffer.dtype

    def head_task(self, bi: list[Expr], slot: Expr, scratch: _Scratch) -> list[Stmt]:
        """Every query block of one batch-head."""
        stmts: list[Stmt] = []
        keys_t = self.views.keys_t
        if scratch.keys_t is not None:
            # K^T's rows are not contiguous (K as the model gives it): one copy per head first.
            packed = View(scratch.keys_t, (self.slots, self.head, self.keys))
            stmts += self.kb.loops([self.head, self.keys], lambda dk: [packed.store(
                [slot, dk[0], dk[1]], self._biased(1, keys_t.load([*bi, dk[0], dk[1]]), bi, dk[0]))], prefix="d")
            operand = (scratch.keys_t, lambda r, j0: packed.index([slot, r, j0]))
        else:
            operand = (keys_t.buffer, lambda r, j0: keys_t.index([*bi, r, j0]))
        return stmts + blocks(self.kb, self.queries, self.block, lambda i0, count: self.query_block(
            bi, slot, i0, count, scratch, operand), "q")

    def query_block(self, bi: list[Expr], slot: Expr, i0: Expr, count: int, scratch: _Scratch,
                    keys_t: tuple[Buffer, Callable[[Expr, Expr], Expr]]) -> list[Stmt]:
        kb, dt, keys = self.kb, self.dt, self.keys
        scores = View(scratch.scores, (self.slots, self.block, keys))
        q = self.views.q
        stmts = self._product(count, keys, self.head,
                              a_at=lambda i, d: self._biased(0, q.load([*bi, i0 + i, d]), bi, d),
                              b=keys_t, b_at=None, out=(scratch.scores, lambda i, j: scores.index([slot, i, j])),
                              finish=lambda value, i, j: self._score(bi, i0 + i, j, value))
        stmts += self._scores_out(bi, slot, i0, count, scores, before_softmax=True)
        rows = _Normalisers(kb, View(scratch.scores, (self.slots * self.block, keys, 1)),
                            dt, keys, View(scratch.inverse, (self.slots * self.block,)), self.math)
        lanes = self.tiles.width_for(keys) if dt == "float32" else 1
        stmts += kb.loops([count], lambda r: rows.scalar(slot * self.block + r[0], 0) if lanes == 1
                          else rows.contiguous(slot * self.block + r[0], lanes), prefix="r")
        inverse = View(scratch.inverse, (self.slots, self.block))
        stmts += self._scores_out(bi, slot, i0, count, scores, before_softmax=False, inverse=inverse)
        v, y = self.views.v, self.views.y
        return stmts + self._product(
            count, self.value_head, keys, a_at=lambda i, r: scores.load([slot, i, r]),
            b=(v.buffer, lambda r, j0: v.index([*bi, r, j0])) if v.strides[-1] == 1 else None,
            b_at=lambda r, j: v.load([*bi, r, j]), out=(y.buffer, lambda i, j: y.index([*bi, i0 + i, j])),
            finish=lambda value, i, j: self._biased(2, value * inverse.load([slot, i]), bi, j))

    def _biased(self, which: int, value: Expr, bi: list[Expr], d: Expr) -> Expr:
        """Q, K or (added to the output: the probabilities sum to 1) V with its projection bias."""
        bias = self.views.projection_bias
        return value if bias is None else value + bias[which].load([*bi, d])

    def _scores_out(self, bi: list[Expr], slot: Expr, i0: Expr, count: int, scores: View, *,
                    before_softmax: bool, inverse: View | None = None) -> list[Stmt]:
        """The block's scores into the scores output: scaled (then masked in place) or masked,
        before the softmax; or the probabilities, after it."""
        out, mode = self.views.scores_out, self.math.scores_out
        if out is None or before_softmax != (mode != "probabilities"):
            return []

        def element(ij: list[Expr]) -> list[Stmt]:
            i, j = ij
            value = scores.load([slot, i, j])
            if inverse is not None:
                return [out.store([*bi, i0 + i, j], value * inverse.load([slot, i]))]
            stmts = [out.store([*bi, i0 + i, j], value)]
            if mode == "scaled":
                stmts.append(scores.store([slot, i, j], self._masked(bi, i0 + i, j, value)))
            return stmts
        return self.kb.loops([count, self.keys], element, prefix="s")

    def _product(self, m: int, n: int, k: int, *, a_at: Callable[[Expr, Expr], Expr],
                 b: tuple[Buffer, Callable[[Expr, Expr], Expr]] | None, b_at: Callable[[Expr, Expr], Expr] | None,
                 out: tuple[Buffer, Callable[[Expr, Expr], Expr]], finish: Callable[[Expr, Expr, Expr], Expr]
                 ) -> list[Stmt]:
        """out[i, j] = finish(sum_r a[i, r] b[r, j], i, j): register tiles where B's rows are contiguous."""
        out_buffer, out_at = out
        if b is not None and tileable(n, self.dt):
            b_buffer, b_index = b
            return tiled_matmul(self.kb, self.tiles, out_buffer, self.dt, m, n, k, a_at,
                                b_row=lambda r, j0, width: b_index(r, j0), b_buffer=b_buffer, y_at=out_at,
                                finish=finish)
        if b_at is None:
            assert b is not None
            b_buffer, b_index = b
            b_at = lambda r, j: Load(b_buffer, b_index(r, j))  # noqa: E731
        return matmul_rows(self.kb, out_buffer, self.dt, m, n, k, a_at=a_at, b_at=b_at, y_at=out_at,
                           finish=finish)

    def _score(self, bi: list[Expr], i: Expr, j: Expr, value: Expr) -> Expr:
        """A score from its dot product: scaled, capped and (unless the scaled scores are an output) masked."""
        dt, m = self.dt, self.math
        score = value if m.scale == 1.0 else value * const(m.scale, dt)
        if m.softcap > 0:
            score = unary("tanh", score * const(1.0 / m.softcap, dt)) * const(m.softcap, dt)
        return score if m.scores_out == "scaled" else self._masked(bi, i, j, score)

    def _filled(self, score: Expr) -> Expr:
        fill = const(self.math.fill, self.dt)
        return score + fill if self.math.masks_add else fill

    def _masked(self, bi: list[Expr], i: Expr, j: Expr, score: Expr) -> Expr:
        dt, m, views = self.dt, self.math, self.views
        masked = const(float("-inf"), dt)
        if views.bias is not None or views.keep is not None:
            with_mask = score
            if views.bias is not None:
                with_mask = with_mask + views.bias.load([*bi, i, j])
            if views.keep is not None:
                keep = views.keep.load([*bi, i, j])
                keep = keep if keep.dtype == "bool" else binary("ne", keep, const(0, keep.dtype))
                with_mask = select(keep, with_mask, self._filled(with_mask))
            # (lazy: a short mask is not read past its end)
            score = with_mask if m.mask_keys is None else select(lt(j, m.mask_keys), with_mask, masked)
        count = None
        if views.key_counts is not None:
            count = cast(views.key_counts.load(bi), INDEX)
            score = select(lt(j, count), score, masked)
        position = i + m.offset if count is None else i + count - self.queries
        if m.causal:
            score = select(le(j, position), score, self._filled(score) if m.masks_add else masked)
        left, right = m.window
        if left >= 0:
            score = select(le(position - j, left), score, masked)
        if right >= 0:
            score = select(le(j - position, right), score, masked)
        return score


class _Normalisers(SoftmaxRows):
    """Softmax rows that leave e = exp(s - max) in place and store 1 / sum for the product's finish."""

    def __init__(self, kb: KernelBuilder, rows: View, dtype: str, length: int, inverse: View,
                 math_: AttentionMath) -> None:
        super().__init__(kb, rows, rows, dtype, False, length)
        self.inverse, self.empty_rows_zero = inverse, math_.empty_rows_zero

    def _shift(self, peak: Expr, stmts: list[Stmt]) -> Expr:
        if not self.empty_rows_zero:
            return peak
        # A row of -inf scores: exp(-inf - 0) = 0 for every key, and the zero sum gives zeros.
        safe = self.kb.var("shift", self.dt)
        stmts.append(Declare(safe, select(eq(peak, const(float("-inf"), self.dt)), const(0.0, self.dt), peak)))
        return safe

    def _finish(self, o: Expr, i: Expr | int, peak: Expr, total: Expr) -> list[Stmt]:
        one, zero = const(1.0, self.dt), const(0.0, self.dt)
        if not self.empty_rows_zero:
            return [self.inverse.store([o], one / total)]
        inv = self.kb.var("inv", self.dt)
        return [Declare(inv, zero), If(binary("gt", total, zero), [Assign(inv, one / total)]),
                self.inverse.store([o], inv)]


def attention_kernel(kb: KernelBuilder, tiles: TileConfig, views: AttentionViews, math_: AttentionMath, *,
                     scratch: Callable[[tuple[int, ...], str], Buffer], parallel: bool) -> list[Stmt]:
    """The statements of one attention; `scratch(shape, hint)` makes a float scratch buffer.
    `parallel`: batch-heads may run on several threads (each slot with its own scratch)."""
    queries, head = views.q.shape[-2:]
    keys = views.v.shape[-2]
    tasks = math.prod(views.batch)
    block = query_block_rows(tiles, queries, keys)
    slots = min(SCRATCH_SLOTS, tasks) if parallel else 1
    store = _Scratch(scores=scratch((slots, block, keys), "scores"),
                     inverse=scratch((slots, block), "inverse_sums"),
                     keys_t=scratch((slots, head, keys), "keys_t")
                     if views.keys_t.strides[-1] != 1 or views.projection_bias is not None else None)
    work = _Attention(kb, tiles, views, math_, block, slots)
    if slots > 1:
        return slot_blocks(kb, tasks, 1, lambda start, _count, slot: work.head_task(
            _unflatten(start, views.batch), slot, store), "h", slots)
    return kb.loops(list(views.batch), lambda bi: work.head_task(bi, const(0, INDEX), store), prefix="h")


def _unflatten(flat: Expr, shape: tuple[int, ...]) -> list[Expr]:
    """The multi-index of element `flat` of a row-major `shape`."""
    index: list[Expr] = []
    inner = math.prod(shape)
    for extent in shape:
        inner //= extent
        index.append(binary("mod", binary("div", flat, const(inner, INDEX)), const(extent, INDEX)))
    return index


def worth_threads(ctx: object, views: AttentionViews) -> bool:
    queries, head = views.q.shape[-2:]
    keys, value_head = views.v.shape[-2:]
    return pays(ctx, math.prod(views.batch) * queries * keys * (head + value_head))
