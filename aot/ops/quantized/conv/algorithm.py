"""Which form computes an integer convolution (ConvInteger, QLinearConv): the whole decision, in
one place (choose_integer_form), and the alternatives a --max-arena plan may trade it for
(integer_conv_forms).

* tiles (tiles.py): the int8 register tiles over a quad image of the input, where the target
  has a vector int8 step and the weights fit its signed bytes (groups of one);
* tap_columns (tiles.py): the same tiles over a copy of the taps of a one-channel convolution;
* dot (dot.py): a channels-last copy of the input, each output a dot product;
* masked_depthwise, shifted_depthwise: depthwise convolutions summed in float32 over copies per
  stride phase, where the int8 step multiplies unsigned by signed bytes;
* flat_depthwise (flat_depthwise.py): depthwise convolutions over one padded plane at a time;
* depthwise (depthwise.py): depthwise convolutions over the padded planes, or the input itself;
* direct (direct.py): the loop nest with a bounds check per tap: anything, no scratch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from aot.lowering.tiles import TileConfig
from aot.ops.conv.geometry import ConvGeometry
from aot.ops.quantized.conv.masked_depthwise import masked_period
from aot.ops.quantized.conv.operands import MAX_TAP_COLUMNS, MAX_UNROLLED_TAPS, sums_in_float
from aot.ops.quantized.conv.shifted_depthwise import vector_lanes
from aot.ops.quantized.integer_tiles import fits

Kind = Literal["fastest", "tiles", "tap_columns", "dot", "masked_depthwise", "shifted_depthwise", "flat_depthwise",
               "depthwise", "direct"]

_LABELS = {
    "fastest": "the fastest form", "tiles": "int8 tiles over a quad copy", "tap_columns": "int8 tiles over tap columns",
    "dot": "dot products over a channels-last copy", "masked_depthwise": "float depthwise over phase copies",
    "shifted_depthwise": "float depthwise over shifted copies", "flat_depthwise": "depthwise a plane at a time",
    "depthwise": "depthwise over padded planes", "direct": "direct",
}


@dataclass(frozen=True)
class IntegerConvForm:
    """How an integer convolution runs. "fastest" stands for the form choose_integer_form picks
    with the node's epilogue, which a --max-arena search cannot see (a lowered node records
    which in `picked`); `lanes`: the vector width of the float depthwise forms."""

    kind: Kind
    lanes: int = 0
    picked: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        """How `aot inspect --max-arena` names the form."""
        return _LABELS[self.picked or self.kind]


def choose_integer_form(g: ConvGeometry, weights: np.ndarray | None, tiles: TileConfig, *,
                        flat: bool) -> IntegerConvForm:
    """The form for the planar geometry `g` with `weights` (w - w_zero_point, operands.
    centred_weights; None: only the direct form runs). `flat`: the output, and what the epilogue
    reads, may be indexed by pixel of the plane."""
    if weights is None:
        return IntegerConvForm("direct")
    taps = g.kernel[0] * g.kernel[1]
    # A convolution of one input channel (a model's first layer) takes the tile too: its rows
    # are the depthwise form's vector loop, which short rows keep scalar (DS-CNN's 10x4 stride-2
    # conv over 5-pixel rows: 46% of the model's time in that form).
    tiled = g.groups == 1 and tiles.int8_dot.vectorised and fits(weights)
    if g.group_in == 1 and taps <= MAX_UNROLLED_TAPS and not tiled:
        lanes = vector_lanes(g, tiles.lanes) if sums_in_float(tiles) and flat else None
        if lanes is not None:
            return IntegerConvForm("masked_depthwise" if masked_period(g, lanes) is not None else "shifted_depthwise",
                                   lanes)
        # A strided convolution of one input channel (a first layer whose weights do not fit
        # the tiles) keeps the planes where the sums are integers: the flat form ran more
        # instructions under qemu there (DS-CNN's 10x4 stride-2 conv on rpi3). Strided depthwise
        # convolutions take it, which runs fewer on VWW's four (`python -m benchmarks.arm`).
        if tiles.lanes > 1 and (sums_in_float(tiles) or g.strides == (1, 1) or g.groups > 1):
            return IntegerConvForm("flat_depthwise")
        return IntegerConvForm("depthwise")
    if tiled:
        return IntegerConvForm("tap_columns" if g.channels == 1 and 1 < taps <= MAX_TAP_COLUMNS else "tiles")
    return IntegerConvForm("dot")


def integer_conv_forms(g: ConvGeometry, weights: np.ndarray | None, tiles: TileConfig) -> list[IntegerConvForm]:
    """Every form a --max-arena plan may give this convolution: the fastest first, then forms
    that need less scratch: for a depthwise convolution one padded plane at a time, or its
    planes (no copy where it does not pad); for the others dot products over a channels-last
    copy (no quad padding of the channels); the direct loop nest (no scratch) for all."""
    forms = [IntegerConvForm("fastest")]
    if weights is not None:
        if g.group_in == 1 and g.kernel[0] * g.kernel[1] <= MAX_UNROLLED_TAPS:
            if tiles.lanes > 1:
                forms.append(IntegerConvForm("flat_depthwise"))
            forms.append(IntegerConvForm("depthwise"))
        else:
            forms.append(IntegerConvForm("dot"))
    forms.append(IntegerConvForm("direct"))
    return forms
