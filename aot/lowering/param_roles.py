"""What each kernel parameter is to its kernel (`x`, `w`, `bias`, `residual`, `y`, `strided` ...),
so that the printed kernels name their parameters by role instead of by position.

The roles come from where the tensor stands to the kernel's node: its formal name in the ONNX
op schema (Conv's inputs are X, W, B; BatchNormalization's X, scale, B, input_mean ...), an
operand of the fused elementwise chain (an Add's other operand is the residual, or the bias
when it is a constant), or, for a tensor a lowering made, the hint it was made with: scratch
tensors are named `<node>__<hint>` (aot/ops/scratch.py), constants `<hint>__aot<N>`
(LoweringContext.constant) with a hint that is either a tensor's name (a packed weight keeps the
role of the weight it packs) or `<node>_<what>` (the scale and shift of a folded
BatchNormalization).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import onnx.defs

from aot.codegen.c_names import c_identifier
from aot.codegen.reserved_names import MATH_OTHER_FUNCTIONS, MATH_UNARY_FUNCTIONS, is_reserved_public
from aot.ir.graph import Node, Tensor

# Epilogue ops whose other operand is named for what it is to the network, not by its formal
# name: a constant added after a MatMul or Conv is its bias, an activation is a residual.
_ADDED = {"Add", "Sum"}
_MADE_CONSTANT = re.compile(r"(.*)__aot[0-9]+")
_UNIQUE_SUFFIX = re.compile(r"_[0-9]+$")  # what Graph.unique_name appends

# Identifiers a kernel's body may use besides its own locals, which a parameter must not shadow:
# the math functions (aot/backends/c/kernel_printer.py), a parallel segment's bounds, the
# let-binding pass's locals (let0 ...).
_MATH = MATH_UNARY_FUNCTIONS | MATH_OTHER_FUNCTIONS
_BODY_NAMES = _MATH | {f"{f}f" for f in _MATH} | {"first", "last"}


@functools.cache
def _schema(op_type: str, domain: str, opset: int) -> tuple[tuple[tuple[str, bool], ...], tuple[str, ...]] | None:
    """(formal name, variadic) of each input and the formal output names of the op as of `opset`
    (0: the newest), or None (an op onnx does not know)."""
    domain = "" if domain == "ai.onnx" else domain
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain) if opset > 0 else \
            onnx.defs.get_schema(op_type, domain=domain)
    except onnx.defs.SchemaError:
        return None
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    inputs = tuple((_formal_role(p.name, p.description), p.option == variadic) for p in schema.inputs)
    return inputs, tuple(_formal_role(p.name, p.description) for p in schema.outputs)


def _formal_role(name: str, description: str) -> str:
    """A schema's formal name as a role: lower case; a bias named B (Conv, BatchNormalization,
    LSTM) is `bias`."""
    if name == "B" and "bias" in description.lower():
        return "bias"
    return name.lower()


def _input_role(node: Node, index: int) -> str | None:
    schema = _schema(node.op_type, node.domain, node.opset)
    if schema is None or not schema[0]:
        return None
    inputs = schema[0]
    if index < len(inputs) and not inputs[index][1]:
        return inputs[index][0]
    formal, variadic = inputs[min(index, len(inputs) - 1)]
    if not variadic:
        return None
    first = min(index, len(inputs) - 1)
    return f"{formal.removesuffix('_0')}{index - first}"  # Sum's data_0, data_1 ... as data0, data1


def _output_role(node: Node, index: int) -> str | None:
    schema = _schema(node.op_type, node.domain, node.opset)
    if schema is None or not schema[1]:
        return None
    return schema[1][min(index, len(schema[1]) - 1)]


class ParamRoles:
    """The roles of the tensors one kernel of `node` (and its fused `chain`) binds."""

    def __init__(self, node: Node | None, chain: Sequence[Node] = ()) -> None:
        self.node = node
        self.chain = list(chain)

    def role(self, tensor: Tensor, writable: bool) -> str:
        return self._role(tensor) or ("y" if writable else "x")

    def _role(self, tensor: Tensor) -> str | None:
        node = self.node
        if node is None:
            return None
        final = self.chain[-1].outputs[0] if self.chain else None
        for i, out in enumerate(node.outputs):
            if out is tensor:
                return _output_role(node, i)
        if tensor is final:
            return _output_role(node, 0)  # the fused chain's result is the anchor's output
        for i, t in enumerate(node.inputs):
            if t is tensor:
                return _input_role(node, i)
        for member in self.chain:
            for i, t in enumerate(member.inputs):
                if t is tensor and member.op_type in _ADDED:  # a side input of the epilogue
                    return "bias" if tensor.is_constant else "residual"
                if t is tensor:
                    return _input_role(member, i)
        return self._made_role(tensor)

    def _made_role(self, tensor: Tensor) -> str | None:
        """The role of a tensor a lowering made (see the module docstring)."""
        made = _MADE_CONSTANT.fullmatch(tensor.name)
        hint = made.group(1) if made else tensor.name
        for node in [n for n in (self.node, *self.chain) if n is not None]:
            for i, t in enumerate(node.inputs):
                if t is not None and hint.split("__")[0] == t.name:
                    return _input_role(node, i)  # a packed weight, a per-channel view of a slope
            for separator in ("__", "_"):
                if node.name and hint.startswith(node.name + separator) and len(hint) > len(node.name) + 1:
                    what = hint[len(node.name) + len(separator):]
                    return _UNIQUE_SUFFIX.sub("", what) if separator == "__" and not made else what
        return None


def param_identifier(role: str) -> str:
    """`role` as a parameter name: a C identifier that no keyword, standard macro or type, runtime
    name or identifier of the kernel body (see _BODY_NAMES) can be."""
    ident = c_identifier(role.lower(), "p")
    if is_reserved_public(ident) or ident in _BODY_NAMES or ident.startswith("aot_") \
            or re.fullmatch(r"let[0-9]+", ident):
        ident = f"{ident}_"
    return ident
