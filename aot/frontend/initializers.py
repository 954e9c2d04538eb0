"""Initializer data turned into arrays, in one place, so that data which does not fit its dims
and type (a truncated or retyped tensor, an unknown type) is an error naming the initializer
wherever the frontend first needs its values (folding or the graph IR)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from aot.errors import ModelLoadError
from aot.frontend.loader import one_line


def initializer_array(tensor: onnx.TensorProto, source: str) -> np.ndarray:
    """`tensor`'s data as a C-contiguous array (0-d scalars stay 0-d)."""
    try:
        # np.require, not np.ascontiguousarray: the latter turns a 0-d scalar into shape (1,).
        return np.require(numpy_helper.to_array(tensor), requirements="C")
    except (ValueError, TypeError, KeyError) as e:
        known = tensor.data_type in onnx.TensorProto.DataType.values()
        kind = onnx.TensorProto.DataType.Name(tensor.data_type) if known else f"type {tensor.data_type}"
        raise ModelLoadError(f"{source}: initializer {tensor.name!r}: its data does not fit dims "
                             f"{list(tensor.dims)} of {kind} ({one_line(str(e)) or type(e).__name__})") from e
