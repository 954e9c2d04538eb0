"""ONNX op lowerings, one module per family. Importing this package registers them all."""

from aot.ops import (  # noqa: F401
    attention,
    conv,
    conv_transpose,
    einsum,
    elementwise,
    gelu_forms,
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
    rotary,
    scatter,
    shape_ops,
    softmax,
    transformer_norms,
)
from aot.ops.quantized import (  # noqa: F401
    dynamic,
    integer_matmul,
    linear,
    qgemm,
    qlinear_concat,
    qlinear_elementwise,
    qlinear_pool,
    qlinear_softmax,
    weight_only,
)
from aot.ops.quantized.conv import lowering as integer_conv  # noqa: F401
