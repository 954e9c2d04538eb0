"""The table of supported ONNX ops: op type -> its lowering into kernel IR.

Each op's meaning is written once, in its lowering; every backend prints the resulting kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aot.ir.graph import Node
    from aot.lowering.context import LoweringContext

LowerFn = Callable[["Node", "LoweringContext"], None]

_LOWERINGS: dict[str, LowerFn] = {}


def register(*op_types: str) -> Callable[[LowerFn], LowerFn]:
    def decorate(fn: LowerFn) -> LowerFn:
        for op in op_types:
            if op in _LOWERINGS:
                raise ValueError(f"op {op} registered twice")
            _LOWERINGS[op] = fn
        return fn

    return decorate


def _ensure_loaded() -> None:
    import aot.ops  # noqa: F401  (importing the package registers every op module)


def is_supported(domain: str, op_type: str) -> bool:
    _ensure_loaded()
    return domain in ("", "ai.onnx") and op_type in _LOWERINGS


def lowering_for(op_type: str) -> LowerFn:
    _ensure_loaded()
    return _LOWERINGS[op_type]


def supported_ops() -> list[str]:
    _ensure_loaded()
    return sorted(_LOWERINGS)
