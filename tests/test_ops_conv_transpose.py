"""ConvTranspose against onnxruntime over groups, strides, dilations, pads, auto_pad,
output_padding and output_shape, in 1, 2 and 3 spatial dimensions."""

from __future__ import annotations

import pytest
from onnx import helper

from tests.helpers import assert_matches_onnxruntime, make_model, rand

CASES = {
    # name: (x shape, w shape [C_in, C_out/group, k...], attrs)
    "basic": ((1, 3, 5, 5), (3, 2, 3, 3), {}),
    "strides": ((2, 2, 4, 5), (2, 3, 3, 3), {"strides": [2, 2]}),
    "strides_3": ((1, 2, 3, 4), (2, 2, 3, 2), {"strides": [3, 2]}),
    "pads": ((1, 2, 5, 5), (2, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "asymmetric_pads": ((1, 2, 6, 4), (2, 2, 3, 3), {"pads": [0, 1, 2, 0], "strides": [2, 1]}),
    "dilations": ((1, 2, 4, 4), (2, 2, 3, 3), {"dilations": [2, 2]}),
    "dilations_strides_pads": ((1, 2, 5, 4), (2, 3, 3, 2), {"dilations": [2, 1], "strides": [2, 3],
                                                            "pads": [1, 0, 2, 1]}),
    "groups": ((1, 4, 4, 4), (4, 3, 3, 3), {"group": 2, "strides": [2, 2]}),
    "depthwise": ((2, 3, 5, 5), (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "output_padding": ((1, 2, 4, 4), (2, 2, 3, 3), {"strides": [3, 2], "output_padding": [2, 1]}),
    "output_padding_pads": ((1, 2, 5, 5), (2, 3, 3, 3), {"pads": [1, 0, 1, 1], "strides": [3, 2],
                                                         "output_padding": [1, 1]}),
    "output_shape_larger": ((1, 2, 3, 3), (2, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),
    "output_shape_smaller": ((1, 2, 5, 5), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [8, 9]}),
    "same_upper": ((1, 2, 5, 5), (2, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "same_lower": ((1, 2, 5, 5), (2, 3, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    "same_upper_even_kernel": ((1, 2, 4, 5), (2, 2, 4, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "same_lower_even_kernel": ((1, 2, 4, 5), (2, 2, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    "valid": ((1, 2, 4, 4), (2, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    "kernel_shape_attr": ((1, 2, 4, 4), (2, 2, 3, 2), {"kernel_shape": [3, 2]}),
    "conv1d": ((2, 3, 7), (3, 4, 3), {"strides": [2], "pads": [1, 0]}),
    "conv1d_output_shape": ((1, 2, 5), (2, 2, 4), {"strides": [3], "output_shape": [18]}),
    "conv1d_output_shape_auto_pad": ((1, 2, 5), (2, 2, 3), {"strides": [2], "output_shape": [9],
                                                           "auto_pad": "SAME_LOWER"}),
    "conv3d": ((1, 2, 3, 4, 3), (2, 2, 3, 3, 2), {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1]}),
    "pixel_shuffle_like": ((1, 4, 4, 4), (4, 2, 2, 2), {"strides": [2, 2]}),  # stride == kernel
    "big_stride": ((1, 2, 3, 3), (2, 2, 2, 2), {"strides": [4, 4]}),  # gaps between taps
}


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_transpose(case: str, bias: bool) -> None:
    x_shape, w_shape, attrs = CASES[case]
    groups = attrs.get("group", 1)
    inits = {"w": rand(*w_shape, seed=1)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rand(w_shape[1] * groups, seed=2)
        inputs.append("b")
    x = rand(*x_shape)
    model = make_model([helper.make_node("ConvTranspose", inputs, ["y"], **attrs)], {"x": x}, ["y"], inits)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("opset", [7, 11, 21])
def test_conv_transpose_opsets(opset: int) -> None:
    x = rand(1, 2, 4, 4)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 0, 0],
                            output_padding=[1, 0])
    model = make_model([node], {"x": x}, ["y"], {"w": rand(2, 3, 3, 3, seed=1), "b": rand(3, seed=2)},
                       opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


def test_conv_transpose_weights_as_runtime_input() -> None:
    x, w = rand(1, 2, 4, 3), rand(2, 3, 2, 3, seed=1)
    model = make_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 1])],
                       {"x": x, "w": w}, ["y"])
    assert_matches_onnxruntime(model, {"x": x, "w": w})


def test_decoder_upsampling_stack() -> None:
    """An autoencoder-style decoder: ConvTranspose x2 with Relu between, then a 1x1 ConvTranspose."""
    z = rand(1, 8, 3, 3)
    nodes = [
        helper.make_node("ConvTranspose", ["z", "w1", "b1"], ["u1"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 1]),
        helper.make_node("Relu", ["u1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", "w2", "b2"], ["u2"], strides=[2, 2], kernel_shape=[4, 4],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["u2"], ["r2"]),
        helper.make_node("ConvTranspose", ["r2", "w3"], ["y"]),
    ]
    inits = {"w1": rand(8, 6, 3, 3, seed=1) * 0.3, "b1": rand(6, seed=2), "w2": rand(6, 4, 4, 4, seed=3) * 0.3,
             "b2": rand(4, seed=4), "w3": rand(4, 1, 1, 1, seed=5)}
    model = make_model(nodes, {"z": z}, ["y"], inits)
    out = assert_matches_onnxruntime(model, {"z": z})
    assert out["y"].shape == (1, 1, 12, 12)
