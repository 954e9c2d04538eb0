"""Shape, Size, Constant, ConstantOfShape and Range.

The frontend folds these into initializers whenever their inputs are known (which, for a static
graph, is nearly always). A model that still has them after folding is lowered here: Shape, Size
and Constant are compile-time data, so their output becomes a constant tensor (no kernel);
ConstantOfShape fills its output in a loop and Range computes start + i * delta, both without
materialising the values at compile time. Sizes come from the outputs' static shapes (as for
Reshape); size inputs known at compile time are checked against them.
"""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import INDEX, Expr, cast, const
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import constant_ints, fail, required_input


def _first_output(node: Node) -> Tensor:
    y = node.outputs[0] if node.outputs else None
    assert y is not None  # pruning removes nodes whose outputs are all unread
    return y


def _bind_constant(node: Node, ctx: LoweringContext, y: Tensor, value: np.ndarray) -> None:
    """The output is `value`, known at compile time: it becomes a constant (stored once with the
    weights) that the output shares, like an initializer."""
    value = np.asarray(value)
    if value.dtype != y.dtype or value.size != y.size:
        raise fail(node, f"value {list(value.shape)} {value.dtype} does not fit the output "
                         f"{list(y.shape)} {y.dtype}")
    ctx.alias(y, ctx.constant(value.reshape(y.shape), node.name))


@register("Shape")
def lower_shape(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "data")
    y = _first_output(node)
    # start/end (opset 15) slice the shape with Python's rules: negative counts from the end,
    # out-of-range clamps.
    dims = x.shape[slice(int(node.attr("start", 0)), node.attr("end"))]
    _bind_constant(node, ctx, y, np.array(dims, dtype=np.int64))


@register("Size")
def lower_size(node: Node, ctx: LoweringContext) -> None:
    x = required_input(node, 0, "data")
    _bind_constant(node, ctx, _first_output(node), np.array(x.size, dtype=np.int64))


@register("Constant")
def lower_constant(node: Node, ctx: LoweringContext) -> None:
    y = _first_output(node)
    attrs = node.attrs
    if "value" in attrs and isinstance(attrs["value"], np.ndarray):
        value = attrs["value"]
    elif "value_float" in attrs:
        value = np.array(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        value = np.array(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        value = np.array(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        value = np.array(attrs["value_ints"], dtype=np.int64)
    else:
        given = ", ".join(sorted(attrs)) or "none"
        raise fail(node, f"unsupported value attribute ({given}): expected a dense tensor, float(s) or int(s)")
    _bind_constant(node, ctx, y, value)


@register("ConstantOfShape", constant_inputs=(0,))
def lower_constant_of_shape(node: Node, ctx: LoweringContext) -> None:
    """Fills the output's static shape; like Reshape's, the shape input only restates it (it is
    checked when known at compile time, and not read at run time otherwise)."""
    y = _first_output(node)
    shape_tensor = required_input(node, 0, "input (the output shape)")
    if shape_tensor.is_constant:
        shape = constant_ints(node, 0, "input (the output shape)")
        if tuple(shape or []) != y.shape:
            raise fail(node, f"shape {shape} differs from the output's {list(y.shape)}")
    value = node.attr("value")
    fill = np.asarray(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    if fill.size != 1 or fill.dtype != y.dtype:
        raise fail(node, f"value {fill.dtype} x {fill.size} should be one {y.dtype} element")
    kb = ctx.builder(node)
    out = kb.output(y)
    item = const(fill[0].item(), y.dtype.name)
    ctx.emit(kb, kb.loops([y.size], lambda i: [out.store_flat(i[0], item)]))


@register("Range", constant_inputs=(0, 1, 2))
def lower_range(node: Node, ctx: LoweringContext) -> None:
    """output[i] = start + i * delta for the output's static length (ONNX's element count,
    max(ceil((limit - start) / delta), 0), which shape inference could only fix from known
    inputs). start and delta are literals when known at compile time, else loaded at run time;
    when all three are known the count is checked."""
    y = _first_output(node)
    dt = y.dtype.name
    kb = ctx.builder(node)
    scalars: list[Expr] = []
    known: list[float | int] = []
    for index, what in enumerate(("start", "limit", "delta")):
        t = required_input(node, index, what)
        if t.size != 1 or t.dtype != y.dtype:
            raise fail(node, f"{what} should be one {y.dtype} value, not {list(t.shape)} {t.dtype}")
        if t.is_constant:
            assert t.data is not None
            known.append(t.data.reshape(-1)[0].item())
            scalars.append(const(known[-1], dt))
        else:
            scalars.append(kb.input(t).load_flat(const(0, INDEX)) if what != "limit" else const(0, dt))
    if len(known) == 3:
        start, limit, delta = known
        if delta == 0:
            raise fail(node, "delta is 0")
        count = max(int(np.ceil((limit - start) / delta)), 0)
        if y.shape != (count,):
            raise fail(node, f"output {list(y.shape)} differs from the {count} elements the range holds")
    if y.rank != 1:
        raise fail(node, f"output {list(y.shape)} should be 1-d")
    start_e, _, delta_e = scalars
    out = kb.output(y)
    ctx.emit(kb, kb.loops([y.size], lambda i: [out.store_flat(i[0], start_e + cast(i[0], dt) * delta_e)]))
