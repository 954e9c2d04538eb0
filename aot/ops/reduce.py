"""Reductions along axes: Reduce*, ArgMax/ArgMin, Hardmax, TopK and CumSum.

Every reduction walks its axes in one fixed order (row-major over the reduced axes) with a
scalar accumulator of the tensor's own dtype, so results are deterministic and identical across
backends.

NaN, as onnxruntime treats it: ReduceMax/ReduceMin, ArgMax/ArgMin and Hardmax keep the first
element and replace it only by a strictly greater (smaller) one, so a NaN wins only when it comes
first. That is exactly what onnxruntime computes on its scalar paths (reductions over an outer
axis, short rows, every ArgMax/ArgMin/Hardmax); its SIMD path for long contiguous rows combines
lanes in an order that depends on the CPU, which no fixed-order definition can reproduce.
TopK orders NaN above every number (as sorting libraries do), with ties broken by the lower index.
docs/numerics.md states these rules next to MaxPool's (NaN-propagating).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.ir.sizes import element_count
from aot.kernel.ir import (
    INDEX,
    Assign,
    Declare,
    Expr,
    If,
    Stmt,
    Var,
    cast,
    const,
    eq,
    ge,
    gt,
    le,
    logical_and,
    logical_or,
    lt,
    select,
    unary,
)
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import constant_ints, constant_scalar_int, fail, normalize_axis, required_input


def _prod(values: Sequence[int]) -> int:
    return element_count(values)


def _output(node: Node, index: int = 0) -> Tensor | None:
    return node.outputs[index] if index < len(node.outputs) else None


def _around_axis(shape: Sequence[int], axis: int) -> tuple[int, int, int]:
    """(outer, length, inner): the shape seen as three dims around `axis`."""
    return _prod(shape[:axis]), shape[axis], _prod(shape[axis + 1:])


def _is_float(t: Tensor) -> bool:
    return t.dtype.kind == "f"


def _lowest(dtype: np.dtype) -> float | int | bool:
    """The identity of max over `dtype` (what ReduceMax gives for an empty set)."""
    if dtype.kind == "b":
        return False
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).min)
    return float("-inf")


def _highest(dtype: np.dtype) -> float | int | bool:
    if dtype.kind == "b":
        return True
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).max)
    return float("inf")


# ---------------------------------------------------------------------------------------------
# Reduce*


@dataclass(frozen=True)
class _Reducer:
    """A reduction as init / step / finish over a scalar accumulator of the input's dtype."""

    dtypes: str                                   # numpy kinds accepted: "f", "fiu", "fiub"
    init: Callable[[np.dtype], float | int | bool]
    step: Callable[[Expr, Expr], Expr]            # (accumulator, element) -> accumulator
    finish: Callable[[Expr, int], Expr] = lambda acc, count: acc  # (accumulator, element count)


def _mean(acc: Expr, count: int) -> Expr:
    # Integer means truncate toward zero like onnxruntime's; 0/0 is NaN for floats (empty set),
    # and an integer reduction over an empty set is refused before getting here.
    return acc / const(count, acc.dtype)


_REDUCERS: dict[str, _Reducer] = {
    "ReduceSum": _Reducer("fiu", lambda dt: 0, lambda acc, v: acc + v),
    "ReduceSumSquare": _Reducer("fiu", lambda dt: 0, lambda acc, v: acc + v * v),
    "ReduceL1": _Reducer("fiu", lambda dt: 0, lambda acc, v: acc + unary("abs", v)),
    "ReduceL2": _Reducer("f", lambda dt: 0, lambda acc, v: acc + v * v, lambda acc, n: unary("sqrt", acc)),
    "ReduceLogSum": _Reducer("f", lambda dt: 0, lambda acc, v: acc + v, lambda acc, n: unary("log", acc)),
    "ReduceMean": _Reducer("fiu", lambda dt: 0, lambda acc, v: acc + v, _mean),
    "ReduceProd": _Reducer("fiu", lambda dt: 1, lambda acc, v: acc * v),
    # Max/Min start from the first element (see the module docstring); the empty set gives the
    # identity, -inf / +inf (the dtype's lowest / highest integer, false / true for bool).
    "ReduceMax": _Reducer("fiub", _lowest, lambda acc, v: select(gt(v, acc), v, acc)),
    "ReduceMin": _Reducer("fiub", _highest, lambda acc, v: select(lt(v, acc), v, acc)),
}
_FIRST_ELEMENT_INIT = {"ReduceMax", "ReduceMin"}


