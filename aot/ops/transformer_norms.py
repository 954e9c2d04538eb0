"""The normalizations transformers use beside LayerNormalization: ai.onnx RMSNormalization
(opset 23), onnxruntime's SimplifiedLayerNormalization (RMSNorm, a contrib op in the ai.onnx
domain), and com.microsoft SkipLayerNormalization / SkipSimplifiedLayerNormalization (a residual
add, an optional bias, then LayerNorm or RMSNorm).

Each is one kernel over the rows of an (outer, normalised...) view: the skip forms first write
input + skip + bias into the output row (or into input_skip_bias_sum when it is wanted), then
read that row back for the statistics and the normalised store, so every pass is a loop over the
contiguous innermost axis, as LayerNormalization's kernel is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aot.ir.graph import Node, Tensor
from aot.ir.sizes import element_count
from aot.kernel.ir import INDEX, Declare, Expr, Stmt, binary, cast, const, unary
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import mark_outer, pays
from aot.lowering.registry import register
from aot.ops.attrs import fail, normalize_axis, required_input
from aot.ops.reduce import chained_sum

MS_DOMAIN = "com.microsoft"
# onnxruntime's default epsilon of the Skip forms (its schemas' kDefaultSkipLayerNormEpsilon).
SKIP_EPSILON = 1e-12
# Row-index (outer) -> statements that fill the row the statistics are taken over.
RowFill = Callable[[Expr], list[Stmt]]


@dataclass
class RowNorm:
    """What one row kernel computes: `src` rows (outer, *inner) normalised into `y`."""

    src: View
    y: View | None
    inner: Sequence[int]
    eps: float
    rms: bool  # RMSNorm: no centring, mean(x^2) instead of the variance
    scale: View | None = None  # broadcast to `inner`
    beta: View | None = None
    mean_out: View | None = None  # flat (outer,) views of the statistics outputs
    inv_out: View | None = None
    acc: str = "float32"  # the type the statistics are computed in
    chains: int = 1  # independent partial sums per reduction (the target's vector lanes)


def _norm_rows(kb: KernelBuilder, spec: RowNorm, outer: int, fill: RowFill | None = None) -> list[Stmt]:
    dt, y_dt = spec.acc, spec.src.buffer.dtype
    width = element_count(spec.inner)
    count = const(float(width), dt)
    # The statistics read each (contiguous) row as one run, summed in `chains` partial sums that
    # the compilers vectorise: a single running sum is one dependent addition after another.
    flat = View(spec.src.buffer, (outer, width), offset=spec.src.offset)

    def load(o: Expr, r: list[Expr]) -> Expr:
        value = spec.src.load([o, *r])
        return value if value.dtype == dt else cast(value, dt)

    def load_flat(o: Expr, i: Expr) -> Expr:
        value = flat.load([o, i])
        return value if value.dtype == dt else cast(value, dt)

    def row(idx: list[Expr]) -> list[Stmt]:
        o = idx[0]
        stmts: list[Stmt] = fill(o) if fill is not None else []
        mean, inv = kb.var("mean", dt), kb.var("inv", dt)
        if not spec.rms:
            summing, total = chained_sum(kb, lambda i: load_flat(o, i), width, dt, spec.chains)
            stmts += [*summing, Declare(mean, total / count)]

        def square(i: Expr) -> Expr:
            d = load_flat(o, i) if spec.rms else load_flat(o, i) - mean
            return d * d

        squaring, sq = chained_sum(kb, square, width, dt, spec.chains)
        stmts += [*squaring, Declare(inv, const(1.0, dt) / unary("sqrt", sq / count + const(spec.eps, dt)))]

        def store(r: list[Expr]) -> list[Stmt]:
            value = (load(o, r) if spec.rms else load(o, r) - mean) * inv
            if value.dtype != y_dt:
                value = cast(value, y_dt)
            if spec.scale is not None:
                value = value * spec.scale.load(r)
            if spec.beta is not None:
                value = value + spec.beta.load(r)
            assert spec.y is not None
            return [spec.y.store([o, *r], value)]

        if spec.y is not None:
            stmts += kb.loops(spec.inner, store, prefix="r")
        if spec.mean_out is not None:
            stmts.append(spec.mean_out.store([o], _as(const(0.0, dt) if spec.rms else mean, spec.mean_out)))
        if spec.inv_out is not None:
            stmts.append(spec.inv_out.store([o], _as(inv, spec.inv_out)))
        return stmts

    return kb.loops([outer], row)


def _as(value: Expr, view: View) -> Expr:
    return value if value.dtype == view.buffer.dtype else cast(value, view.buffer.dtype)


def _outputs(node: Node, count: int) -> list[Tensor | None]:
    return (list(node.outputs) + [None] * count)[:count]


def _float_input(node: Node, index: int, what: str) -> Tensor:
    t = required_input(node, index, what)
    if t.dtype.kind != "f":
        raise fail(node, f"input {what} has dtype {t.dtype}; {node.op_type} is implemented for float types")
    return t


def _broadcast(node: Node, kb: KernelBuilder, t: Tensor | None, shape: Sequence[int], *, what: str) -> View | None:
    if t is None:
        return None
    if t.dtype.kind != "f":
        raise fail(node, f"input {what} has dtype {t.dtype}; expected a float type")
    try:
        return kb.input(t).broadcast_to(shape)
    except ValueError as e:
        raise fail(node, f"{what} {list(t.shape)} does not broadcast to the normalised shape {list(shape)}: {e}") from e


def _stat_view(node: Node, kb: KernelBuilder, t: Tensor | None, outer: int) -> View | None:
    if t is None:
        return None
    if t.size != outer:
        raise fail(node, f"statistics output {t.name!r} has {t.size} elements, expected {outer}")
    return View(kb.output(t).buffer, (outer,))


def _emit(ctx: LoweringContext, kb: KernelBuilder, body: list[Stmt], size: int) -> None:
    # Rows are independent: the row loop may be split over threads.
    ctx.emit(kb, mark_outer(body) if pays(ctx, size) else body)


@register("RMSNormalization")
@register("SimplifiedLayerNormalization")
def lower_rms_norm(node: Node, ctx: LoweringContext) -> None:
    """Y = X / sqrt(mean(X^2 over the axes from `axis` on) + epsilon) * scale; onnxruntime's
    SimplifiedLayerNormalization also gives the inverse root (inv_std_var)."""
    x = _float_input(node, 0, "X")
    scale = _float_input(node, 1, "scale")
    y, inv_t = _outputs(node, 2)
    if node.op_type == "RMSNormalization":
        inv_t = None
    if x.rank == 0:
        raise fail(node, "input X is a scalar; it needs rank >= 1")
    axis = normalize_axis(node, int(node.attr("axis", -1)), x.rank)
    stash = int(node.attr("stash_type", 1))
    if stash not in (1, 11):
        raise fail(node, f"stash_type {stash} is not supported (1: float32, 11: float64)")
    outer, inner = element_count(x.shape[:axis]), x.shape[axis:]
    kb = ctx.builder(node)
    spec = RowNorm(src=View(kb.input(x).buffer, (outer, *inner)),
                   y=View(kb.output(y).buffer, (outer, *inner)) if y is not None else None,
                   inner=inner, eps=float(node.attr("epsilon", 1e-5)), rms=True,
                   scale=_broadcast(node, kb, scale, inner, what="scale") if y is not None else None,
                   inv_out=_stat_view(node, kb, inv_t, outer), acc="float32" if stash == 1 else "float64",
                   chains=ctx.tiles.lanes)
    _emit(ctx, kb, _norm_rows(kb, spec, outer), x.size)


@register("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain=MS_DOMAIN)
def lower_skip_norm(node: Node, ctx: LoweringContext) -> None:
    """s = input + skip (+ bias); output = LayerNorm(s) * gamma (+ beta), or RMSNorm for the
    simplified form, over the last axis; optional mean, inv_std_var and s itself."""
    simplified = node.op_type == "SkipSimplifiedLayerNormalization"
    x, skip = _float_input(node, 0, "input"), _float_input(node, 1, "skip")
    gamma = _float_input(node, 2, "gamma")
    beta, bias = (None, node.input(3)) if simplified else (node.input(3), node.input(4))
    y, mean_t, inv_t, sum_t = _outputs(node, 4)
    if x.rank not in (2, 3):
        raise fail(node, f"input has shape {list(x.shape)}; expected [batch, sequence, hidden] or [tokens, hidden]")
    if any(t.dtype != x.dtype for t in (skip, gamma, *(t for t in (beta, bias) if t is not None))):
        raise fail(node, "input, skip, gamma, beta and bias must have one dtype")
    hidden, outer = x.shape[-1], x.size // max(x.shape[-1], 1)
    for t, what in ((gamma, "gamma"), (beta, "beta"), (bias, "bias")):
        if t is not None and t.shape != (hidden,):
            raise fail(node, f"{what} has shape {list(t.shape)}; expected [{hidden}]")
    if skip.shape not in (x.shape, x.shape[1:], (1, *x.shape[1:])):
        raise fail(node, f"skip has shape {list(skip.shape)}; expected {list(x.shape)} or the same without batch")
    eps = float(node.attr("epsilon", SKIP_EPSILON))
    if eps < 0:
        raise fail(node, f"epsilon {eps} is negative")
    kb = ctx.builder(node)
    xv = View(kb.input(x).buffer, (outer, hidden))
    # skip of [sequence, hidden] or [1, sequence, hidden] repeats for each batch, as onnxruntime reads it.
    kv = View(kb.input(skip).buffer, (skip.size // hidden, hidden))
    bv = View(kb.input(bias).buffer, (hidden,)) if bias is not None else None
    target = sum_t if sum_t is not None else y
    if target is None:
        raise fail(node, "none of its outputs is used")
    sv = View(kb.output(target).buffer, (outer, hidden))
    repeat = skip.size // hidden

    def fill(o: Expr) -> list[Stmt]:
        def add(r: list[Expr]) -> list[Stmt]:
            row = o if repeat == outer else binary("mod", o, const(repeat, INDEX))
            value = xv.load([o, r[0]]) + kv.load([row, r[0]])
            return [sv.store([o, r[0]], value + bv.load(r) if bv is not None else value)]

        return kb.loops([hidden], add, prefix="r")

    spec = RowNorm(src=sv, y=View(kb.output(y).buffer, (outer, hidden)) if y is not None else None,
                   inner=[hidden], eps=eps, rms=simplified,
                   scale=View(kb.input(gamma).buffer, (hidden,)) if y is not None else None,
                   beta=View(kb.input(beta).buffer, (hidden,)) if y is not None and beta is not None else None,
                   mean_out=_stat_view(node, kb, mean_t, outer), inv_out=_stat_view(node, kb, inv_t, outer),
                   acc=x.dtype.name, chains=ctx.tiles.lanes)
    _emit(ctx, kb, _norm_rows(kb, spec, outer, fill), x.size)
