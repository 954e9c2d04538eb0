"""Rotary position embeddings: ai.onnx RotaryEmbedding (opset 23) and com.microsoft
RotaryEmbedding (what onnxruntime's exporters and model builder write).

Both rotate pairs of each head's first `rotary_embedding_dim` values by the angle of the token's
position, read from cos/sin caches, and copy the rest of the head:
  y[i]        = x[i] cos[p, i] - x[i + half] sin[p, i]   (halves; interleaved: pairs 2i, 2i + 1)
  y[i + half] = x[i] sin[p, i] + x[i + half] cos[p, i]
The input is [batch, heads, sequence, head] (4-D) or [batch, sequence, heads * head] (3-D); the
kernel walks it in memory order, so the loop over a head's pairs reads two contiguous runs.
Run-time position ids outside the caches are clamped to them, as Gather's are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Declare, Expr, Stmt, cast, const, maximum, minimum
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import mark_outer, pays
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input

MS_DOMAIN = "com.microsoft"
# (b, s) loop indices -> the cache row of that token, and statements declaring what it needs.
Position = Callable[[KernelBuilder, Expr, Expr], tuple[list[Stmt], Expr | None]]


@dataclass
class Rotary:
    """The rotation one node asks for, in the input's layout."""

    batch: int
    seq: int
    heads: int
    head: int
    rot: int  # rotated values per head (even)
    interleaved: bool
    bnsd: bool  # the 4-D [batch, heads, sequence, head] layout


def _float(node: Node, index: int, what: str) -> Tensor:
    t = required_input(node, index, what)
    if t.dtype.kind != "f":
        raise fail(node, f"input {what} has dtype {t.dtype}; RotaryEmbedding is implemented for float types")
    return t


def _layout(node: Node, x: Tensor, heads: int, head_from_cache: int) -> tuple[int, int, int, int, bool]:
    """(batch, sequence, heads, head size, 4-D layout) of the input."""
    if x.rank == 4:
        b, n, s, d = x.shape
        if heads and heads != n:
            raise fail(node, f"num_heads {heads} differs from the input's {n} heads (shape {list(x.shape)})")
        return b, s, n, d, True
    if x.rank != 3:
        raise fail(node, f"input has shape {list(x.shape)}; expected [batch, heads, sequence, head] or "
                         "[batch, sequence, hidden]")
    b, s, hidden = x.shape
    if heads <= 0:
        if head_from_cache <= 0:
            raise fail(node, "num_heads is required for a 3-D input")
        heads = hidden // head_from_cache
    if heads <= 0 or hidden % heads:
        raise fail(node, f"hidden size {hidden} is not a multiple of num_heads {heads}")
    return b, s, heads, hidden // heads, False


def _rotary(node: Node, x: Tensor, cos: Tensor, sin: Tensor, *, head_from_cache: int) -> Rotary:
    heads = int(node.attr("num_heads", 0))
    rot = int(node.attr("rotary_embedding_dim", 0))
    interleaved = int(node.attr("interleaved", 0))
    if heads < 0 or rot < 0 or interleaved not in (0, 1):
        raise fail(node, f"num_heads {heads}, rotary_embedding_dim {rot}, interleaved {interleaved}: "
                         "expected non-negative numbers and interleaved 0 or 1")
    if cos.shape != sin.shape or cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise fail(node, f"cos_cache {list(cos.shape)} and sin_cache {list(sin.shape)} must have one shape and "
                         f"the input's dtype {x.dtype}")
    b, s, n, d, bnsd = _layout(node, x, heads, head_from_cache)
    rot = rot or d
    if rot > d or rot % 2:
        raise fail(node, f"rotary_embedding_dim {rot} must be even and at most the head size {d}")
    if not cos.shape or cos.shape[-1] != rot // 2:
        raise fail(node, f"cos_cache has shape {list(cos.shape)}; its last axis must be rotary_embedding_dim / 2 "
                         f"= {rot // 2}")
    return Rotary(b, s, n, d, rot, bool(interleaved), bnsd)


def _rotate(kb: KernelBuilder, r: Rotary, x: View, y: View, *, caches: tuple[View, View],
            position: Position) -> list[Stmt]:
    """The loop nest over the input in memory order; `x`, `y` are (batch, sequence, heads, head) views."""
    half = r.rot // 2
    cos_v, sin_v = caches

    def head(b: Expr, s: Expr, n: Expr) -> list[Stmt]:
        decls, p = position(kb, b, s)
        row = [b, s] if p is None else [p]

        def pair(i: list[Expr]) -> list[Stmt]:
            c, sn = kb.var("c", x.buffer.dtype), kb.var("sn", x.buffer.dtype)
            lo, hi = (i[0] * 2, i[0] * 2 + 1) if r.interleaved else (i[0], i[0] + half)
            x1, x2 = kb.var("x1", x.buffer.dtype), kb.var("x2", x.buffer.dtype)
            return [Declare(c, cos_v.load([*row, i[0]])), Declare(sn, sin_v.load([*row, i[0]])),
                    Declare(x1, x.load([b, s, n, lo])), Declare(x2, x.load([b, s, n, hi])),
                    y.store([b, s, n, lo], x1 * c - x2 * sn), y.store([b, s, n, hi], x1 * sn + x2 * c)]

        rest = kb.loops([r.head - r.rot], lambda t: [y.store([b, s, n, t[0] + r.rot], x.load([b, s, n, t[0] + r.rot]))],
                        prefix="t")
        return [*decls, *kb.loops([half], pair, prefix="i"), *rest]

    if r.bnsd:
        return kb.loops([r.batch, r.heads, r.seq], lambda i: head(i[0], i[2], i[1]), prefix="o")
    return kb.loops([r.batch, r.seq, r.heads], lambda i: head(*i), prefix="o")


