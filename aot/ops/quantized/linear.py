"""QuantizeLinear and DequantizeLinear as elementwise forms.

Being forms, they fuse like any elementwise op: a QuantizeLinear after a float Conv becomes that
kernel's epilogue (the Conv writes int8 straight away), and a DequantizeLinear before one reads
int8 into the kernel that consumes it.

Scale and zero point are per tensor (one value), per axis (one per index along `axis`) or, from
opset 21, per block of `block_size` indices along `axis`. Compile-time values become literals
(per tensor) or constants shaped to broadcast along the axis; values fed at run time are read as
views of the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, Stmt, const
from aot.lowering.builder import View
from aot.lowering.context import LoweringContext
from aot.lowering.forms import FORMS, Form, FormBuilder, FormContext
from aot.lowering.registry import register
from aot.ops.attrs import fail, normalize_axis, required_input
from aot.ops.elementwise import lower_elementwise
from aot.ops.quantized.arithmetic import DEQUANTIZABLE, QUANTIZED_RANGES, dequantize, quantize
from aot.ops.quantized.weights import kept_quantized

Operand = Callable[[list[Expr]], Expr]  # the loaded form inputs -> this operand's value


@dataclass
class _Operands:
    """The form's inputs (x first) and how scale and zero point are read from them."""

    inputs: list[Tensor]

    def literal(self, value: float | int, dtype: str) -> Operand:
        return lambda v: const(value, dtype)

    def loaded(self, tensor: Tensor) -> Operand:
        position = len(self.inputs)
        self.inputs.append(tensor)
        return lambda v: v[position]


def _quantization_param(node: Node, ctx: FormContext, operands: _Operands, index: int, what: str,
                        x: Tensor, default: tuple[float | int, str]) -> Operand:
    """Scale (index 1) or zero point (index 2) as an operand broadcasting over x."""
    t = node.input(index)
    if t is None:
        return operands.literal(*default)
    if t.size == 1 and t.rank <= 1:
        if t.is_constant:
            assert t.data is not None
            return operands.literal(t.data.reshape(-1)[0].item(), t.dtype.name)
        return operands.loaded(t)
    axis = normalize_axis(node, int(node.attr("axis", 1)), x.rank)
    block = int(node.attr("block_size", 0))
    trailing = [1] * (x.rank - 1 - axis)
    if block > 0:
        return operands.loaded(_blocked(node, ctx, t, what, x, axis, block))
    if t.rank != 1 or t.shape[0] != x.shape[axis]:
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; per-axis quantization along axis {axis} "
                         f"needs [{x.shape[axis]}]")
    shape = [t.shape[0], *trailing]
    if t.is_constant:
        assert t.data is not None
        return operands.loaded(ctx.constant(t.data.reshape(shape), f"{t.name}_per_axis"))
    view = ctx.new_tensor(f"{t.name}_per_axis", t.dtype, shape)
    ctx.alias(view, t)
    return operands.loaded(view)


def _blocked(node: Node, ctx: FormContext, t: Tensor, what: str, x: Tensor, axis: int, block: int) -> Tensor:
    """A blocked scale or zero point expanded to x's shape (each value repeated over its block)."""
    blocks = -(-x.shape[axis] // block)
    wanted = tuple(blocks if d == axis else n for d, n in enumerate(x.shape))
    if t.shape != wanted:
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; blocks of {block} along axis {axis} "
                         f"need {list(wanted)}")
    if not t.is_constant:  # lower_quantization reads it in a loop of its own
        raise fail(node, f"blocked {what} {t.name!r} fed at run time cannot fuse into another kernel")
    assert t.data is not None
    expanded = np.repeat(t.data, block, axis=axis).take(range(x.shape[axis]), axis=axis)
    return ctx.constant(np.ascontiguousarray(expanded), f"{t.name}_blocks")


def _check_scale(node: Node) -> Tensor:
    scale = required_input(node, 1, "scale")
    if scale.dtype != np.float32:
        raise fail(node, f"scale {scale.name!r} has dtype {scale.dtype}; only float32 scales are supported")
    return scale


def _quantization_op(op_type: str) -> Callable[[FormBuilder], FormBuilder]:
    """Register a form and the lowering below for it."""
    def decorate(builder: FormBuilder) -> FormBuilder:
        FORMS[op_type] = builder
        register(op_type)(lower_quantization)
        return builder

    return decorate


