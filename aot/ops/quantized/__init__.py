"""Quantised ops: the integer <-> real mapping (arithmetic.py) and the ONNX ops built on it:
ai.onnx's QuantizeLinear and DequantizeLinear, and the com.microsoft QLinear ops and QGemm that
onnxruntime.quantization writes in QOperator format. Importing this package registers them all."""

from aot.ops.quantized import linear, qgemm, qlinear_concat, qlinear_elementwise, qlinear_pool  # noqa: F401
