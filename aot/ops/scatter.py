"""Ops that write into a copy of a tensor at given positions: ScatterND, ScatterElements and
TensorScatter (the KV-cache update of opset 24).

The output starts as a copy of `data`; the updates are then written (or combined, with a
reduction) in the order they appear, so that for duplicate indices the last write wins, as in
onnxruntime. Run-time indices are handled as Gather handles them (aot/ops/indexing.py): negative
values count from the end, and an index still outside the axis is clamped to its nearest end, so
a write never leaves the tensor. Constant indices outside [-dim, dim - 1] are refused instead.

When nothing reads `data` after the scatter and its storage is an intermediate of the graph, the
output takes over that storage (aot/lowering/scatter_in_place.py) and only the updates are written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Declare, Expr, Stmt, binary, cast, const, lt, maximum, minimum, select
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.lowering.scatter_in_place import can_write_in_place
from aot.ops.attrs import fail, normalize_axis, required_input
from aot.ops.indexing import check_constant_indices, safe_index

Combine = Callable[[Expr, Expr], Expr]

_REDUCTIONS: dict[str, Combine] = {
    "none": lambda old, new: new,
    "add": lambda old, new: old + new,
    "mul": lambda old, new: old * new,
    "max": maximum,
    "min": minimum,
}


def _reduction(node: Node) -> Combine:
    name = node.attr("reduction", "none")
    name = name.decode() if isinstance(name, bytes) else str(name)
    if name not in _REDUCTIONS:
        raise fail(node, f"reduction {name!r} is not one of {', '.join(_REDUCTIONS)}")
    if name != "none" and node.input(0) is not None and node.inputs[0].dtype == np.dtype(bool):
        raise fail(node, f"reduction {name!r} on bool data")
    return _REDUCTIONS[name]


def _output(node: Node, data: Tensor) -> Tensor:
    y = node.outputs[0] if node.outputs else None
    assert y is not None  # pruning removes nodes whose outputs are all unread
    if y.shape != data.shape or y.dtype != data.dtype:
        raise fail(node, f"output {list(y.shape)} {y.dtype} should be data's {list(data.shape)} {data.dtype}")
    return y


def _indices(node: Node, t: Tensor, what: str = "indices") -> None:
    if t.dtype not in (np.dtype("int32"), np.dtype("int64")):
        raise fail(node, f"{what} {t.name!r} have dtype {t.dtype}; expected int32 or int64")


def _start(node: Node, ctx: LoweringContext, data: Tensor, y: Tensor) -> tuple[KernelBuilder, View, list[Stmt]]:
    """The kernel builder, the output's view and the statements that fill the output with `data`:
    none when the output takes over data's storage."""
    if can_write_in_place(node, ctx, data, y):
        ctx.alias(y, data)
        kb = ctx.builder(node)
        return kb, kb.output(y), []
    kb = ctx.builder(node)
    dv = kb.input(data)
    yv = kb.output(y)
    return kb, yv, kb.loops([y.size], lambda i: [yv.store_flat(i[0], dv.load_flat(i[0]))])


def _position(kb: KernelBuilder, iv: View | None, where: Sequence[Expr | int], dim: int, stmts: list[Stmt]) -> Expr:
    """The in-bounds position along an axis of `dim` written by the index at `where` of `iv`,
    declared once in `stmts`. An axis of one element is always written at 0 without loading the
    index (the indices are then left unbound: an unused parameter fails -Werror)."""
    if dim == 1:
        return const(0, INDEX)
    assert iv is not None
    k = kb.var("k", INDEX)
    stmts.append(Declare(k, safe_index(iv.load(list(where)), dim)))
    return k


@register("ScatterND")
def lower_scatter_nd(node: Node, ctx: LoweringContext) -> None:
    """Writes each slice of `updates` at the position its index row names; a run-time index
    outside its axis is wrapped when negative, then clamped to the nearest end, as in Gather."""
    data = required_input(node, 0, "data")
    indices = required_input(node, 1, "indices")
    updates = required_input(node, 2, "updates")
    y = _output(node, data)
    combine = _reduction(node)
    _indices(node, indices)
    m = indices.shape[-1] if indices.rank else 0
    if indices.rank < 1 or m > data.rank:
        raise fail(node, f"indices {list(indices.shape)} must have rank >= 1 and a last dimension of at most "
                         f"data's rank {data.rank}")
    lead, trailing = indices.shape[:-1], data.shape[m:]
    if updates.shape != (*lead, *trailing) or updates.dtype != data.dtype:
        raise fail(node, f"updates {list(updates.shape)} {updates.dtype} should be "
                         f"{[*lead, *trailing]} {data.dtype} for indices {list(indices.shape)}")
    if y.size == 0:
        return
    check_constant_indices(node, indices, data.shape[:m], f"dims 0..{m - 1} of data {list(data.shape)}")
    kb, yv, body = _start(node, ctx, data, y)
    if updates.size > 0:
        iv = kb.input(indices) if any(d > 1 for d in data.shape[:m]) else None  # see _position
        uv = kb.input(updates)

        def each(idx: list[Expr]) -> list[Stmt]:
            stmts: list[Stmt] = []
            coords = [_position(kb, iv, [*idx, j], data.shape[j], stmts) for j in range(m)]
            return stmts + kb.loops(trailing, lambda t: [
                yv.store([*coords, *t], combine(yv.load([*coords, *t]), uv.load([*idx, *t])))], prefix="j")

        body += kb.loops(lead, each)
    ctx.emit(kb, body)