def lower_quantization(node: Node, ctx: LoweringContext) -> None:
    """The generic elementwise kernel, except for blocks of scales fed at run time: a form cannot
    index those (element i of x reads scale element i // block_size along the axis)."""
    x = required_input(node, 0, "x")
    out = node.outputs[0]
    if node.op_type == "DequantizeLinear" and kept_quantized(node) and out is not None \
            and not ctx.graph.is_output(out):
        return  # its readers take the int8 weights themselves (aot/ops/quantized/weights.py)
    block = int(node.attr("block_size", 0))
    if block <= 0 or all(t is None or t.is_constant for t in (node.input(1), node.input(2))):
        lower_elementwise(node, ctx)
        return
    axis = normalize_axis(node, int(node.attr("axis", 1)), x.rank)
    assert out is not None
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    xv, yv = kb.input(x), kb.output(final)
    given = [node.input(1), node.input(2)]
    for t in given:
        if t is not None and t.rank != x.rank:
            raise fail(node, f"blocked {t.name!r} has rank {t.rank}, x {x.rank}")
    params = [kb.input(t) if t is not None else None for t in given]

    def value(view: View | None, idx: list[Expr], default: Expr) -> Expr:
        if view is None:
            return default
        blocked = [i / const(block, INDEX) if d == axis else i for d, i in enumerate(idx)]  # C division: i >= 0
        return view.load(blocked)

    def body(idx: list[Expr]) -> list[Stmt]:
        scale = value(params[0], idx, const(1.0, "float32"))
        if node.op_type == "QuantizeLinear":
            zp = value(params[1], idx, const(0, out.dtype.name))
            result = quantize(xv.load(idx), scale, zp, out.dtype.name)
        else:
            result = dequantize(xv.load(idx), scale, value(params[1], idx, const(0, x.dtype.name)))
        return [yv.store(idx, epilogue.apply(result, idx))]

    ctx.emit(kb, kb.loops(x.shape, body))


@_quantization_op("QuantizeLinear")
def _quantize_linear(node: Node, ctx: FormContext) -> Form:
    x, out = required_input(node, 0, "x"), node.outputs[0]
    assert out is not None
    _check_scale(node)
    target = out.dtype.name
    if target not in QUANTIZED_RANGES:
        raise fail(node, f"quantizing to {out.dtype} is not supported (int8, uint8, int16 and uint16 are)")
    if x.dtype not in (np.float32, np.int32):
        raise fail(node, f"input {x.name!r} has dtype {x.dtype}; QuantizeLinear is implemented for float32 and int32")
    zero_point = node.input(2)
    if zero_point is not None and zero_point.dtype != out.dtype:
        raise fail(node, f"zero point {zero_point.name!r} has dtype {zero_point.dtype}, the output {out.dtype}")
    operands = _Operands([x])
    scale = _quantization_param(node, ctx, operands, 1, "scale", x, (1.0, "float32"))
    zp = _quantization_param(node, ctx, operands, 2, "zero point", x, (0, target))
    return Form(operands.inputs, lambda v: quantize(v[0], scale(v), zp(v), target))


@_quantization_op("DequantizeLinear")
def _dequantize_linear(node: Node, ctx: FormContext) -> Form:
    x, out = required_input(node, 0, "x"), node.outputs[0]
    assert out is not None
    scale_tensor = _check_scale(node)
    if x.dtype.name not in DEQUANTIZABLE:
        raise fail(node, f"input {x.name!r} has dtype {x.dtype}; DequantizeLinear is implemented for "
                         f"{', '.join(sorted(DEQUANTIZABLE))}")
    zero_point = node.input(2)
    if zero_point is not None and zero_point.dtype != x.dtype:
        raise fail(node, f"zero point {zero_point.name!r} has dtype {zero_point.dtype}, the input {x.dtype}")
    if out.dtype != scale_tensor.dtype:
        raise fail(node, f"output dtype {out.dtype} differs from the scale's {scale_tensor.dtype}")
    operands = _Operands([x])
    scale = _quantization_param(node, ctx, operands, 1, "scale", x, (1.0, "float32"))
    zp = _quantization_param(node, ctx, operands, 2, "zero point", x, (0, x.dtype.name))
    return Form(operands.inputs, lambda v: dequantize(v[0], scale(v), zp(v)))
