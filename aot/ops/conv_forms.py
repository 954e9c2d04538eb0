"""The forms a --max-arena plan (aot/planner/budget.py) may trade for each convolution node: the
float Conv's algorithms (conv/algorithm.py) and the integer convolutions' forms
(quantized/conv/algorithm.py), named and ranked the same way."""

from __future__ import annotations

from aot.ir.graph import Node
from aot.lowering.tiles import TileConfig
from aot.ops.conv.algorithm import ConvAlgorithm, form_label
from aot.ops.conv.lowering import node_forms
from aot.ops.quantized.conv.algorithm import IntegerConvForm
from aot.ops.quantized.conv.lowering import integer_node_forms

Form = ConvAlgorithm | IntegerConvForm
FORMED_OPS = ("Conv", "ConvInteger", "QLinearConv")


def forms_of(node: Node, tiles: TileConfig, conv_algorithm: str) -> list[Form]:
    """The forms the convolution `node` can take, the one its lowering picks first."""
    if node.op_type == "Conv":
        return list(node_forms(node, tiles, conv_algorithm))
    return list(integer_node_forms(node, tiles))


def label_of(form: object) -> str:
    """How `aot inspect --max-arena` names a form."""
    if isinstance(form, IntegerConvForm):
        return form.label
    assert isinstance(form, ConvAlgorithm)
    return form_label(form)


def factor_key(form: object) -> str:
    """The form's name in budget.FORM_FACTORS: every float tiled mode and im2col count as
    register tiles, and so do the int8 forms picked for speed; other int8 forms as "int8 KIND"."""
    if isinstance(form, IntegerConvForm):
        return "tiled" if form.kind in ("fastest", "tiles", "tap_columns", "masked_depthwise",
                                        "shifted_depthwise") else f"int8 {form.kind}"
    assert isinstance(form, ConvAlgorithm)
    return "tiled" if form.kind in ("tiled", "im2col") else form.kind