def _reduced_axes(node: Node, x: Tensor) -> list[int]:
    """The sorted axes to reduce. Axes come from an attribute before opset 13 (ReduceSum) or 18
    (the others), from an optional constant input since; no axes means all of them, unless
    noop_with_empty_axes asks for none."""
    since = 13 if node.op_type == "ReduceSum" else 18
    if node.opset >= since:
        axes = constant_ints(node, 1, "axes")
        noop = int(node.attr("noop_with_empty_axes", 0)) != 0
    else:
        axes = node.attr("axes")
        noop = False
    if not axes:
        return [] if noop else list(range(x.rank))
    normalized = sorted({normalize_axis(node, int(a), x.rank) for a in axes})
    if len(normalized) != len(axes):
        raise fail(node, f"axes {list(axes)} name an axis twice")
    return normalized


@register(*_REDUCERS, "ReduceLogSumExp", constant_inputs=(1,))
def lower_reduce(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "data")
    y = _output(node)
    assert y is not None
    reducer = _REDUCERS.get(node.op_type)
    kinds = reducer.dtypes if reducer is not None else "f"
    if x.dtype.kind not in kinds or y.dtype != x.dtype:
        raise fail(node, f"dtype {x.dtype}: {node.op_type} is implemented for "
                         + {"f": "float types", "fiu": "float and integer types",
                            "fiub": "float, integer and bool types"}[kinds])
    axes = _reduced_axes(node, x)
    kept = [d for d in range(x.rank) if d not in axes]
    kept_shape = [x.shape[d] for d in kept]
    red_shape = [x.shape[d] for d in axes]
    count = _prod(red_shape)
    if _prod(kept_shape) != y.size:
        raise fail(node, f"output {list(y.shape)} does not match reducing {list(x.shape)} over axes {axes}")
    if count == 0 and x.dtype.kind != "f" and node.op_type == "ReduceMean":
        raise fail(node, "the mean of an empty set of integers is undefined")
    kb = ctx.builder(node)
    # An empty input is never read: binding it would leave an unused kernel parameter.
    xv = kb.input(x) if count > 0 else None
    yv = View(kb.output(y).buffer, kept_shape)
    dt = x.dtype.name

    def element(k_idx: list[Expr], r_idx: list[Expr]) -> Expr:
        assert xv is not None
        full: list[Expr] = [const(0, INDEX)] * x.rank
        for d, i in zip(kept, k_idx):
            full[d] = i
        for d, i in zip(axes, r_idx):
            full[d] = i
        return xv.load(full)

    def body(k_idx: list[Expr]) -> list[Stmt]:
        load = lambda r_idx: element(k_idx, r_idx)  # noqa: E731
        if reducer is None:
            stmts, result = _log_sum_exp(kb, load, red_shape, dt)
        else:
            acc = kb.var("acc", dt)
            if node.op_type in _FIRST_ELEMENT_INIT and count > 0:
                init = load([const(0, INDEX)] * len(axes))
            else:
                init = const(reducer.init(x.dtype), dt)
            stmts = [Declare(acc, init)]
            stmts += kb.loops(red_shape, lambda r: [Assign(acc, reducer.step(acc, load(r)))], prefix="r")
            result = reducer.finish(acc, count)
        return [*stmts, yv.store(k_idx, result)]

    ctx.emit(kb, kb.loops(kept_shape, body))


