"""Quantised ops: the integer <-> real mapping (arithmetic.py) and the ONNX ops built on it.
Importing this package registers them all."""

from aot.ops.quantized import linear  # noqa: F401
