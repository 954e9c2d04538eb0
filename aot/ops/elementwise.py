"""Elementwise ops: each op's scalar meaning as a kernel-IR expression (its "form"), applied
with numpy broadcasting by one generic loop builder.

The same forms are what fusion composes: an elementwise op that follows a Conv, Gemm, MatMul or
another elementwise op becomes part of that kernel's epilogue (see aot/lowering/fusion.py), so its
meaning is still written only here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import (
    INDEX,
    Expr,
    Stmt,
    binary,
    cast,
    const,
    eq,
    ge,
    gt,
    le,
    logical_and,
    logical_or,
    lt,
    maximum,
    minimum,
    select,
    unary,
)
from aot.lowering.builder import View, merge_groups
from aot.lowering.context import LoweringContext
from aot.lowering.forms import FORMS, Form, FormBuilder, ScalarFn
from aot.lowering.lane_loops import requantising_loop
from aot.lowering.parallel import mark_outer, pays
from aot.lowering.registry import register
from aot.ops.attrs import constant_input, fail


def elementwise(*op_types: str) -> Callable[[FormBuilder], FormBuilder]:
    """Register a form builder; the op's lowering is the generic elementwise kernel."""

    def decorate(builder: FormBuilder) -> FormBuilder:
        for op in op_types:
            FORMS[op] = builder
        register(*op_types)(lower_elementwise)
        return builder

    return decorate


def lower_elementwise(node: Node, ctx: LoweringContext) -> None:
    out = node.outputs[0]
    assert out is not None
    form = FORMS[node.qualified_op](node, ctx)
    emit_elementwise(ctx, node, form.inputs, out, form.fn)


def emit_elementwise(ctx: LoweringContext, node: Node, inputs: Sequence[Tensor], output: Tensor,
                     fn: ScalarFn) -> None:
    """out[idx] = epilogue(fn(in0[bcast idx], in1[bcast idx], ...)) over the output's shape."""
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    shape = output.shape
    views = [kb.input(t).broadcast_to(shape) for t in inputs]
    out = kb.output(final)
    side = epilogue.inputs
    if all(t.shape == shape or t.size == 1 for t in [*inputs, *side]):
        # Same shapes (or scalars broadcast to every element): one flat loop, easiest to vectorise.
        def flat(i: Expr, t: Tensor, v: View) -> Expr:
            return v.load_flat(const(0, INDEX) if t.shape != shape else i)

        def element(i: Expr) -> Stmt:
            return out.store_flat(i, epilogue.apply(fn([flat(i, t, v) for t, v in zip(inputs, views)]), flat_index=i))

        body = requantising_loop(kb, output.size, ctx.tiles.loops_in_vectors, element)
    else:
        groups = merge_groups(shape, [*views, out, *epilogue.views()])
        views, out = [v.merged(groups) for v in views], out.merged(groups)
        epilogue.merge_dimensions(groups)
        body = kb.loops(list(out.shape), lambda idx: [
            out.store(idx, epilogue.apply(fn([v.load(idx) for v in views]), idx))])
    # Every element is computed on its own: the outermost loop may be split over threads.
    ctx.emit(kb, mark_outer(body) if pays(ctx, output.size) else body)


# -- helpers ---------------------------------------------------------------------------------


def _f(x: Expr, value: float) -> Expr:
    return const(value, x.dtype)


def sigmoid(x: Expr) -> Expr:
    return _f(x, 1.0) / (_f(x, 1.0) + unary("exp", -x))


def leaky_relu(x: Expr, alpha: float) -> Expr:
    return select(lt(x, _f(x, 0.0)), x * _f(x, alpha), x)


def _x(node: Node, kinds: str = "f") -> Tensor:
    x = node.inputs[0]
    if x is None:
        raise fail(node, "missing input 0")
    if x.dtype.kind not in kinds:
        wanted = {"f": "float", "b": "bool", "fiu": "numeric", "fi": "signed numeric"}.get(kinds, kinds)
        raise fail(node, f"input {x.name!r} has dtype {x.dtype}; {node.op_type} is implemented for {wanted} types")
    return x