def _log_sum_exp(kb: KernelBuilder, load: Callable[[list[Expr]], Expr], red_shape: list[int],
                 dt: str) -> tuple[list[Stmt], Expr]:
    """log(sum(exp(x))) computed as m + log(sum(exp(x - m))), m the largest finite element, so
    no exp overflows. Infinities are left out of m (inf - inf would be NaN): +inf elements then
    give +inf, all -inf (or an empty set) gives log(0) = -inf, and a NaN anywhere gives NaN."""
    peak, total = kb.var("max", dt), kb.var("sum", dt)
    stmts: list[Stmt] = [Declare(peak, const(float("-inf"), dt))]

    def find_peak(r: list[Expr]) -> list[Stmt]:
        v = load(r)
        return [If(logical_and(gt(v, peak), unary("not", unary("isinf", v))), [Assign(peak, v)])]

    stmts += kb.loops(red_shape, find_peak, prefix="r")
    stmts.append(If(unary("isinf", peak), [Assign(peak, const(0.0, dt))]))  # no finite element
    stmts.append(Declare(total, const(0.0, dt)))
    stmts += kb.loops(red_shape, lambda r: [Assign(total, total + unary("exp", load(r) - peak))], prefix="r")
    return stmts, unary("log", total) + peak


# ---------------------------------------------------------------------------------------------
# ArgMax / ArgMin / Hardmax


@register("ArgMax", "ArgMin")
def lower_arg_reduce(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "data")
    y = _output(node)
    assert y is not None
    if x.dtype.kind not in "fiu":
        raise fail(node, f"dtype {x.dtype}: {node.op_type} is implemented for float and integer types")
    axis = normalize_axis(node, int(node.attr("axis", 0)), x.rank)
    last = int(node.attr("select_last_index", 0)) != 0
    outer, length, inner = _around_axis(x.shape, axis)
    if length == 0:
        raise fail(node, f"axis {axis} has no elements to pick from")
    if y.size != outer * inner:
        raise fail(node, f"output {list(y.shape)} does not match reducing {list(x.shape)} over axis {axis}")
    better = {("ArgMax", False): gt, ("ArgMax", True): ge,
              ("ArgMin", False): lt, ("ArgMin", True): le}[(node.op_type, last)]
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (outer, length, inner))
    yv = View(kb.output(y).buffer, (outer, inner))

    def body(idx: list[Expr]) -> list[Stmt]:
        o, i = idx
        stmts, _, best = _running_best(kb, lambda r: xv.load([o, r, i]), length, better, x.dtype.name)
        return [*stmts, yv.store([o, i], cast(best, y.dtype.name))]

    ctx.emit(kb, kb.loops([outer, inner], body))


def _running_best(kb: KernelBuilder, load: Callable[[Expr], Expr], length: int,
                  better: Callable[[Expr, Expr], Expr], dt: str) -> tuple[list[Stmt], Var, Var]:
    """The first element, replaced by each later one that is `better` (strictly greater for the
    first maximum, >= for the last): statements, the best value and its index."""
    value, index = kb.var("best", dt), kb.var("arg", INDEX)
    stmts: list[Stmt] = [Declare(value, load(const(0, INDEX))), Declare(index, const(0, INDEX))]

    def step(r: list[Expr]) -> list[Stmt]:
        v = load(r[0])
        return [If(better(v, value), [Assign(value, v), Assign(index, r[0])])]

    # r = 0 compares the first element with itself: harmless, and keeps the loop a plain range.
    stmts += kb.loops([length], step, prefix="r")
    return stmts, value, index


@register("Hardmax")
def lower_hardmax(node: Node, ctx: LoweringContext) -> None:
    """1 at the first maximum along the axis (opset < 13: of the dims flattened from `axis` on),
    0 elsewhere. A row whose maximum is NaN (a leading NaN) is all zeros, like onnxruntime, which
    marks the first element equal to the maximum."""
    x = required_input(node, 0, "input")
    y = _output(node)
    assert y is not None
    if not _is_float(x):
        raise fail(node, f"dtype {x.dtype}: Hardmax is implemented for float types")
    legacy = node.opset < 13
    axis = normalize_axis(node, int(node.attr("axis", 1 if legacy else -1)), x.rank)
    if legacy:
        outer, length, inner = _prod(x.shape[:axis]), _prod(x.shape[axis:]), 1
    else:
        outer, length, inner = _around_axis(x.shape, axis)
    if y.size == 0:
        return
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (outer, length, inner))
    yv = View(kb.output(y).buffer, (outer, length, inner))
    dt = y.dtype.name

    def body(idx: list[Expr]) -> list[Stmt]:
        o, i = idx
        stmts, peak, best = _running_best(kb, lambda r: xv.load([o, r, i]), length, gt, dt)
        hit = lambda r: logical_and(eq(r, best), unary("not", unary("isnan", peak)))  # noqa: E731
        stmts += kb.loops([length], lambda r: [
            yv.store([o, r[0], i], select(hit(r[0]), const(1.0, dt), const(0.0, dt)))], prefix="r")
        return stmts

    ctx.emit(kb, kb.loops([outer, inner], body))


