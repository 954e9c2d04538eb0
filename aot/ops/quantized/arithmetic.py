"""The integer <-> real mapping of ONNX quantisation, written once for every quantised op.

ONNX defines it as
    QuantizeLinear:   q = saturate(round_half_to_even(x / scale) + zero_point)
    DequantizeLinear: x = (q - zero_point) * scale
with the real side float32. These helpers build those expressions in kernel IR; the ops of this
package (and the fused integer kernels) only decide where scale and zero point come from.
"""

from __future__ import annotations

from aot.kernel.ir import Expr, cast, const, ge, gt, lt, minimum, select, unary

# The integer types ONNX quantises to, and their saturation ranges.
QUANTIZED_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
}
# DequantizeLinear also reads int32 (biases quantised with scale = x_scale * w_scale).
DEQUANTIZABLE = {*QUANTIZED_RANGES, "int32"}


def saturate(value: Expr, dtype: str) -> Expr:
    """`value` (a float holding an integer) clamped to `dtype`'s range and converted to it. The
    clamp comes first: converting an out-of-range float, or NaN, to an integer is undefined in C,
    so NaN (from a NaN input or a zero scale) becomes the least value, as -inf does."""
    lo, hi = (const(float(v), value.dtype) for v in QUANTIZED_RANGES[dtype])
    return cast(select(ge(value, lo), minimum(value, hi), lo, eager=True), dtype)


def clamped_round(value: Expr, zero_point: Expr, dtype: str) -> Expr:
    """saturate(round_half_to_even(value) + zero_point) for a value that is never NaN (an int32 sum
    times a finite constant), clamped first and added in int32: rounding is monotonic and keeps
    integers, so clamping value to [lo - zero_point, hi - zero_point] before it is the same as
    saturating after, and the rounded value then converts to int32 in range. The float clamps
    are one compare and one pick each (a < b ? a : b: min's own shape, x86's minps); the rounding
    and the conversion side by side are one instruction on AVX-512 and aarch64 (cvtps2dq with
    its rounding mode, fcvtns), and the zero point is an integer add: 7 instructions per
    16 outputs on AVX-512 where rounding, adding and clamping in float took 9. The clamps' values
    are numbers, so aarch64 takes fminnm and fmaxnm, one instruction each."""
    shift = cast(zero_point, value.dtype)
    lo, hi = (const(float(v), value.dtype) - shift for v in QUANTIZED_RANGES[dtype])
    below = select(lt(hi, value), hi, value, eager=True, numbers=True)
    inside = select(gt(below, lo), below, lo, eager=True, numbers=True)
    return cast(cast(unary("round_even", inside), "int32") + cast(zero_point, "int32"), dtype)


def quantize(x: Expr, scale: Expr, zero_point: Expr, dtype: str) -> Expr:
    """ONNX QuantizeLinear of one element: x and scale float32, zero_point of `dtype`."""
    real = x if x.dtype == scale.dtype else cast(x, scale.dtype)
    rounded = unary("round_even", real / scale)
    return saturate(rounded + cast(zero_point, scale.dtype), dtype)


def dequantize(q: Expr, scale: Expr, zero_point: Expr) -> Expr:
    """ONNX DequantizeLinear of one element, in scale's float type. The subtraction is done in
    float, as the ONNX reference does: int32 q - zero_point can overflow."""
    real = scale.dtype
    return (cast(q, real) - cast(zero_point, real)) * scale