def _unary_form(fn: Callable[[Expr, Node], Expr], kinds: str = "f") -> FormBuilder:
    def build(node: Node, ctx: LoweringContext) -> Form:
        return Form([_x(node, kinds)], lambda v: fn(v[0], node))

    return build


# The activations below compute both sides of their selects (eager: a blend): exp, expm1 and
# log1p are polynomials (aot/kernel/transcendentals.py), and a lazy `?:` around one kept gcc's
# loop scalar on AVX2 and NEON. Their operands are computed for every lane anyway.


def _relu_part(x: Expr) -> Expr:
    """max(x, 0), NaN kept (x < 0 is false for NaN)."""
    return select(lt(x, _f(x, 0.0)), _f(x, 0.0), x, eager=True)


def _softplus(x: Expr) -> Expr:
    # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|), which is x + log1p(e^-x) for x > 0
    # (what onnxruntime computes) and log1p(e^x) otherwise, with one exp and one log1p.
    return _relu_part(x) + unary("log1p", unary("exp", -unary("abs", x)))


def _elu(x: Expr, alpha: float) -> Expr:
    return select(lt(x, _f(x, 0.0)), _f(x, alpha) * unary("expm1", x), x, eager=True)


def _celu(x: Expr, alpha: float) -> Expr:
    # max(0, x) + min(0, alpha * expm1(x / alpha)), NaN kept by both terms.
    negative = _f(x, alpha) * unary("expm1", x / _f(x, alpha))
    return _relu_part(x) + select(gt(negative, _f(x, 0.0)), _f(x, 0.0), negative, eager=True)


def _selu(x: Expr, alpha: float, gamma: float) -> Expr:
    return _f(x, gamma) * select(le(x, _f(x, 0.0)), _f(x, alpha) * unary("expm1", x), x, eager=True)


def _gelu(x: Expr, node: Node) -> Expr:
    half = _f(x, 0.5)
    if node.attr("approximate", "none") == "tanh":
        inner = _f(x, math.sqrt(2.0 / math.pi)) * (x + _f(x, 0.044715) * x * x * x)
        return half * x * (_f(x, 1.0) + unary("tanh", inner))
    return half * x * (_f(x, 1.0) + unary("erf", x * _f(x, 1.0 / math.sqrt(2.0))))


def _clamp01(x: Expr) -> Expr:
    return maximum(_f(x, 0.0), minimum(_f(x, 1.0), x))


_UNARY_FLOAT: dict[str, Callable[[Expr, Node], Expr]] = {
    "Relu": lambda x, n: select(lt(x, _f(x, 0.0)), _f(x, 0.0), x),
    "LeakyRelu": lambda x, n: leaky_relu(x, n.attr("alpha", 0.01)),
    "Sigmoid": lambda x, n: sigmoid(x),
    "Tanh": lambda x, n: unary("tanh", x),
    "Exp": lambda x, n: unary("exp", x),
    "Log": lambda x, n: unary("log", x),
    "Sqrt": lambda x, n: unary("sqrt", x),
    "Erf": lambda x, n: unary("erf", x),
    "Floor": lambda x, n: unary("floor", x),
    "Ceil": lambda x, n: unary("ceil", x),
    "Round": lambda x, n: unary("round_even", x),
    "Sin": lambda x, n: unary("sin", x),
    "Cos": lambda x, n: unary("cos", x),
    "Tan": lambda x, n: unary("tan", x),
    "Asin": lambda x, n: unary("asin", x),
    "Acos": lambda x, n: unary("acos", x),
    "Atan": lambda x, n: unary("atan", x),
    "Sinh": lambda x, n: unary("sinh", x),
    "Cosh": lambda x, n: unary("cosh", x),
    "Asinh": lambda x, n: unary("asinh", x),
    "Acosh": lambda x, n: unary("acosh", x),
    "Atanh": lambda x, n: unary("atanh", x),
    "Reciprocal": lambda x, n: _f(x, 1.0) / x,
    "Softplus": lambda x, n: _softplus(x),
    "Softsign": lambda x, n: x / (_f(x, 1.0) + unary("abs", x)),
    "Elu": lambda x, n: _elu(x, float(n.attr("alpha", 1.0))),
    "Celu": lambda x, n: _celu(x, float(n.attr("alpha", 1.0))),
    "Selu": lambda x, n: _selu(x, float(n.attr("alpha", 1.67326319217681884765625)),
                               float(n.attr("gamma", 1.05070102214813232421875))),
    "HardSigmoid": lambda x, n: _clamp01(_f(x, float(n.attr("alpha", 0.2))) * x + _f(x, float(n.attr("beta", 0.5)))),
    "HardSwish": lambda x, n: x * _clamp01(x * _f(x, 1.0 / 6.0) + _f(x, 0.5)),
    "Mish": lambda x, n: x * unary("tanh", _softplus(x)),
    "ThresholdedRelu": lambda x, n: select(gt(x, _f(x, float(n.attr("alpha", 1.0)))), x, _f(x, 0.0)),
    "Gelu": _gelu,
}
for _op, _fn in _UNARY_FLOAT.items():
    elementwise(_op)(_unary_form(_fn))