@register("ScatterElements", "Scatter")
def lower_scatter_elements(node: Node, ctx: LoweringContext) -> None:
    """Writes each element of `updates` at its own position with the axis coordinate taken from
    `indices`; a run-time index outside the axis is wrapped when negative, then clamped, as in Gather."""
    data = required_input(node, 0, "data")
    indices = required_input(node, 1, "indices")
    updates = required_input(node, 2, "updates")
    y = _output(node, data)
    combine = _reduction(node)
    _indices(node, indices)
    if indices.rank != data.rank:
        raise fail(node, f"indices rank {indices.rank} differs from data rank {data.rank}")
    axis = normalize_axis(node, int(node.attr("axis", 0)), data.rank)
    if updates.shape != indices.shape or updates.dtype != data.dtype:
        raise fail(node, f"updates {list(updates.shape)} {updates.dtype} should be indices' shape "
                         f"{list(indices.shape)} and data's type {data.dtype}")
    if any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape)) if a != axis):
        raise fail(node, f"indices {list(indices.shape)} exceed data {list(data.shape)} outside axis {axis}")
    if y.size == 0:
        return
    dim = data.shape[axis]
    check_constant_indices(node, indices, [dim], f"axis {axis} of data {list(data.shape)}")
    kb, yv, body = _start(node, ctx, data, y)
    if updates.size > 0:
        iv = kb.input(indices) if dim > 1 else None  # see _position
        uv = kb.input(updates)

        def each(idx: list[Expr]) -> list[Stmt]:
            stmts: list[Stmt] = []
            where = list(idx)
            where[axis] = _position(kb, iv, idx, dim, stmts)
            return [*stmts, yv.store(where, combine(yv.load(where), uv.load(idx)))]

        body += kb.loops(indices.shape, each)
    ctx.emit(kb, body)


def _sequence_position(raw: Expr, step: Expr, dim: int, circular: bool) -> Expr:
    """The cache position of update step `step` written from `raw`: modulo the cache length in
    circular mode, else wrapped when negative and clamped like any run-time index."""
    dt = raw.dtype
    at = raw + cast(step, dt)
    if not circular:
        return safe_index(at, dim)
    rest = binary("mod", at, const(dim, dt))  # C's remainder: negative for negative positions
    return cast(select(lt(rest, const(0, dt)), rest + const(dim, dt), rest), INDEX)


@register("TensorScatter")
def lower_tensor_scatter(node: Node, ctx: LoweringContext) -> None:
    """Writes `update` into the cache along `axis` from each sample's write index; in linear mode
    a position past the cache (or a negative one still out after wrapping) is clamped to its end."""
    past = required_input(node, 0, "past_cache")
    update = required_input(node, 1, "update")
    write_indices = node.input(2)
    y = _output(node, past)
    mode = node.attr("mode", "linear")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("linear", "circular"):
        raise fail(node, f"mode {mode!r} is not 'linear' or 'circular'")
    if past.rank < 2:
        raise fail(node, f"past_cache {list(past.shape)} needs a batch and a sequence dimension")
    axis = normalize_axis(node, int(node.attr("axis", -2)), past.rank)
    if axis == 0:
        raise fail(node, "axis 0 is the batch dimension; the sequence axis must be another one")
    expected = [*past.shape[:axis], update.shape[axis] if update.rank == past.rank else "?", *past.shape[axis + 1:]]
    if (update.rank != past.rank or update.dtype != past.dtype or update.shape[axis] > past.shape[axis]
            or any(u != p for a, (u, p) in enumerate(zip(update.shape, past.shape)) if a != axis)):
        raise fail(node, f"update {list(update.shape)} {update.dtype} should be {expected} {past.dtype} "
                         f"with at most {past.shape[axis]} positions along axis {axis}")
    if write_indices is not None:
        _indices(node, write_indices, "write_indices")
        if write_indices.shape != (past.shape[0],):
            raise fail(node, f"write_indices {list(write_indices.shape)} should be [{past.shape[0]}], one per batch")
    if y.size == 0:
        return
    kb, yv, body = _start(node, ctx, past, y)
    if update.size > 0:
        uv = kb.input(update)
        wv = kb.input(write_indices) if write_indices is not None and past.shape[axis] > 1 else None
        dim = past.shape[axis]

        trailing = update.shape[axis + 1:]

        def each(idx: list[Expr]) -> list[Stmt]:
            # the position is computed once per row of the update, outside the loops that copy it
            stmts: list[Stmt] = []
            at = idx[axis]
            if wv is not None:
                at = kb.var("k", INDEX)
                stmts.append(Declare(at, _sequence_position(wv.load([idx[0]]), idx[axis], dim, mode == "circular")))
            return stmts + kb.loops(trailing, lambda t: [yv.store([*idx[:axis], at, *t], uv.load([*idx, *t]))],
                                    prefix="j")

        body += kb.loops(update.shape[:axis + 1], each)
    ctx.emit(kb, body)
