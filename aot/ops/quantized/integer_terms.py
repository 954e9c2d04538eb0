"""What the integer ops (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul) share: checking
their quantised operands, reading scales and zero points as kernel expressions, preparing
constant weights, and requantising an int32 accumulator.

Every one of them computes acc = sum (x - x_zero_point) * (w - w_zero_point) in int32. With
constant weights the lowerings store w - w_zero_point (narrow_weights) and fold the activation's
zero point into an int32 bias, acc = sum x * (w - w_zero_point) - x_zero_point * sum (w -
w_zero_point): then the inner loop multiplies two narrow integers and nothing else, which is
the dot product the compilers vectorise (pmaddwd, vpdpbusd, sdot).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.intrinsics import TapProducts, WidenAdd
from aot.kernel.ir import (
    INDEX,
    Assign,
    Buffer,
    Const,
    Declare,
    Expr,
    Load,
    MulAdd,
    Splat,
    Stmt,
    Var,
    VecLoad,
    VecStore,
    cast,
    const,
    unary,
)
from aot.lowering.builder import KernelBuilder
from aot.ops.attrs import fail
from aot.ops.quantized.arithmetic import clamped_round, saturate

ACCUMULATOR = "int32"
OPERAND_DTYPES = ("int8", "uint8")  # what the integer ops' quantised inputs and outputs may be
PerIndex = Callable[[Expr], Expr]  # an output channel, row or column -> that one's value


def check_operand(node: Node, t: Tensor, what: str) -> None:
    if t.dtype.name not in OPERAND_DTYPES:
        raise fail(node, f"{what} {t.name!r} has dtype {t.dtype}; {node.op_type} is implemented for int8 and uint8")


def check_zero_point(node: Node, zero_point: Tensor | None, of: Tensor, what: str) -> None:
    if zero_point is not None and zero_point.dtype != of.dtype:
        raise fail(node, f"{what} {zero_point.name!r} has dtype {zero_point.dtype}, {of.name!r} {of.dtype}")


def check_scale(node: Node, scale: Tensor, what: str) -> None:
    if scale.dtype != np.float32:
        raise fail(node, f"{what} {scale.name!r} has dtype {scale.dtype}; only float32 scales are supported")


def check_per_tensor(node: Node, t: Tensor | None, what: str) -> None:
    if t is not None and t.size != 1:
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; it must be a single value (per tensor)")


def check_per_channel(node: Node, t: Tensor | None, count: int, what: str) -> None:
    """A scale or zero point with one value, or one per output channel (a vector of `count`)."""
    if t is not None and t.size != 1 and (t.rank != 1 or t.shape[0] != count):
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; it must be a single value or [{count}] "
                         "(one per output channel)")


def uniform(values: np.ndarray) -> bool:
    return values.size > 0 and bool(np.all(values == values.reshape(-1)[0]))


def scalar(kb: KernelBuilder, t: Tensor | None, default: float | int, dtype: str) -> Expr:
    """A per-tensor scale or zero point (checked to hold one value): a literal when it is a
    compile-time constant (or omitted: `default`), else its element loaded at run time."""
    if t is None:
        return const(default, dtype)
    if t.is_constant:
        assert t.data is not None
        return const(t.data.reshape(-1)[0].item(), t.dtype.name)
    return Load(kb.input(t).buffer, const(0, INDEX))


def per_channel(kb: KernelBuilder, t: Tensor | None, default: float | int, dtype: str) -> PerIndex:
    """A scale or zero point with one value or one per channel (checked): the value of a channel."""
    if t is None or t.size == 1 or (t.is_constant and uniform(np.asarray(t.data))):
        value = scalar(kb, t, default, dtype)
        return lambda c: value
    view = kb.input(t)
    return lambda c: view.load([c])


def widened(e: Expr) -> Expr:
    return cast(e, ACCUMULATOR)


def minus(value: Expr, zero_point: Expr) -> Expr:
    """value - zero_point in the accumulator's type (value itself when the zero point is 0)."""
    if isinstance(zero_point, Const) and zero_point.value == 0:
        return widened(value)
    return widened(value) - widened(zero_point)


# int8 activations of the packed kernels are read as uint8 (x + 128, zero point + 128: the same
# x - x_zero_point): unsigned x signed bytes is the product x86's dot-product instruction
# (vpdpbusd) multiplies; int8 x int8 gcc 12 vectorised with widening shuffles only, 4x slower
# (QLinearConv 64 -> 64 channels 3x3; QLinearMatMul 128x768x768 likewise).
UNSIGNED_SHIFT = 128


def unsigned_byte(value: Expr) -> Expr:
    """An int8 value + 128, as uint8."""
    if isinstance(value, Const):
        return const(int(value.value) + UNSIGNED_SHIFT, "uint8")
    return cast(widened(value) + const(UNSIGNED_SHIFT, ACCUMULATOR), "uint8")


def signed_byte(value: Expr) -> Expr:
    """A uint8 value - 128 as int8 (an int8 value as it is): the signed bytes of PairDotAdd's
    activations, which keep x - x_zero_point when the zero point is shifted the same way."""
    if value.dtype == "int8":
        return value
    if isinstance(value, Const):
        return const(int(value.value) - UNSIGNED_SHIFT, "int8")
    return cast(widened(value) - const(UNSIGNED_SHIFT, ACCUMULATOR), "int8")


def narrow_weights(values: np.ndarray) -> np.ndarray:
    """Integer weights (w - w_zero_point, in int64) in the narrowest type that holds them all: int8
    for symmetric int8 weights (zero point 0), int16 for the others (-255..255)."""
    for dtype in ("int8", "uint8", "int16"):
        info = np.iinfo(dtype)
        if values.size == 0 or (int(values.min()) >= info.min and int(values.max()) <= info.max):
            return values.astype(dtype)
    return wrap_int32(values)


