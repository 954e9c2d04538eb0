"""ONNX op lowerings, one module per family. Importing this package registers them all."""

from aot.ops import (  # noqa: F401
    conv,
    conv_transpose,
    einsum,
    elementwise,
    gemm,
    indexing,
    layout,
    movement,
    normalization,
    norms,
    pool,
    recurrent,
    reduce,
    resize,
    shape_ops,
    softmax,
)
from aot.ops.quantized import (  # noqa: F401
    dynamic,
    integer_conv,
    integer_matmul,
    linear,
    qgemm,
    qlinear_concat,
    qlinear_elementwise,
    qlinear_pool,
    qlinear_softmax,
    weight_only,
)
