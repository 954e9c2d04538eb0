"""Conv: validation of the node, then the algorithm algorithm.choose_algorithm picks."""

from __future__ import annotations

import numpy as np

from aot.ir.graph import Node, Tensor
from aot.lowering.context import LoweringContext
from aot.lowering.registry import register
from aot.lowering.tiles import TileConfig
from aot.ops.attrs import conv_operands, fail, spatial_padding, window_output_size, window_steps
from aot.ops.conv.algorithm import ConvAlgorithm, adopt_algorithm, choose_algorithm, conv_forms
from aot.ops.conv.direct import lower_conv_direct
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.conv.rows import lower_conv_rows
from aot.ops.conv.tiled import lower_conv_im2col, lower_conv_tiled
from aot.ops.conv.winograd import lower_conv_winograd


@register("Conv")
def lower_conv(node: Node, ctx: LoweringContext) -> None:
    geometry = conv_geometry(node)
    _, w, _, y, _ = conv_operands(node, "convolution")
    weights = w.data if w.is_constant else None
    allow_winograd = ctx.conv_algorithm != "direct"
    algorithm = choose_algorithm(geometry, weights, y.dtype.name, ctx.tiles, allow_winograd)
    key = ctx.choice_key(node, tuple(w.shape), y.dtype.name)
    preferred = ctx.preferred.get(key)
    if isinstance(preferred, ConvAlgorithm) and preferred != algorithm:
        algorithm = adopt_algorithm(geometry, weights, y.dtype.name, ctx.tiles, allow_winograd, preferred) or algorithm
    algorithm = _overridden(node, ctx, geometry, weights, y.dtype.name, allow_winograd) or algorithm
    ctx.choices.append((key, algorithm))
    ctx.forms[conv_key(node)] = algorithm
    if algorithm.kind == "winograd":
        lower_conv_winograd(node, ctx, geometry)
    elif algorithm.kind == "im2col":
        lower_conv_im2col(node, ctx, geometry.planar(), algorithm)
    elif algorithm.kind == "tiled":
        lower_conv_tiled(node, ctx, geometry.planar(), algorithm)
    elif algorithm.kind == "rows":
        lower_conv_rows(node, ctx, geometry.planar(), algorithm)
    else:
        lower_conv_direct(node, ctx, geometry)


def _overridden(node: Node, ctx: LoweringContext, geometry: ConvGeometry, weights: np.ndarray | None, dtype: str,
                allow_winograd: bool) -> ConvAlgorithm | None:
    """The form a --max-arena plan gives this convolution (aot/planner/budget.py), keyed by the
    node's output: one of its conv_forms, or None when the plan leaves it as chosen."""
    override = ctx.overrides.get(conv_key(node))
    if override is None:
        return None
    forms = conv_forms(geometry, weights, dtype, ctx.tiles, allow_winograd)
    if override not in forms:
        raise ValueError(f"{node.describe()}: {override} is not one of its forms {forms}")
    assert isinstance(override, ConvAlgorithm)
    return override


def node_forms(node: Node, tiles: TileConfig, conv_algorithm: str) -> list[ConvAlgorithm]:
    """The forms (algorithm.conv_forms) the Conv `node` can take, the one lowering picks first."""
    _, w, _, y, _ = conv_operands(node, "convolution")
    return conv_forms(conv_geometry(node), w.data if w.is_constant else None, y.dtype.name, tiles,
                      conv_algorithm != "direct")


def conv_key(node: Node) -> str:
    """What names a Conv in LoweringContext.overrides: its output tensor (node names need not be
    unique)."""
    out = node.outputs[0]
    assert out is not None
    return out.name


def conv_geometry(node: Node) -> ConvGeometry:
    """The shape of the Conv `node`, its attributes checked against its operands."""
    x, w, bias, y, _ = conv_operands(node, "convolution")
    return window_geometry(node, x, w, bias, y)


def window_geometry(node: Node, x: Tensor, w: Tensor, bias: Tensor | None, y: Tensor) -> ConvGeometry:
    """The shape of a Conv-like `node` (Conv, ConvInteger, QLinearConv) over the operands given,
    its attributes checked against them; x and w of the same rank, at least 3."""
    nd = x.rank - 2
    batch, in_channels = x.shape[0], x.shape[1]
    out_channels, group_in = w.shape[0], w.shape[1]
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    if tuple(kernel) != tuple(w.shape[2:]):
        raise fail(node, f"kernel_shape {kernel} differs from the weight shape {list(w.shape[2:])}")
    groups = int(node.attr("group", 1))
    strides, dilations = window_steps(node, x.shape[2:])
    if groups <= 0 or in_channels != group_in * groups or out_channels % groups:
        raise fail(node, f"group={groups} does not divide X channels {in_channels} and W {list(w.shape)}")
    in_spatial = x.shape[2:]
    pad_begin, pad_end = spatial_padding(node, in_spatial, kernel, strides, dilations)
    out_spatial = window_output_size(node, in_spatial, kernel, strides, dilations, pad_begin, pad_end)
    if y.shape != (batch, out_channels, *out_spatial):
        expected = [batch, out_channels, *out_spatial]
        raise fail(node, f"output shape {list(y.shape)} differs from the computed {expected}")
    if bias is not None and bias.shape != (out_channels,):
        raise fail(node, f"bias shape {list(bias.shape)} should be [{out_channels}]")
    return ConvGeometry(batch=int(batch), channels=int(in_channels), out_channels=int(out_channels), groups=groups,
                        in_spatial=_ints(in_spatial), out_spatial=_ints(out_spatial), kernel=_ints(kernel),
                        strides=_ints(strides), dilations=_ints(dilations), pad_begin=_ints(pad_begin),
                        pad_end=_ints(pad_end), nd=nd)


def _ints(values: object) -> tuple[int, ...]:
    return tuple(int(v) for v in values)  # type: ignore[attr-defined]