# ---------------------------------------------------------------------------------------------
# TopK


@register("TopK", constant_inputs=(1,))
def lower_topk(node: Node, ctx: LoweringContext) -> None:
    """The k largest (smallest) elements along an axis, best first, ties by lower index.

    Selection without scratch memory: output slot s takes the best element that comes after the
    one slot s-1 took in that total order, found in one pass over the axis -- O(k * n) per row,
    with constant-trip loops only. `sorted=0` allows any order; the sorted one is as good."""
    x = required_input(node, 0, "X")
    values, indices = _output(node, 0), _output(node, 1)
    if x.dtype.kind not in "fiu":
        raise fail(node, f"dtype {x.dtype}: TopK is implemented for float and integer types")
    k = _topk_k(node)
    axis = normalize_axis(node, int(node.attr("axis", -1)), x.rank)
    largest = int(node.attr("largest", 1)) != 0
    outer, length, inner = _around_axis(x.shape, axis)
    if not 0 <= k <= length:
        raise fail(node, f"k={k} is outside [0, {length}] (the length of axis {axis})")
    for out in (values, indices):
        if out is not None and out.size != outer * k * inner:
            raise fail(node, f"output {out.name!r} {list(out.shape)} does not hold k={k} elements per row")
    if values is not None and values.dtype != x.dtype:
        raise fail(node, f"Values has dtype {values.dtype}, X {x.dtype}")
    if k == 0 or outer * inner == 0:
        return  # empty outputs
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (outer, length, inner))
    vv = View(kb.output(values).buffer, (outer, k, inner)) if values is not None else None
    iv = View(kb.output(indices).buffer, (outer, k, inner)) if indices is not None else None
    dt = x.dtype.name
    floating = _is_float(x)

    def ahead(a: Expr, ia: Expr, b: Expr, ib: Expr) -> Expr:
        return _topk_ahead(a, ia, b, ib, floating, largest)

    def row(idx: list[Expr]) -> list[Stmt]:
        o, i = idx
        prev_v, prev_i = kb.var("prev", dt), kb.var("previ", INDEX)
        stmts: list[Stmt] = [Declare(prev_v, const(0, dt)), Declare(prev_i, const(-1, INDEX))]

        def slot(s: list[Expr]) -> list[Stmt]:
            best_v, best_i = kb.var("best", dt), kb.var("arg", INDEX)

            def scan(r: list[Expr]) -> list[Stmt]:
                v = xv.load([o, r[0], i])
                after_prev = logical_or(lt(prev_i, const(0, INDEX)), ahead(prev_v, prev_i, v, r[0]))
                beats_best = logical_or(lt(best_i, const(0, INDEX)), ahead(v, r[0], best_v, best_i))
                return [If(logical_and(after_prev, beats_best), [Assign(best_v, v), Assign(best_i, r[0])])]

            body: list[Stmt] = [Declare(best_v, const(0, dt)), Declare(best_i, const(-1, INDEX))]
            body += kb.loops([length], scan, prefix="r")
            if vv is not None:
                body.append(vv.store([o, s[0], i], best_v))
            if iv is not None:
                assert indices is not None
                body.append(iv.store([o, s[0], i], cast(best_i, indices.dtype.name)))
            body += [Assign(prev_v, best_v), Assign(prev_i, best_i)]
            return body

        stmts += kb.loops([k], slot, prefix="s")
        return stmts

    ctx.emit(kb, kb.loops([outer, inner], row))