def _views(kb: KernelBuilder, r: Rotary, x: Tensor, y: Tensor) -> tuple[View, View]:
    if r.bnsd:
        strides = (r.heads * r.seq * r.head, r.head, r.seq * r.head, 1)
    else:
        strides = (r.seq * r.heads * r.head, r.heads * r.head, r.head, 1)
    shape = (r.batch, r.seq, r.heads, r.head)
    return View(kb.input(x).buffer, shape, strides), View(kb.output(y).buffer, shape, strides)


def _clamped(p: Expr, rows: int) -> Expr:
    """An int64 position as a cache row, clamped in int64 (the index type may be narrower)."""
    return cast(minimum(maximum(p, const(0, "int64")), const(rows - 1, "int64")), INDEX)


def _start(p: Expr, rows: int) -> Expr:
    """A start position kept within [0, rows], so that adding the token's index cannot overflow."""
    return minimum(maximum(p, const(0, "int64")), const(rows, "int64"))


def _position_ids(node: Node, kb: KernelBuilder, pos: Tensor, r: Rotary, *, rows: int) -> Position:
    """Per-token ids [batch, sequence], or (com.microsoft) one start position [1] plus the token's index."""
    if pos.dtype.name != "int64":
        raise fail(node, f"position_ids has dtype {pos.dtype}; expected int64")
    view = kb.input(pos)
    if pos.size == 1 and node.domain == MS_DOMAIN:
        def start(kb: KernelBuilder, b: Expr, s: Expr) -> tuple[list[Stmt], Expr | None]:
            p = kb.var("p", INDEX)
            return [Declare(p, _clamped(_start(view.load_flat(const(0, INDEX)), rows) + cast(s, "int64"), rows))], p

        return start
    if pos.shape != (r.batch, r.seq):
        raise fail(node, f"position_ids has shape {list(pos.shape)}; expected [{r.batch}, {r.seq}]")

    def per_token(kb: KernelBuilder, b: Expr, s: Expr) -> tuple[list[Stmt], Expr | None]:
        p = kb.var("p", INDEX)
        return [Declare(p, _clamped(view.load([b, s]), rows))], p

    return per_token


def _no_ids(kb: KernelBuilder, b: Expr, s: Expr) -> tuple[list[Stmt], Expr | None]:
    return [], None


def _emit(ctx: LoweringContext, node: Node, x: Tensor, r: Rotary, *, cos: Tensor, sin: Tensor,
          pos: Tensor | None) -> None:
    y = node.outputs[0]
    assert y is not None
    kb = ctx.builder(node)
    xv, yv = _views(kb, r, x, y)
    if pos is None:
        if cos.shape != (r.batch, r.seq, r.rot // 2):
            raise fail(node, f"without position_ids cos_cache must have shape [{r.batch}, {r.seq}, {r.rot // 2}], "
                             f"not {list(cos.shape)}")
        position: Position = _no_ids
    else:
        if cos.rank != 2:
            raise fail(node, f"cos_cache has shape {list(cos.shape)}; with position_ids it must be "
                             "[positions, rotary_embedding_dim / 2]")
        position = _position_ids(node, kb, pos, r, rows=cos.shape[0])
    caches = (kb.input(cos), kb.input(sin))
    body = _rotate(kb, r, xv, yv, caches=caches, position=position)
    # Every head of every token is rotated on its own: the outer loop may be split over threads.
    ctx.emit(kb, mark_outer(body) if pays(ctx, x.size) else body)


@register("RotaryEmbedding")
def lower_rotary_embedding(node: Node, ctx: LoweringContext) -> None:
    """ai.onnx: X, cos_cache, sin_cache, position_ids?"""
    x, cos, sin = _float(node, 0, "X"), _float(node, 1, "cos_cache"), _float(node, 2, "sin_cache")
    if x.rank == 3 and int(node.attr("num_heads", 0)) <= 0:
        raise fail(node, "num_heads is required for a 3-D input")
    _emit(ctx, node, x, _rotary(node, x, cos, sin, head_from_cache=0), cos=cos, sin=sin, pos=node.input(3))


@register("RotaryEmbedding", domain=MS_DOMAIN)
def lower_ms_rotary_embedding(node: Node, ctx: LoweringContext) -> None:
    """com.microsoft: input, position_ids, cos_cache, sin_cache (caches [positions, rot / 2])."""
    x, pos = _float(node, 0, "input"), required_input(node, 1, "position_ids")
    cos, sin = _float(node, 2, "cos_cache"), _float(node, 3, "sin_cache")
    if int(node.attr("is_packed_batching", 0)):
        raise fail(node, "is_packed_batching=1 (packed variable-length batches) is not supported")
    if int(node.attr("rotary_embedding_dim", 0)) > 0 and int(node.attr("num_heads", 0)) <= 0:
        raise fail(node, "num_heads must be given with rotary_embedding_dim")
    if cos.rank != 2:
        raise fail(node, f"cos_cache has shape {list(cos.shape)}; expected [positions, rotary_embedding_dim / 2]")
    head_from_cache = 0 if int(node.attr("rotary_embedding_dim", 0)) else cos.shape[1] * 2
    _emit(ctx, node, x, _rotary(node, x, cos, sin, head_from_cache=head_from_cache), cos=cos, sin=sin, pos=pos)
