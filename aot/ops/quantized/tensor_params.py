"""Per-tensor scales and zero points of the com.microsoft QLinear ops, checked once.

onnxruntime takes each of them as a scalar or a one-element tensor (QGemm's B may have one per
column, see qgemm.py). A compile-time value becomes a literal; one fed at run time is read from
its tensor, by a form's operand or a kernel's load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import Expr, const
from aot.ops.attrs import fail, required_input

# The domain of onnxruntime's QOperator ops (QLinearAdd, QGemm ...).
MS_DOMAIN = "com.microsoft"

# The types onnxruntime's QLinear kernels run on.
EIGHT_BIT = ("int8", "uint8")


@dataclass(frozen=True)
class QuantParam:
    """A scale (float32) or a zero point (the quantised type): a value, or a tensor read at run time."""

    dtype: str
    value: float | int = 0
    tensor: Tensor | None = None

    def expr(self, load: Callable[[Tensor], Expr]) -> Expr:
        return const(self.value, self.dtype) if self.tensor is None else load(self.tensor)

    def same_as(self, other: QuantParam) -> bool:
        """Whether both are known at compile time and equal."""
        return self.tensor is None and other.tensor is None and self.value == other.value


def scale_param(node: Node, index: int, what: str) -> QuantParam:
    t = node.input(index)
    if t is None:
        raise fail(node, f"missing required input {index} ({what})")
    if t.dtype.name != "float32":
        raise fail(node, f"{what} {t.name!r} has dtype {t.dtype}; only float32 scales are supported")
    return _scalar(node, t, what, "float32")


def zero_point_param(node: Node, index: int, what: str, dtype: str) -> QuantParam:
    """An optional zero point of `dtype` (0 when omitted, as in onnxruntime)."""
    t = node.input(index)
    if t is None:
        return QuantParam(dtype, 0)
    if t.dtype.name != dtype:
        raise fail(node, f"{what} {t.name!r} has dtype {t.dtype}; the tensor it describes is {dtype}")
    return _scalar(node, t, what, dtype)


def _scalar(node: Node, t: Tensor, what: str, dtype: str) -> QuantParam:
    if t.size != 1 or t.rank > 1:
        raise fail(node, f"{what} {t.name!r} has shape {list(t.shape)}; it must be a scalar or a 1-element "
                         "tensor (per-tensor quantization)")
    if t.is_constant:
        assert t.data is not None
        return QuantParam(dtype, t.data.reshape(-1)[0].item())
    return QuantParam(dtype, tensor=t)


def eight_bit_in_out(node: Node) -> tuple[Tensor, Tensor, str]:
    """X (input 0), Y (output 0) and their one 8-bit dtype."""
    x = required_input(node, 0, "X")
    y = node.outputs[0]
    assert y is not None
    dtype = eight_bit(node, x, "X")
    if y.dtype != x.dtype:
        raise fail(node, f"output {y.name!r} is {y.dtype}, X {x.dtype}")
    return x, y, dtype


def eight_bit(node: Node, t: Tensor, what: str) -> str:
    """The dtype of quantised tensor `t`, which must be int8 or uint8."""
    if t.dtype.name not in EIGHT_BIT:
        raise fail(node, f"{what} {t.name!r} has dtype {t.dtype}; {node.op_type} is implemented for int8 and uint8")
    return t.dtype.name