elementwise("Neg")(_unary_form(lambda x, n: -x, "fi"))
elementwise("Abs")(_unary_form(lambda x, n: unary("abs", x), "fiu"))
elementwise("Sign")(_unary_form(lambda x, n: unary("sign", x), "fiu"))
elementwise("Not")(_unary_form(lambda x, n: unary("not", x), "b"))
elementwise("IsNaN")(_unary_form(lambda x, n: unary("isnan", x)))


@elementwise("IsInf")
def _isinf(node: Node, ctx: LoweringContext) -> Form:
    neg, pos = int(node.attr("detect_negative", 1)), int(node.attr("detect_positive", 1))

    def fn(v: list[Expr]) -> Expr:
        if neg and pos:
            return unary("isinf", v[0])
        if neg:
            return unary("isneginf", v[0])
        if pos:
            return unary("isposinf", v[0])
        return const(False, "bool")

    return Form([_x(node)], fn)


# -- binary and variadic ---------------------------------------------------------------------

_ARITH = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}


def _two(node: Node) -> tuple[Tensor, Tensor]:
    a, b = node.input(0), node.input(1)
    if a is None or b is None:
        raise fail(node, "needs two inputs")
    if node.opset < 7 and node.attr("broadcast", 0) and node.attr("axis") is not None:
        raise fail(node, "legacy broadcast with axis (opset < 7) is not supported")
    return a, b


def _same_dtype(node: Node, tensors: Sequence[Tensor]) -> None:
    if len({t.dtype for t in tensors}) > 1:
        raise fail(node, f"inputs have different dtypes {sorted({str(t.dtype) for t in tensors})}")


@elementwise(*_ARITH)
def _arith(node: Node, ctx: LoweringContext) -> Form:
    a, b = _two(node)
    _same_dtype(node, [a, b])
    if a.dtype.kind == "b":
        raise fail(node, "arithmetic on bool tensors is not defined")
    op = _ARITH[node.op_type]
    # Integer Div truncates toward zero in ONNX (onnx's reference and onnxruntime), which is what
    # C's integer `/` does; a zero divisor is undefined in ONNX as it is in C.
    return Form([a, b], lambda v: binary(op, v[0], v[1]))


def _constant_scalar(t: Tensor) -> float | None:
    """The one value of a constant tensor of one element, else None."""
    if t.data is None or t.size != 1:
        return None
    return float(np.asarray(t.data).reshape(-1)[0])


def _sqrt_pow(x: Expr) -> Expr:
    # pow(x, 0.5) is sqrt(x) but for -0 (pow: +0; adding +0 turns sqrt's -0 into +0) and -inf
    # (pow: +inf, sqrt: NaN).
    root = unary("sqrt", x) + _f(x, 0.0)
    return select(eq(x, _f(x, -math.inf)), _f(x, math.inf), root, eager=True)


# Pow by a constant exponent without the C library's pow (a libm call per element, and no vector
# loop): multiplications, each correctly rounded, so within about an ulp of pow's result
# (x^3 and x^4 round twice), with pow's infinities and NaN.
_POW_BY_CONSTANT: dict[float, Callable[[Expr], Expr]] = {
    1.0: lambda x: x,
    2.0: lambda x: x * x,
    3.0: lambda x: x * x * x,
    4.0: lambda x: (x * x) * (x * x),
    0.5: _sqrt_pow,
    -1.0: lambda x: _f(x, 1.0) / x,
    -2.0: lambda x: _f(x, 1.0) / (x * x),
}


