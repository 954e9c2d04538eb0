"""DynamicQuantizeLinear: x (float32) to uint8 with a scale and zero point computed from x itself.

As the ONNX spec and its reference compute them:
    lo, hi = min(0, min(x)), max(0, max(x))      (the range always holds 0)
    y_scale = (hi == lo ? 1 : hi - lo) / 255
    y_zero_point = round_half_to_even(clamp(0 - lo / y_scale, 0, 255))
    y = QuantizeLinear(x, y_scale, y_zero_point)
One kernel: the reduction, the two scalars, then the elementwise quantisation (arithmetic.py).
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Assign, Declare, Expr, Stmt, Store, cast, const, eq, maximum, minimum, select, unary
from aot.lowering.builder import KernelBuilder
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, required_input
from aot.ops.quantized.arithmetic import QUANTIZED_RANGES, quantize

REAL = "float32"
TARGET = "uint8"


@register("DynamicQuantizeLinear")
def lower_dynamic_quantize_linear(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "x")
    if x.dtype != np.float32:
        raise fail(node, f"input {x.name!r} has dtype {x.dtype}; DynamicQuantizeLinear is implemented for float32")
    outputs = [node.outputs[i] if i < len(node.outputs) else None for i in range(3)]
    for t, dtype in zip(outputs, (TARGET, REAL, TARGET)):
        if t is not None and t.dtype.name != dtype:
            raise fail(node, f"output {t.name!r} has dtype {t.dtype}; DynamicQuantizeLinear gives {dtype}")
    y, y_scale, y_zero_point = outputs
    kb = ctx.builder(node)
    xv = kb.input(x)
    lo, hi = kb.var("lo", REAL), kb.var("hi", REAL)
    stmts: list[Stmt] = [Declare(lo, const(0.0, REAL)), Declare(hi, const(0.0, REAL))]
    # Starting both at 0 takes min(0, min(x)) and max(0, max(x)); the new value goes first so a
    # NaN in x propagates (the IR's min and max return their first operand when it is NaN).
    stmts += kb.loops([x.size], lambda i: [Assign(lo, minimum(xv.load_flat(i[0]), lo)),
                                           Assign(hi, maximum(xv.load_flat(i[0]), hi))], prefix="r")
    qmin, qmax = QUANTIZED_RANGES[TARGET]
    scale, zero_point = kb.var("scale", REAL), kb.var("zero_point", TARGET)
    span = select(eq(hi, lo), const(1.0, REAL), hi - lo)
    initial = const(float(qmin), REAL) - lo / scale
    clamped = maximum(const(float(qmin), REAL), minimum(const(float(qmax), REAL), initial))
    stmts += [Declare(scale, span / const(float(qmax - qmin), REAL)),
              Declare(zero_point, cast(unary("round_even", clamped), TARGET))]
    stmts += _store_scalar(kb, y_scale, scale) + _store_scalar(kb, y_zero_point, zero_point)
    if y is not None:
        yv = kb.output(y)
        stmts += kb.loops([x.size], lambda i: [yv.store_flat(i[0], quantize(xv.load_flat(i[0]), scale, zero_point,
                                                                             TARGET))], prefix="i")
    ctx.emit(kb, stmts)


def _store_scalar(kb: KernelBuilder, t: Tensor | None, value: Expr) -> list[Stmt]:
    if t is None:
        return []
    return [Store(kb.output(t).buffer, const(0, INDEX), value)]

