"""ConvTranspose: N-d transposed convolution with groups, strides, dilations, padding,
output_padding and output_shape.

With constant float32 weights and one or two spatial dims it runs as register tiles over its
stride phases (tiled.py: each output phase is an ordinary small convolution, the common
kernel == stride upsampling a matrix product per phase); every other form (weights given at run
time, 3-D and higher, other float types) runs in gather form (gather.py). Either way it is a
fusion anchor: a following BatchNormalization folds into its weights (aot/passes/fold_affine.py)
and the elementwise chain after it (residual Add, BatchNorm, Relu...) runs in its epilogue.
"""

from __future__ import annotations

from aot.ir.graph import Node
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.ops.attrs import required_input
from aot.ops.conv_transpose.gather import lower_gather
from aot.ops.conv_transpose.geometry import transpose_geometry, transpose_padding
from aot.ops.conv_transpose.tiled import lower_phase_tiles

__all__ = ["lower_conv_transpose", "transpose_padding"]


@register("ConvTranspose")
def lower_conv_transpose(node: Node, ctx: LoweringContext) -> None:
    geo = transpose_geometry(node)
    w = required_input(node, 1, "W")
    y = node.outputs[0]
    assert y is not None
    if w.is_constant and y.dtype.name == "float32" and geo.nd <= 2 and y.size > 0:
        lower_phase_tiles(node, ctx, geo)
    else:
        lower_gather(node, ctx, geo)