@elementwise("Pow")
def _pow(node: Node, ctx: LoweringContext) -> Form:
    a, b = _two(node)
    if a.dtype.kind not in "fiu" or b.dtype.kind not in "fiu":
        raise fail(node, f"Pow of {a.dtype} by {b.dtype} is not supported")
    if a.dtype.kind == "f":
        exponent = _constant_scalar(b)
        if exponent in _POW_BY_CONSTANT:
            return Form([a], lambda v: _POW_BY_CONSTANT[exponent](v[0]))  # type: ignore[index]
        return Form([a, b], lambda v: binary("pow", v[0], cast(v[1], v[0].dtype)))
    # Integer bases: computed in double (exact for every result an integer type can hold) and
    # converted back to the base's type, as the ONNX reference does.
    return Form([a, b], lambda v: cast(binary("pow", cast(v[0], "float64"), cast(v[1], "float64")), v[0].dtype))


@elementwise("Mod")
def _mod(node: Node, ctx: LoweringContext) -> Form:
    a, b = _two(node)
    _same_dtype(node, [a, b])
    if node.attr("fmod", 0) or a.dtype.kind == "u":
        # C's % / fmod: the sign of the dividend, which for unsigned types is also Python's %.
        return Form([a, b], lambda v: binary("mod", v[0], v[1]))

    def python_mod(v: list[Expr]) -> Expr:
        # fmod=0: the result takes the divisor's sign (like Python's %), unlike C's %.
        r = binary("mod", v[0], v[1])
        zero = const(0, r.dtype)
        fix = logical_and(binary("ne", r, zero), binary("ne", lt(r, zero), lt(v[1], zero)))
        return select(fix, r + v[1], r)

    return Form([a, b], python_mod)


@elementwise("PRelu")
def _prelu(node: Node, ctx: LoweringContext) -> Form:
    x, slope = _two(node)
    _same_dtype(node, [x, slope])
    if slope.rank == 1 and x.rank > 2 and slope.size == x.shape[1] and not _broadcasts(slope.shape, x.shape):
        # PRelu before opset 7 (kept by exporters that upgrade the opset number only) gives one
        # slope per channel (axis 1), which numpy broadcasting would align with the last axis.
        per_channel = ctx.new_tensor(f"{slope.name}__per_channel", slope.dtype, (slope.size,) + (1,) * (x.rank - 2))
        ctx.alias(per_channel, slope)
        slope = per_channel
    return Form([x, slope], lambda v: select(lt(v[0], const(0, v[0].dtype)), v[0] * v[1], v[0]))


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    return len(small) <= len(big) and all(s in (1, b) for s, b in zip(reversed(small), reversed(big)))


_COMPARE = {"Equal": eq, "Greater": gt, "GreaterOrEqual": ge, "Less": lt, "LessOrEqual": le}


@elementwise(*_COMPARE)
def _compare(node: Node, ctx: LoweringContext) -> Form:
    a, b = _two(node)
    _same_dtype(node, [a, b])
    compare = _COMPARE[node.op_type]
    return Form([a, b], lambda v: compare(v[0], v[1]))


_LOGIC = {"And": logical_and, "Or": logical_or, "Xor": lambda a, b: binary("xor", a, b)}


@elementwise(*_LOGIC)
def _logic(node: Node, ctx: LoweringContext) -> Form:
    a, b = _two(node)
    if a.dtype.kind != "b" or b.dtype.kind != "b":
        raise fail(node, f"{node.op_type} needs bool inputs, got {a.dtype} and {b.dtype}")
    op = _LOGIC[node.op_type]
    return Form([a, b], lambda v: op(v[0], v[1]))


def _variadic(node: Node) -> list[Tensor]:
    inputs = [t for t in node.inputs if t is not None]
    if not inputs:
        raise fail(node, f"{node.op_type} needs at least one input")
    _same_dtype(node, inputs)
    return inputs


