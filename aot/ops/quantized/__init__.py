"""Quantised ops: the integer <-> real mapping (arithmetic.py) and the ONNX ops built on it.
Importing this package registers them all."""

from aot.ops.quantized import dynamic, integer_conv, integer_matmul, linear  # noqa: F401
