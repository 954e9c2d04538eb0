"""The table of supported ONNX ops: (domain, op type) -> its lowering into kernel IR.

Each op's meaning is written once, in its lowering; every backend prints the resulting kernels.
The op modules (aot/ops/) fill the table when they are imported, and aot/ops/__init__.py imports
them all: whoever asks the table imports aot.ops first (the frontend's importer, the QDQ pass,
aot/pipeline.py for lower_graph, the ops table), so it is full before anyone asks it.

Ops of the default domain (ai.onnx, written "" in most models) are registered by name; ops of
other domains (com.microsoft's QLinearAdd ...) with `domain=`, and are keyed by their qualified
name (aot/ir/graph.py qualified_op_type), as the elementwise forms are.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from aot.ir.graph import qualified_op_type
from aot.ir.internal_attrs import INTERNAL_DOMAIN

if TYPE_CHECKING:
    from aot.ir.graph import Node
    from aot.lowering.context import LoweringContext

LowerFn = Callable[["Node", "LoweringContext"], None]

_LOWERINGS: dict[str, LowerFn] = {}
_CONSTANT_INPUTS: dict[str, tuple[int, ...]] = {}


def register(*op_types: str, constant_inputs: Sequence[int] = (), domain: str = "") -> Callable[[LowerFn], LowerFn]:
    """`constant_inputs`: positions of inputs whose values decide output shapes or the kernel's
    structure (axes, pads, starts, k, shape ...), where the op has them. A static graph has them
    as compile-time constants; lowerings refuse them at run time with an error naming the node,
    unless the outputs' static shapes already say everything (Expand's shape, like Reshape's).
    `domain`: the operator set the ops belong to ("" for ai.onnx)."""
    def decorate(fn: LowerFn) -> LowerFn:
        for op in op_types:
            key = qualified_op_type(domain, op)
            if key in _LOWERINGS:
                raise ValueError(f"op {key} registered twice")
            _LOWERINGS[key] = fn
            if constant_inputs:
                _CONSTANT_INPUTS[key] = tuple(constant_inputs)
        return fn

    return decorate


def is_supported(domain: str, op_type: str) -> bool:
    """Whether a model's node of this op can be compiled (aot's internal ops are not a model's)."""
    return domain != INTERNAL_DOMAIN and qualified_op_type(domain, op_type) in _LOWERINGS


def lowering_for(op_type: str, domain: str = "") -> LowerFn:
    return _LOWERINGS[qualified_op_type(domain, op_type)]


def constant_inputs(op_type: str, domain: str = "") -> tuple[int, ...]:
    """Input positions of `op_type` that must be known at compile time (see register)."""
    return _CONSTANT_INPUTS.get(qualified_op_type(domain, op_type), ())


def registered_op_types() -> list[str]:
    """Every op a model may use by its qualified name (`Conv`, `com.microsoft::QLinearAdd`), sorted."""
    internal = qualified_op_type(INTERNAL_DOMAIN, "")
    return sorted(op for op in _LOWERINGS if not op.startswith(internal))