@elementwise("Sum", "Mean", "Max", "Min")
def _variadic_form(node: Node, ctx: LoweringContext) -> Form:
    """Variadic ops with numpy broadcasting, folded left to right like the ONNX reference.
    (Caffe2-era exporters write residual adds as Sum.)"""
    inputs = _variadic(node)
    op = {"Sum": "add", "Mean": "add", "Max": "max", "Min": "min"}[node.op_type]

    def fn(v: list[Expr]) -> Expr:
        acc = v[0]
        for term in v[1:]:
            acc = binary(op, acc, term)
        return acc / const(float(len(v)), acc.dtype) if node.op_type == "Mean" else acc

    return Form(inputs, fn)


@elementwise("Where")
def _where(node: Node, ctx: LoweringContext) -> Form:
    cond, a, b = node.input(0), node.input(1), node.input(2)
    if cond is None or a is None or b is None:
        raise fail(node, "Where needs condition, X and Y")
    if cond.dtype.kind != "b":
        raise fail(node, f"condition has dtype {cond.dtype}, expected bool")
    _same_dtype(node, [a, b])
    return Form([cond, a, b], lambda v: select(binary("ne", v[0], const(False, "bool")), v[1], v[2]))


_CAST_TARGETS = {"float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "bool"}


@elementwise("Cast", "CastLike")
def _cast(node: Node, ctx: LoweringContext) -> Form:
    x, out = node.input(0), node.outputs[0]
    assert out is not None
    if x is None:
        raise fail(node, "missing input")
    target = out.dtype.name
    if target not in _CAST_TARGETS or x.dtype.name not in _CAST_TARGETS:
        raise fail(node, f"cast from {x.dtype} to {out.dtype} is not supported")
    if node.attr("saturate", 1) == 0 and target.startswith("float8"):
        raise fail(node, "float8 casts are not supported")
    return Form([x], lambda v: cast(v[0], target))


@elementwise("Clip")
def _clip(node: Node, ctx: LoweringContext) -> Form:
    x = _x(node, "fiu")
    if node.opset < 11:
        lo, hi = node.attr("min"), node.attr("max")
    else:
        lo, hi = _clip_bound(node, 1, "min"), _clip_bound(node, 2, "max")
    # Bounds known at compile time become literals; bounds fed at run time are scalar inputs that
    # broadcast over x, loaded by the same elementwise loop.
    runtime = [b for b in (lo, hi) if isinstance(b, Tensor)]
    for b in runtime:
        if b.dtype != x.dtype:
            raise fail(node, f"bound {b.name!r} has dtype {b.dtype}, input {x.dtype}")

    def clip(v: list[Expr]) -> Expr:
        y = v[0]
        loaded = iter(v[1:])
        for bound, fn in ((lo, maximum), (hi, minimum)):
            if bound is None:
                continue
            y = fn(y, next(loaded) if isinstance(bound, Tensor) else const(bound, y.dtype))
        return y

    return Form([x, *runtime], clip)


def _clip_bound(node: Node, index: int, what: str) -> float | int | Tensor | None:
    """Clip-11+ min/max: omitted (None), a compile-time scalar, or a scalar tensor read at run time."""
    t = node.input(index)
    if t is None:
        return None
    if t.size != 1:
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; it must be a scalar")
    if t.is_constant:
        value = constant_input(node, index, what)
        assert value is not None
        return value.reshape(-1)[0].item()
    return t


@register("Identity", "Dropout")
def lower_identity(node: Node, ctx: LoweringContext) -> None:
    """Inference-mode Dropout is Identity; its optional mask output is all true."""
    x, out = node.inputs[0], node.outputs[0]
    assert x is not None
    if node.op_type == "Dropout" and node.input(2) is not None:
        training = constant_input(node, 2, "training_mode")
        if training is not None and bool(training.reshape(-1)[0]):
            raise fail(node, "training_mode=true is not supported (inference only)")
    if out is not None:
        ctx.alias(out, x)
    mask = node.outputs[1] if len(node.outputs) > 1 else None
    if mask is not None:
        kb = ctx.builder(node)
        view = kb.output(mask)
        true = cast(const(1, "bool"), mask.dtype.name)
        ctx.emit(kb, kb.loops([mask.size], lambda i: [view.store_flat(i[0], true)]))