def _topk_k(node: Node) -> int:
    """TopK's k: an attribute before opset 10, a constant input since."""
    if node.opset < 10:
        k = node.attr("k")
        if k is None:
            raise fail(node, "missing attribute k")
        return int(k)
    k_value = constant_scalar_int(node, 1, "K")
    if k_value is None:
        raise fail(node, "missing required input 1 (K)")
    return k_value


def _topk_ahead(a: Expr, ia: Expr, b: Expr, ib: Expr, floating: bool, largest: bool) -> Expr:
    """Whether (a, index ia) comes before (b, index ib) in TopK's output order (NaN largest)."""
    if floating:
        a_nan, b_nan = unary("isnan", a), unary("isnan", b)
        if largest:
            first = logical_or(gt(a, b), logical_and(a_nan, unary("not", b_nan)))
        else:
            first = logical_or(lt(a, b), logical_and(b_nan, unary("not", a_nan)))
        same = logical_or(eq(a, b), logical_and(a_nan, b_nan))
    else:
        first = gt(a, b) if largest else lt(a, b)
        same = eq(a, b)
    return logical_or(first, logical_and(same, lt(ia, ib)))


# ---------------------------------------------------------------------------------------------
# CumSum


@register("CumSum", constant_inputs=(1,))
def lower_cumsum(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "x")
    y = _output(node)
    assert y is not None
    if x.dtype.kind not in "fiu":
        raise fail(node, f"dtype {x.dtype}: CumSum is implemented for float and integer types")
    axis_value = constant_scalar_int(node, 1, "axis")
    if axis_value is None:
        raise fail(node, "missing required input 1 (axis)")
    axis = normalize_axis(node, axis_value, x.rank)
    exclusive = int(node.attr("exclusive", 0)) != 0
    reverse = int(node.attr("reverse", 0)) != 0
    outer, length, inner = _around_axis(x.shape, axis)
    if y.size == 0:
        return
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (outer, length, inner))
    yv = View(kb.output(y).buffer, (outer, length, inner))
    dt = y.dtype.name

    def body(idx: list[Expr]) -> list[Stmt]:
        o, i = idx
        acc = kb.var("acc", dt)

        def step(r: list[Expr]) -> list[Stmt]:
            p = const(length - 1, INDEX) - r[0] if reverse else r[0]
            add = Assign(acc, acc + xv.load([o, p, i]))
            store = yv.store([o, p, i], acc)
            return [store, add] if exclusive else [add, store]

        return [Declare(acc, const(0, dt)), *kb.loops([length], step, prefix="r")]

    ctx.emit(kb, kb.loops([outer, inner], body))


def chained_sum(kb: KernelBuilder, load: Callable[[Expr], Expr], length: int, dtype: str,
                chains: int) -> tuple[list[Stmt], Expr]:
    """Statements summing load(0) .. load(length - 1) and the sum: `chains` independent partial
    sums over interleaved elements (chain j takes j, j + chains, ...), added pairwise at the end.
    One running sum is a chain of dependent additions, one per 3-4 cycles; independent chains fill
    the adder's pipeline and the compilers turn them into one vector (a global average pool over
    169 pixels x 1000 channels measured 5x faster). The order of the additions differs from the
    sequential sum, as in any vectorised reduction (onnxruntime's included)."""
    chains = max(1, min(chains, length))
    full, tail = divmod(length, chains)
    accs = [kb.var("sum", dtype) for _ in range(chains)]
    stmts: list[Stmt] = [Declare(a, const(0.0, dtype)) for a in accs]
    stmts += kb.loops([full], lambda r: [Assign(a, a + load(r[0] * chains + j)) for j, a in enumerate(accs)],
                      prefix="r")
    stmts += [Assign(accs[j], accs[j] + load(const(full * chains + j, INDEX))) for j in range(tail)]
    terms: list[Expr] = list(accs)
    while len(terms) > 1:
        pairs = [terms[i] + terms[i + 1] for i in range(0, len(terms) - 1, 2)]
        terms = pairs + ([terms[-1]] if len(terms) % 2 else [])
    return stmts, terms[0]
