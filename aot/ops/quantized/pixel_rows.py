"""A pointwise integer convolution over a plane of few pixels as integer_gemm's tiles: the pixels
are the rows of A, the output channels fill the lanes, and the tiles' bytes are transposed into
the planar output at the end.

The convolution tiles (integer_tiles.py) put pixels in the lanes: a 3x3 plane's 9 pixels take a
vector of 16 (VWW's last two pointwise convolutions, 256 channels over 3x3, did 16 lanes' work
for 9 pixels: 9% of the int8 model's time). With the channels in the lanes every lane is an
output; the transposition copies each output byte once (9 x 256 of them).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from aot.ir.graph import Node
from aot.kernel.ir import INDEX, Expr, Load, Stmt, Store, Var, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.ops.quantized.integer_gemm import GemmOperands, gemm_tiles, weights_fit
from aot.ops.quantized.integer_terms import ACCUMULATOR
from aot.ops.quantized.integer_tiles import Finish, tile_shape
from aot.ops.scratch import scratch_tensor

PixelStore = Callable[[Expr, Expr, Expr], Stmt]  # (output channel m, pixel p, value) -> the store
MIN_WASTE = 1.5  # pixel lanes computed per output pixel from which the channels fill the lanes instead


def wasteful_pixel_lanes(pixels: int, lanes: int, accumulators: int, out_channels: int) -> bool:
    """Whether the pixel tiles would compute at least MIN_WASTE times the plane's pixels."""
    shape = tile_shape(lanes, accumulators, pixels, out_channels)
    return -(-pixels // shape.lanes) * shape.lanes >= MIN_WASTE * pixels


def pixel_rows(node: Node, ctx: LoweringContext, kb: KernelBuilder, x: View, start: np.ndarray,
               weights: np.ndarray, pixels: int, finish: Finish, *, store: PixelStore) -> list[Stmt] | None:
    """The convolution of one image's `pixels` (x read as [0][c][0][p]) by `weights` ([M][C],
    less their zero points), each sum starting from `start` [M] (bias and x's zero-point term),
    finished (`finish(sum, m)`) and stored by `store(m, p, value)`; None where the weights do not
    fit integer_gemm's tiles (a dot step, whole vectors of output channels)."""
    if not weights_fit(ctx, weights):
        return None
    out_channels, channels = weights.shape
    operands = GemmOperands(pixels, channels, x.buffer.dtype, lambda p, c: x.load([const(0, INDEX), c,
                            const(0, INDEX), p]), weights, start)
    dtype = finish(Var("probe", ACCUMULATOR), const(0, INDEX)).dtype
    rows = kb.output(scratch_tensor(ctx, node, (pixels * out_channels,), dtype, "pixel_rows")).buffer
    tiles = gemm_tiles(node, ctx, kb, operands, finish,
                       lambda p, m, value: Store(rows, p * out_channels + m, value))
    assert tiles is not None  # (weights_fit, and a plain store has a vector form)
    return tiles + kb.loops([out_channels, pixels], lambda i: [
        store(i[0], i[1], Load(rows, i[1] * out_channels + i[0]))], prefix="p")