def wrap_int32(values: np.ndarray) -> np.ndarray:
    """int64 values modulo 2^32, as int32: the ops' accumulation wraps in 32 bits (ONNX: "may
    overflow if and only if in 32 bits"), so folded corrections do too."""
    return np.asarray(values, dtype=np.int64).astype(np.uint32).view(np.int32)


def output_multiplier(in_scale: np.ndarray, w_scale: np.ndarray, out_scale: np.ndarray) -> np.ndarray:
    """in_scale * w_scale / out_scale in float32, in that order, as onnxruntime computes the
    requantisation multiplier (broadcasting)."""
    return (np.asarray(in_scale, np.float32) * np.asarray(w_scale, np.float32)) / np.asarray(out_scale, np.float32)


def multiplier_expr(in_scale: Expr, w_scale: Expr, out_scale: Expr) -> Expr:
    """output_multiplier of scales read at run time, in the same order and type."""
    return (in_scale * w_scale) / out_scale


def requantize(acc: Expr, multiplier: Expr, zero_point: Expr, dtype: str, finite: bool = False) -> Expr:
    """saturate(round_half_to_even(float(acc) * multiplier) + zero_point): an int32 accumulator
    as the quantised output (`dtype`), as onnxruntime requantises (the rounding comes before the
    zero point is added; the ONNX reference rounds after, which differs on exact halves only).
    `finite`: every multiplier is a finite constant, so the value is never NaN (an infinite
    product saturates either way)."""
    scaled = cast(acc, "float32") * multiplier
    if finite:
        return clamped_round(scaled, zero_point, dtype)
    return saturate(unary("round_even", scaled) + cast(zero_point, "float32"), dtype)


def finite_constants(in_scale: Tensor, w_scale: Tensor, out_scale: Tensor) -> bool:
    """Whether the scales are constants whose requantisation multipliers (in * w / out, any
    pairing of their elements) are all finite."""
    if not all(t.is_constant for t in (in_scale, w_scale, out_scale)):
        return False
    a, b, c = (np.abs(np.asarray(t.data, np.float32).reshape(-1)) for t in (in_scale, w_scale, out_scale))
    with np.errstate(all="ignore"):
        largest = output_multiplier(a.max(initial=0), b.max(initial=0), c.min(initial=np.inf))
    return bool(np.isfinite(largest) and np.isfinite(a).all() and np.isfinite(b).all())


def channel_locals(kb: KernelBuilder, weights: Buffer, init: PerIndex, m: Expr, taps: int,
                   weight_type: str = ACCUMULATOR) -> tuple[list[Stmt], list[Var], Var]:
    """Output channel m's tap weights (as `weight_type`) and accumulator start as locals: their
    declarations, the weights' variables and the start's."""
    locals_ = [kb.var("w", weight_type) for _ in range(taps)]
    start = kb.var("start", ACCUMULATOR)
    decls: list[Stmt] = [Declare(v, cast(widened(Load(weights, m * taps + t)), weight_type))
                         for t, v in enumerate(locals_)]
    return [*decls, Declare(start, init(m))], locals_, start


def tap_sum(taps: list[Expr], weights: list[Var], start: Var, in_float: bool, pairs: bool = False) -> Expr:
    """start + the taps times their weights, as an int32 accumulator: summed in float32 by fused
    multiply-adds (exact integers: fused or not, the same sums) when `in_float`, else in int32;
    with `pairs` (int8 taps, int8 weights never -128) two taps' products summed in int16 first
    (at most 2 x 128 x 127), then added to the int32 sum."""
    if pairs:
        acc = start
        for k in range(0, len(taps) - 1, 2):
            pair = cast(taps[k], "int16") * cast(weights[k], "int16") + \
                cast(taps[k + 1], "int16") * cast(weights[k + 1], "int16")
            acc = acc + widened(pair)
        if len(taps) % 2:
            acc = acc + widened(taps[-1]) * widened(weights[-1])
        return acc
    if not in_float:
        acc: Expr = start
        for tap, w in zip(taps, weights):
            acc = acc + widened(tap) * w
        return acc
    total: Expr = taps[0] * weights[0]
    for tap, w in zip(taps[1:], weights[1:]):
        total = MulAdd(total, tap, w)
    return start + cast(total, ACCUMULATOR)


def tap_pair_vectors(kb: KernelBuilder, taps: list[VecLoad], weights: list[Var], start: Var, sums: Buffer,
                     at: Expr) -> list[Stmt]:
    """tap_sum's pairs for 8 pixels at once, stored as two int32x4 at sums[at] and sums[at + 4]:
    `taps` 8-byte VecLoads of int8, `weights` int8 (never -128). Each pair of taps is one
    TapProducts (vmull.s8 + vmlal.s8), added to the sums of pixels 0-3 and 4-7 by WidenAdd
    (vaddw.s16): the same int32 sums as tap_sum's, integer arithmetic being exact."""
    low, high = kb.var("sums", "int32x4"), kb.var("sums", "int32x4")
    body: list[Stmt] = [Declare(low, Splat(start, 4)), Declare(high, Splat(start, 4))]
    for k in range(0, len(taps), 2):
        second = (taps[k + 1], weights[k + 1]) if k + 1 < len(taps) else ()
        products = kb.var("products", "int16x8")
        body += [Declare(products, TapProducts(taps[k], weights[k], *second)),
                 Assign(low, WidenAdd(low, products, 0)), Assign(high, WidenAdd(high, products, 1))]
    return body + [VecStore(sums, at, low), VecStore(sums, at + 4, high)]
