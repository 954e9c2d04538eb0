"""Conv as register tiles (aot/ops/contraction/register_tiles.py): the fast path for every 1-D/2-D
convolution with constant float weights, over its input or a copy of it (copies.py), or over its
column matrix (im2col). The emitters, one per mode that algorithm.tile_mode picks: TiledConv
(pixel_tiles.py: pointwise, grid, rows), ChannelTiles (channel_tiles.py), FlatDepthwise
(flat_depthwise.py). Their weights are repacked at compile time (packing.py).
"""

from __future__ import annotations

import math

from aot.ir.graph import Node
from aot.kernel.ir import INDEX, const
from aot.lowering.builder import KernelBuilder, View
from aot.lowering.context import LoweringContext
from aot.lowering.parallel import mark_outer, pays
from aot.ops.attrs import required_input
from aot.ops.contraction.register_tiles import TileConfig
from aot.ops.conv.algorithm import ConvAlgorithm, TileMode, im2col_spec, strided_pointwise
from aot.ops.conv.channel_tiles import ChannelTiles
from aot.ops.conv.copies import im2col, padded_copy, strided_channel_copy, strided_copy
from aot.ops.conv.flat_depthwise import FlatDepthwise, LeanFlatDepthwise
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.conv.pixel_tiles import ConvJob, TiledConv


def lower_conv_tiled(node: Node, ctx: LoweringContext, planar: ConvGeometry, algorithm: ConvAlgorithm) -> None:
    """Emit the Conv `node` (validated, `planar` its 2-D geometry) as register tiles over its
    input or the copy of it that `algorithm` names."""
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    in_hw, stride = planar.in_spatial, planar.strides[1]
    pad_begin, pad_end = list(planar.pad_begin), list(planar.pad_end)
    parallel, split_blocks = _threads(ctx, planar)
    copy_channel = None
    if algorithm.copy == "strided" and _channel_at_a_time(planar, algorithm, parallel):
        copy, xv, copy_channel = strided_channel_copy(node, ctx, kb, x, in_hw, pad_begin, pad_end, stride)
    elif algorithm.copy == "strided":
        copy, xv, _, _ = strided_copy(node, ctx, kb, x, in_hw, pad_begin, pad_end, stride,
                                      rows_first=algorithm.rows_first)
    elif algorithm.copy == "padded":
        copy, xv, _, _ = padded_copy(node, ctx, kb, x, in_hw, pad_begin, pad_end, algorithm.rows_first)
    else:
        copy, xv = [], View(kb.input(x).buffer, (planar.batch, planar.channels, *in_hw))
    spec = planar.spec(over_padded_copy=algorithm.copy != "none")
    yv = View(kb.output(final).buffer, (planar.batch, planar.out_channels, *planar.out_spatial))
    bv = kb.input(bias) if bias is not None else None
    job = ConvJob(node, spec, xv, w, yv, bv, epilogue, final.dtype.name)
    tiled = tiled_conv(kb, ctx, job, ctx.tiles, algorithm.mode, parallel=split_blocks,
                       rows_first=algorithm.rows_first, lean=algorithm.lean)
    body = kb.loops([planar.batch], lambda idx: tiled.emit_image(idx[0], copy_channel))
    ctx.emit(kb, copy + (mark_outer(body) if parallel and not split_blocks and tiled.shares_nothing else body))


def lower_conv_im2col(node: Node, ctx: LoweringContext, planar: ConvGeometry, algorithm: ConvAlgorithm) -> None:
    """Emit the Conv `node` as a copy of its column matrix and a matrix product over it (a
    pointwise convolution over the flattened pixels)."""
    x, w, bias = required_input(node, 0, "X"), required_input(node, 1, "W"), node.input(2)
    kb = ctx.builder(node)
    final, epilogue = ctx.epilogue(node, kb)
    parallel, split_blocks = _threads(ctx, planar)
    if _subsampled_panel(planar, algorithm, ctx.tiles, split_blocks):
        # A strided 1x1 convolution's column matrix is its input subsampled: the tiles read it
        # through the strided view, packed band by band into their panel (pixel_tiles.py), so
        # the whole matrix is never stored.
        (in_h, in_w), (s_h, s_w) = planar.in_spatial, planar.strides
        copy, columns = [], View(kb.input(x).buffer, (planar.batch, planar.channels, *planar.out_spatial),
                                 (planar.channels * in_h * in_w, in_h * in_w, s_h * in_w, s_w))
    else:
        copy, cbuf, rows = im2col(node, ctx, kb, x, planar.in_spatial, planar.out_spatial, list(planar.kernel),
                                  list(planar.strides), dilations=list(planar.dilations),
                                  pad_begin=list(planar.pad_begin))
        columns = View(cbuf, (planar.batch, rows, *planar.out_spatial))
    spec = im2col_spec(planar)
    yv = View(kb.output(final).buffer, (planar.batch, planar.out_channels, *planar.out_spatial))
    bv = kb.input(bias) if bias is not None else None
    job = ConvJob(node, spec, columns, w, yv, bv, epilogue, final.dtype.name)
    gemm = tiled_conv(kb, ctx, job, ctx.tiles, algorithm.mode, parallel=split_blocks)
    body = kb.loops([planar.batch], lambda idx: gemm.emit(idx[0], const(0, INDEX)))
    ctx.emit(kb, copy + (mark_outer(body) if parallel and not split_blocks and gemm.shares_nothing else body))


def _channel_at_a_time(planar: ConvGeometry, algorithm: ConvAlgorithm, parallel: bool) -> bool:
    """Whether a strided depthwise convolution copies its input one channel at a time, each just
    before the tiles that read it (copies.strided_channel_copy): one thread, as the copy's
    scratch is then one plane for every image and channel."""
    return (algorithm.mode == "rows" and not algorithm.rows_first and not parallel
            and planar.groups == planar.channels == planar.out_channels)


def _subsampled_panel(planar: ConvGeometry, algorithm: ConvAlgorithm, tiles: TileConfig, split_blocks: bool) -> bool:
    """Whether an im2col convolution is a strided 1x1 one whose tiles can read the input
    subsampled through their packed panel (one thread over the blocks, vector tiles over pixels)."""
    return strided_pointwise(planar) and algorithm.mode == "pointwise" and not split_blocks and tiles.lanes > 1


def _threads(ctx: LoweringContext, planar: ConvGeometry) -> tuple[bool, bool]:
    """Whether the convolution runs on threads, and whether it does by splitting the blocks of
    output channels of one image of one group (TiledConv `parallel`); otherwise several images
    or groups split the outermost of those loops (when the kernel has no shared scratch)."""
    macs = planar.batch * planar.out_channels * planar.group_in * math.prod(planar.out_spatial) \
        * planar.kernel[0] * planar.kernel[1]
    parallel = pays(ctx, macs)
    return parallel, parallel and planar.batch == 1 and planar.groups == 1


def tiled_conv(kb: KernelBuilder, ctx: LoweringContext, job: ConvJob, tile: TileConfig, mode: TileMode, *,
               parallel: bool = False, rows_first: bool = False, lean: bool = False) -> TiledConv:
    """The emitter of `mode` for `job` (see TiledConv); `lean`: the flat mode with the least scratch."""
    kind = {"channels": ChannelTiles, "flat": LeanFlatDepthwise if lean else FlatDepthwise}.get(mode, TiledConv)
    return kind(kb, ctx, job, tile, mode, parallel=parallel, rows_first=rows_first)
