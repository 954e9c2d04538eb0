"""The table of elementwise forms: op type -> how to build its scalar meaning for one node.

aot/ops/elementwise.py writes each op's form once and registers it here; the lowering framework
reads the table to fuse elementwise chains into an anchor's epilogue (fusion.py, context.py)
without reaching up into the op modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.kernel.ir import Expr

ScalarFn = Callable[[list[Expr]], Expr]


@dataclass
class Form:
    """out = fn(inputs...) elementwise, with the inputs broadcast (numpy rules) to the output."""

    inputs: list[Tensor]
    fn: ScalarFn


class FormContext(Protocol):
    """What a form builder may ask of the lowering (aot/lowering/context.py LoweringContext):
    tensors it makes for its operands. Named here, not imported, so the table sits below the
    context that reads it."""

    def constant(self, data: np.ndarray, hint: str) -> Tensor: ...

    def new_tensor(self, hint: str, dtype: np.dtype, shape: Sequence[int]) -> Tensor: ...

    def alias(self, view: Tensor, of: Tensor) -> None: ...


FormBuilder = Callable[[Node, FormContext], Form]
# Keyed by the qualified op type (aot/ir/graph.py qualified_op_type): `Add`, `com.microsoft::QLinearAdd`.
FORMS: dict[str, FormBuilder] = {}


def form_for(node: Node, ctx: FormContext) -> Form | None:
    """The elementwise form of `node`, or None when it is not an elementwise op."""
    builder = FORMS.get(node.qualified_op)
    return builder(node, ctx) if builder is not None else None


def is_elementwise(node: Node) -> bool:
    """Whether `node` is an elementwise op with a single output."""
    return node.qualified_op in FORMS and len([o for o in node.outputs if o is not None]) == 1 \
        and node.outputs[0] is not None
