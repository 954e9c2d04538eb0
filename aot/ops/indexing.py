"""Ops that pick elements by position: Gather, GatherElements, GatherND, Slice, Split, Trilu.

Run-time indices (Gather*) are loaded, wrapped when negative (ONNX: -1 is the last element) and
then clamped into the axis: ONNX leaves out-of-range indices undefined, and generated code must
never read outside a tensor, so an index past either end reads the nearest edge element.
Indices known at compile time are checked instead: one outside [-dim, dim - 1] is refused,
naming the node (onnxruntime rejects the model when it runs).
Positions known at compile time (Slice starts/ends/steps, Split sizes) become strided views.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.ir.sizes import element_count
from aot.kernel.ir import INDEX, Declare, Expr, Stmt, cast, const, ge, le, lt, maximum, minimum, select
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import constant_input, constant_ints, fail, normalize_axis, required_input


def _prod(values: Sequence[int]) -> int:
    return element_count(values)


def _first_output(node: Node) -> Tensor:
    y = node.outputs[0] if node.outputs else None
    assert y is not None  # pruning removes nodes whose outputs are all unread
    return y


def _index_tensor(node: Node, t: Tensor) -> None:
    if t.dtype not in (np.dtype("int32"), np.dtype("int64")):
        raise fail(node, f"indices {t.name!r} have dtype {t.dtype}; expected int32 or int64")


def check_constant_indices(node: Node, indices: Tensor, dims: Sequence[int], what: str) -> None:
    """Refuse constant indices outside [-dim, dim - 1]. `dims` gives the axis length for each
    position of the last index dimension (one entry: the same axis for all)."""
    if not indices.is_constant or indices.size == 0:
        return
    values = np.asarray(indices.data, dtype=np.int64).reshape(-1, len(dims))
    bounds = np.asarray(dims, dtype=np.int64)
    bad = (values < -bounds) | (values >= bounds)
    if not bad.any():
        return
    row, col = (int(v) for v in np.argwhere(bad)[0])
    dim = int(bounds[col])
    position = np.unravel_index(row * len(dims) + col, indices.shape)
    raise fail(node, f"constant indices {indices.name!r} hold {int(values[row, col])} at "
                     f"{[int(p) for p in position]}, outside [{-dim}, {dim - 1}] for {what}")


def _position(kb: KernelBuilder, iv: View | None, where: Sequence[Expr | int], dim: int, stmts: list[Stmt]) -> Expr:
    """The in-bounds position along an axis of `dim` read by the index at `where` of `iv`,
    declared once in `stmts`. An axis of one element is always read at 0, and the index is not
    loaded: the view drops a coordinate into a 1-element axis, which would leave the declared
    position, or the indices parameter itself, unused (an error under -Werror)."""
    if dim == 1:
        return const(0, INDEX)
    assert iv is not None
    k = kb.var("k", INDEX)
    stmts.append(Declare(k, safe_index(iv.load(list(where)), dim)))
    return k


def safe_index(raw: Expr, dim: int) -> Expr:
    """A run-time index into an axis of `dim` elements, as an in-bounds element position:
    negative values count from the end, anything still outside [0, dim) is clamped to the
    nearest end (out-of-range indices are undefined in ONNX; clamping keeps reads in bounds)."""
    dt = raw.dtype
    wrapped = select(lt(raw, const(0, dt)), raw + const(dim, dt), raw)
    return cast(minimum(maximum(wrapped, const(0, dt)), const(dim - 1, dt)), INDEX)


# ---------------------------------------------------------------------------------------------
# Gather family


@register("Gather")
def lower_gather(node: Node, ctx: LoweringContext) -> None:
    data = required_input(node, 0, "data")
    indices = required_input(node, 1, "indices")
    y = _first_output(node)
    _index_tensor(node, indices)
    axis = normalize_axis(node, int(node.attr("axis", 0)), data.rank)
    dim = data.shape[axis]
    full = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1:])
    if _prod(full) != y.size or y.dtype != data.dtype:
        raise fail(node, f"output {list(y.shape)} {y.dtype} does not match gathering {list(data.shape)} "
                         f"{data.dtype} by {list(indices.shape)} along axis {axis}")
    if y.size == 0:
        return
    if dim == 0:
        raise fail(node, f"axis {axis} of data {list(data.shape)} is empty: there is nothing to gather")
    check_constant_indices(node, indices, [dim], f"axis {axis} of data {list(data.shape)}")
    kb = ctx.builder(node)
    dv = kb.input(data)
    iv = kb.input(indices) if dim > 1 else None  # see _position
    yv = View(kb.output(y).buffer, full)
    trailing = data.shape[axis + 1:]

    def body(idx: list[Expr]) -> list[Stmt]:
        before, where = idx[:axis], idx[axis:]
        stmts: list[Stmt] = []
        k = _position(kb, iv, where, dim, stmts)
        return stmts + kb.loops(trailing, lambda t: [yv.store([*idx, *t], dv.load([*before, k, *t]))], prefix="j")

    ctx.emit(kb, kb.loops([*data.shape[:axis], *indices.shape], body))


@register("GatherElements")
def lower_gather_elements(node: Node, ctx: LoweringContext) -> None:
    data = required_input(node, 0, "data")
    indices = required_input(node, 1, "indices")
    y = _first_output(node)
    _index_tensor(node, indices)
    if indices.rank != data.rank:
        raise fail(node, f"indices rank {indices.rank} differs from data rank {data.rank}")
    axis = normalize_axis(node, int(node.attr("axis", 0)), data.rank)
    if y.shape != indices.shape or y.dtype != data.dtype:
        raise fail(node, f"output {list(y.shape)} {y.dtype} should be {list(indices.shape)} {data.dtype}")
    if y.size == 0:
        return
    if data.shape[axis] == 0:
        raise fail(node, f"axis {axis} of data {list(data.shape)} is empty: there is nothing to gather")
    check_constant_indices(node, indices, [data.shape[axis]], f"axis {axis} of data {list(data.shape)}")
    kb = ctx.builder(node)
    dv, yv = kb.input(data), kb.output(y)
    iv = kb.input(indices) if data.shape[axis] > 1 else None  # see _position

    def body(idx: list[Expr]) -> list[Stmt]:
        src = list(idx)
        stmts: list[Stmt] = []
        src[axis] = _position(kb, iv, idx, data.shape[axis], stmts)
        return [*stmts, yv.store(idx, dv.load(src))]

    ctx.emit(kb, kb.loops(indices.shape, body))


@register("GatherND")
def lower_gather_nd(node: Node, ctx: LoweringContext) -> None:
    data = required_input(node, 0, "data")
    indices = required_input(node, 1, "indices")
    y = _first_output(node)
    _index_tensor(node, indices)
    if indices.dtype != np.dtype("int64"):
        raise fail(node, f"indices have dtype {indices.dtype}; GatherND takes int64")
    b = int(node.attr("batch_dims", 0))
    if indices.rank < 1 or not 0 <= b < min(data.rank, indices.rank):
        raise fail(node, f"batch_dims={b} does not fit data rank {data.rank} and indices rank {indices.rank}")
    if data.shape[:b] != indices.shape[:b]:
        raise fail(node, f"batch dims of data {list(data.shape[:b])} and indices {list(indices.shape[:b])} differ")
    m = indices.shape[-1]
    if b + m > data.rank:
        raise fail(node, f"indices address {m} dims after {b} batch dims; data has rank {data.rank}")
    lead = indices.shape[:-1]
    trailing = data.shape[b + m:]
    full = (*lead, *trailing)
    if _prod(full) != y.size or y.dtype != data.dtype:
        raise fail(node, f"output {list(y.shape)} {y.dtype} should hold {list(full)} {data.dtype}")
    if y.size == 0:
        return
    if any(d == 0 for d in data.shape[b:b + m]):
        raise fail(node, f"data {list(data.shape)} has an empty indexed dimension: there is nothing to gather")
    check_constant_indices(node, indices, data.shape[b:b + m], f"dims {b}..{b + m - 1} of data {list(data.shape)}")
    kb = ctx.builder(node)
    dv = kb.input(data)
    iv = kb.input(indices) if any(d > 1 for d in data.shape[b:b + m]) else None  # see _position
    yv = View(kb.output(y).buffer, full)

    def body(idx: list[Expr]) -> list[Stmt]:
        stmts: list[Stmt] = []
        coords = [_position(kb, iv, [*idx, j], data.shape[b + j], stmts) for j in range(m)]
        stmts += kb.loops(trailing, lambda t: [yv.store([*idx, *t], dv.load([*idx[:b], *coords, *t]))],
                          prefix="j")
        return stmts

    ctx.emit(kb, kb.loops(lead, body))


# ---------------------------------------------------------------------------------------------
# Slice and Split: strided views of the input, copied


def slice_window(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """First position and element count of start:end:step on an axis of `dim` elements, with
    ONNX's rules: negative values count from the end, then the bounds are clamped ([0, dim] for
    positive steps, [-1, dim - 1] for negative ones, so that a reverse slice can reach 0)."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        count = max(0, -(-(end - start) // step))
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        count = max(0, -(-(start - end) // -step))
    return start, count


@register("Slice", constant_inputs=(1, 2, 3, 4))
def lower_slice(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "data")
    y = _first_output(node)
    if node.opset < 10:
        starts, ends = list(node.attr("starts", [])), list(node.attr("ends", []))
        axes, steps = node.attr("axes"), None
    else:
        starts = constant_ints(node, 1, "starts") or []
        ends = constant_ints(node, 2, "ends") or []
        axes, steps = constant_ints(node, 3, "axes"), constant_ints(node, 4, "steps")
    axes = list(range(len(starts))) if axes is None else list(axes)
    steps = [1] * len(starts) if steps is None else list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise fail(node, f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    first, counts, strides = [0] * x.rank, list(x.shape), [1] * x.rank
    seen: set[int] = set()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        a = normalize_axis(node, int(axis), x.rank)
        if a in seen:
            raise fail(node, f"axes {axes} name axis {a} twice")
        seen.add(a)
        if step == 0:
            raise fail(node, f"step 0 on axis {a}")
        first[a], counts[a] = slice_window(x.shape[a], int(start), int(end), int(step))
        strides[a] = int(step)
    if tuple(counts) != y.shape:
        raise fail(node, f"output {list(y.shape)} differs from the computed slice {counts}")
    if y.dtype != x.dtype:
        raise fail(node, f"output dtype {y.dtype} differs from the input's {x.dtype}")
    if y.shape == x.shape and all(s == 1 for s in strides):
        ctx.alias(y, x)  # the whole tensor: same bytes
        return
    if y.size == 0:
        return
    kb = ctx.builder(node)
    src = kb.input(x)
    window = View(src.buffer, y.shape, [s * k for s, k in zip(src.strides, strides)],
                  sum(f * s for f, s in zip(first, src.strides)))
    dst = kb.output(y)
    ctx.emit(kb, kb.loops(y.shape, lambda idx: [dst.store(idx, window.load(idx))]))


def _split_sizes(node: Node, x: Tensor, axis: int) -> list[int]:
    dim = x.shape[axis]
    split = constant_ints(node, 1, "split") if node.opset >= 13 else node.attr("split")
    if split:
        sizes = [int(s) for s in split]
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise fail(node, f"split {sizes} does not add up to {dim}, the length of axis {axis}")
        if len(sizes) < len(node.outputs):
            raise fail(node, f"split has {len(sizes)} sizes for {len(node.outputs)} outputs")
        return sizes
    num_outputs = node.attr("num_outputs")
    if num_outputs is not None:
        n = int(num_outputs)
        if n <= 0:
            raise fail(node, f"num_outputs={n}")
        chunk = -(-dim // n)  # opset 18: ceil-sized parts, the last one smaller
        return [min(chunk, max(0, dim - chunk * i)) for i in range(n)]
    # Equal parts, one per declared output. Unread trailing outputs were dropped on import, but
    # every part has the same size, which any present output tells.
    present = [t for t in node.outputs if t is not None]
    if not present:
        return []
    part = present[0].shape[axis]
    return [part] * (dim // part if part else len(node.outputs))


@register("Split", constant_inputs=(1,))
def lower_split(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "input")
    axis = normalize_axis(node, int(node.attr("axis", 0)), x.rank)
    sizes = _split_sizes(node, x, axis)
    kb = ctx.builder(node)
    src: View | None = None
    body: list[Stmt] = []
    offset = 0
    for position, size in enumerate(sizes):
        out = node.outputs[position] if position < len(node.outputs) else None
        if out is not None:
            shape = (*x.shape[:axis], size, *x.shape[axis + 1:])
            if out.shape != shape or out.dtype != x.dtype:
                raise fail(node, f"output {position} {list(out.shape)} {out.dtype} should be {list(shape)} {x.dtype}")
            if out.size > 0:
                if src is None:
                    src = kb.input(x)
                part = View(src.buffer, shape, src.strides, offset * src.strides[axis])
                dst = kb.output(out)
                body += kb.loops(shape, lambda idx, part=part, dst=dst: [dst.store(idx, part.load(idx))])
        offset += size
    ctx.emit(kb, body)


# ---------------------------------------------------------------------------------------------
# Trilu


@register("Trilu")
def lower_trilu(node: Node, ctx: LoweringContext) -> None:
    """Keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims, zeroes
    the rest. k is a literal when known at compile time, else loaded from its scalar input."""
    x = required_input(node, 0, "input")
    y = _first_output(node)
    if x.rank < 2:
        raise fail(node, f"input rank {x.rank}: Trilu needs at least 2 dims")
    upper = int(node.attr("upper", 1)) != 0
    k_tensor = node.input(1)
    if k_tensor is not None and k_tensor.size != 1:
        raise fail(node, f"k {k_tensor.name!r} has shape {list(k_tensor.shape)}; it must be a scalar")
    if y.size == 0:
        return
    rows, cols = x.shape[-2:]
    kb = ctx.builder(node)
    xv, yv = kb.input(x), kb.output(y)
    k_expr: Expr
    if k_tensor is None or k_tensor.is_constant:
        value = constant_input(node, 1, "k")
        k = int(value.reshape(-1)[0]) if value is not None else 0
        # Beyond these bounds every element is on one side; clamping keeps the literal 32-bit.
        k_expr = const(min(max(k, -rows - 1), cols + 1), INDEX)
        diagonal = lambda i, j: j - i  # noqa: E731
    else:
        k_expr = kb.input(k_tensor).load_flat(const(0, INDEX))
        diagonal = lambda i, j: cast(j - i, k_expr.dtype)  # noqa: E731
    keep = ge if upper else le
    zero = cast(const(0, "int32"), y.dtype.name)

    def body(idx: list[Expr]) -> list[Stmt]:
        i, j = idx[-2], idx[-1]
        return [yv.store(idx, select(keep(diagonal(i, j), k_expr), xv.load(idx), zero))]

    ctx.emit(kb, kb.loops(x.shape, body))
