"""ConvTranspose against onnxruntime over groups, strides, dilations, pads, auto_pad,
output_padding and output_shape, in 1, 2 and 3 spatial dimensions; as stride-phase register
tiles with a fused BatchNorm, residual Add and Relu, on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aot.compiler import load
from aot.lowering.program import lower_graph
from aot.passes.pipeline import run_passes
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_onnxruntime

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


# Geometries of the stride-phase tiles: (x shape, w shape [C_in, C_out/group, k...], attrs).
TILE_CASES = {
    "fpn_upsample_2x2_s2": ((1, 24, 10, 12), (24, 24, 2, 2), {"strides": [2, 2]}),
    "k2_s2_odd_channels": ((2, 5, 7, 9), (5, 7, 2, 2), {"strides": [2, 2]}),
    "k3_s2_pads_output_padding": ((1, 8, 9, 11), (8, 6, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                                 "output_padding": [1, 1]}),
    "k4_s2_p1": ((1, 6, 8, 20), (6, 10, 4, 4), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "k3_s1_p1": ((1, 6, 7, 19), (6, 9, 3, 3), {"pads": [1, 1, 1, 1]}),
    "k2_s1": ((1, 3, 5, 17), (3, 4, 2, 2), {}),
    "k3_s3": ((1, 4, 5, 6), (4, 5, 3, 3), {"strides": [3, 3]}),
    "k4_s3_asymmetric": ((1, 4, 6, 7), (4, 3, 4, 4), {"strides": [3, 3], "pads": [2, 0, 1, 3],
                                                      "output_padding": [2, 1]}),
    "k2_s3_gaps": ((1, 3, 4, 5), (3, 2, 2, 2), {"strides": [3, 3]}),  # phases no tap reaches
    "k3_s2_dilation2": ((1, 4, 6, 9), (4, 5, 3, 3), {"strides": [2, 2], "dilations": [2, 2], "pads": [2, 1, 1, 2]}),
    "k3_s1_dilation3": ((1, 3, 6, 8), (3, 4, 3, 3), {"dilations": [3, 3], "pads": [1, 1, 1, 1]}),
    "groups_2": ((1, 6, 7, 8), (6, 4, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise_k4_s2": ((1, 8, 9, 10), (8, 1, 4, 4), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "depthwise_k2_s2": ((2, 5, 6, 33), (5, 1, 2, 2), {"group": 5, "strides": [2, 2]}),
    "wide_rows_k2_s2": ((1, 4, 3, 70), (4, 8, 2, 2), {"strides": [2, 2]}),  # several column blocks
    "conv1d_k4_s2": ((2, 6, 23), (6, 8, 4), {"strides": [2], "pads": [1, 1]}),
}


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("case", sorted(TILE_CASES))
def test_conv_transpose_phase_tiles(case: str, bias: bool, backend: str) -> None:
    x_shape, w_shape, attrs = TILE_CASES[case]
    groups = attrs.get("group", 1)
    inits = {"w": rand(*w_shape, seed=1)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rand(w_shape[1] * groups, seed=2)
        inputs.append("b")
    x = rand(*x_shape)
    model = make_model([helper.make_node("ConvTranspose", inputs, ["y"], **attrs)], {"x": x}, ["y"], inits)
    assert_matches_onnxruntime(model, {"x": x}, backend=backend)


def batchnorm_inits(channels: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = {"s": rng.random(channels) + 0.5, "bb": rng.standard_normal(channels),
              "m": rng.standard_normal(channels), "v": rng.random(channels) + 0.5}
    return {name: v.astype(np.float32) for name, v in values.items()}


def upsample_model(case: str, residual: bool):  # noqa: ANN201
    """ConvTranspose -> [Add residual] -> BatchNormalization -> Relu, the FPN upsampling block."""
    x_shape, w_shape, attrs = TILE_CASES[case]
    channels = w_shape[1] * attrs.get("group", 1)
    x = rand(*x_shape)
    inits = {"w": rand(*w_shape, seed=1), "b": rand(channels, seed=2), **batchnorm_inits(channels, 3)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["u"], **attrs)]
    feeds = {"x": x}
    source = "u"
    if residual:
        out_shape = run_onnxruntime(make_model(nodes, feeds, ["u"], inits), feeds)["u"].shape
        feeds["r"] = rand(*out_shape, seed=4)
        nodes.append(helper.make_node("Add", ["u", "r"], ["a"]))
        source = "a"
    nodes += [helper.make_node("BatchNormalization", [source, "s", "bb", "m", "v"], ["n"]),
              helper.make_node("Relu", ["n"], ["y"])]
    return make_model(nodes, feeds, ["y"], inits), feeds


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("residual", [False, True], ids=["bn_relu", "add_bn_relu"])
@pytest.mark.parametrize("case", ["fpn_upsample_2x2_s2", "k3_s2_pads_output_padding", "k4_s2_p1", "groups_2",
                                  "depthwise_k4_s2", "k2_s3_gaps", "conv1d_k4_s2"])
def test_conv_transpose_fused_batchnorm_residual_relu(case: str, residual: bool, backend: str) -> None:
    model, feeds = upsample_model(case, residual)
    assert_matches_onnxruntime(model, feeds, backend=backend)


def kernel_ops(model) -> list[str]:  # noqa: ANN001
    graph, _ = load(model)
    run_passes(graph)
    return [k.op for k in lower_graph(graph).kernels]


def test_batchnorm_folds_and_relu_fuses_into_conv_transpose() -> None:
    """A BatchNorm right after the ConvTranspose folds into its weights, the Relu runs in its
    epilogue: one kernel."""
    model, _ = upsample_model("fpn_upsample_2x2_s2", residual=False)
    assert kernel_ops(model) == ["ConvTranspose+Relu"]


def test_residual_add_batchnorm_relu_run_in_the_conv_transpose_epilogue() -> None:
    model, _ = upsample_model("fpn_upsample_2x2_s2", residual=True)
    assert kernel_ops(model) == ["ConvTranspose+Add+BatchNormalization+Relu"]


def test_runtime_weights_with_fused_epilogue() -> None:
    """The gather form (weights given at run time) applies the fused chain too."""
    x, w, r = rand(1, 2, 4, 3), rand(2, 3, 3, 3, seed=1), rand(1, 3, 9, 7, seed=2)
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["u"], strides=[2, 2]),
             helper.make_node("Add", ["u", "r"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    model = make_model(nodes, {"x": x, "w": w, "r": r}, ["y"])
    assert kernel_ops(model) == ["ConvTranspose+Add+Relu"]
    assert_matches_onnxruntime(model, {"x": x, "w": w, "r": r})


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("case", ["fpn_upsample_2x2_s2", "k3_s2_pads_output_padding"])
def test_conv_transpose_on_threads(case: str, backend: str) -> None:
    """--parallel: the output rows split over threads, one scratch per slot."""
    model, feeds = upsample_model(case, residual=True)
    assert_matches_onnxruntime(model, feeds, backend=backend, parallel=True)


def test_inspect_counts_conv_transpose_multiply_adds() -> None:
    """`aot inspect` / `aot bench` count x elements * (C_out / group) * kernel taps."""
    from aot.analysis import model_stats

    model, _ = upsample_model("depthwise_k4_s2", residual=False)
    graph, _ = load(model)
    assert model_stats(graph).macs == 1 * 8 * 9 * 10 * 1 * 4 * 4


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("residual", [False, True], ids=["sigmoid", "add_sigmoid"])
def test_one_channel_map_takes_wide_tiles_and_finishes_them_before_interleaving(residual: bool, backend: str) -> None:
    """A detector's probability map (24 -> 1 channel, 2x2 stride 2, then Sigmoid): its two column
    phases are a tile's only rows, so AVX2's tiles widen to 4 vectors (8 accumulators, 32 columns,
    where 2 x 2 left the multiply-adds waiting on each other), and the epilogue (with a residual
    Add, read at the interleaved columns) runs on the tile before it is interleaved into the
    output. Matches onnxruntime."""
    from aot.compiler import compile as compile_package

    x = rand(1, 24, 6, 80)
    inits = {"w": rand(24, 1, 2, 2, seed=1), "b": rand(1, seed=2)}
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["u"], strides=[2, 2])]
    feeds = {"x": x}
    source = "u"
    if residual:
        feeds["r"] = rand(1, 1, 12, 160, seed=3)
        nodes.append(helper.make_node("Add", ["u", "r"], ["a"]))
        source = "a"
    nodes.append(helper.make_node("Sigmoid", [source], ["y"]))
    model = make_model(nodes, feeds, ["y"], inits)
    code = compile_package(model, target="x86_64-v3").files["test_graph.c"].decode()
    kernel = code[code.index("static void test_graph_"):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert "= phases[c0 + 32];" in kernel  # the second column phase, 32 columns into the tile
    assert_matches_onnxruntime(model, feeds, backend=backend, target="x86_64-v3")
