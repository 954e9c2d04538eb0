"""ONNX op lowerings, one module per family. Importing this package registers them all."""

from aot.ops import conv, elementwise, gemm, layout, normalization, pool, softmax  # noqa: F401
