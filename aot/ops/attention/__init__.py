"""Attention: one kernel family for the attention a pass finds in a model and for ONNX's Attention op."""

from aot.ops.attention import fused, multi_head, onnx_attention  # noqa: F401
