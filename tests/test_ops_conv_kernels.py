"""The vectorisable Conv / Gemm / MatMul kernels (aot/ops/contraction/row_updates.py, conv_rows.py) on shapes
that hit each of their specialisations, against onnxruntime.

The cases are chosen for the kernel structure rather than for ONNX coverage: channel counts that
leave a tail after blocks of CHANNEL_BLOCK output channels and of the chained input channels,
1x1 kernels with and without stride / padding (the pointwise matrix-product path and the direct
path), depthwise and grouped convolutions, padded images (the zero-bordered scratch copy),
strides, dilations, rows shorter than a vector, planes larger than one pointwise tile, reductions
read through a packed panel, and fused epilogues (Relu, residual Add) applied by the final pass over each block.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import helper

from tests.helpers import (
    assert_matches_onnxruntime,
    assert_outputs_match,
    compile_model,
    make_model,
    rand,
    run_onnxruntime,
)

CONV_CASES: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, object]]] = {
    "3x3_pad1_oc_tail": ((1, 5, 9, 11), (7, 5, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_stride2_pad1": ((2, 3, 16, 16), (8, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "3x3_nopad": ((1, 6, 8, 10), (4, 6, 3, 3), {}),
    "asym_pads": ((1, 2, 7, 6), (3, 2, 3, 2), {"pads": [0, 2, 1, 0]}),
    "same_upper_stride2": ((1, 4, 9, 9), (6, 4, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "dilated": ((1, 3, 12, 12), (5, 3, 3, 3), {"dilations": [2, 3], "pads": [2, 3, 2, 3]}),
    "stride_gt_kernel": ((1, 2, 10, 10), (3, 2, 2, 2), {"strides": [3, 3]}),
    "wide_kernel_10x4": ((1, 1, 49, 10), (6, 1, 10, 4), {"pads": [4, 1, 5, 2], "strides": [2, 2]}),
    "pointwise": ((1, 13, 6, 7), (9, 13, 1, 1), {}),
    "pointwise_multi_tile": ((1, 3, 40, 30), (5, 3, 1, 1), {}),
    "1x1_stride2": ((1, 8, 9, 9), (6, 8, 1, 1), {"strides": [2, 2]}),
    # Reductions long enough for pixel_tiles.py's packed panel (channels x tile width beyond 8 KiB),
    # with a ragged last block; then several bands of pixels; then strided 1x1 convs, whose tiles
# read the input subsampled through the panel.
    "pointwise_packed_panel": ((1, 144, 3, 151), (20, 144, 1, 1), {}),
    "pointwise_packed_bands": ((1, 144, 20, 25), (26, 144, 1, 1), {}),
    "1x1_stride2_packed_panel": ((1, 160, 40, 42), (20, 160, 1, 1), {"strides": [2, 2]}),
    "1x1_stride_2x3_ragged": ((2, 12, 11, 17), (9, 12, 1, 1), {"strides": [2, 3]}),
    "conv1d_1x1_stride3": ((1, 40, 100), (10, 40, 1), {"strides": [3]}),
    "1x1_padded": ((1, 3, 4, 5), (2, 3, 1, 1), {"pads": [1, 0, 0, 2]}),
    "depthwise_3x3": ((1, 6, 10, 10), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}),
    "depthwise_stride2": ((1, 4, 11, 11), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "depthwise_multiplier2": ((1, 3, 7, 7), (6, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    "grouped": ((1, 8, 6, 6), (12, 2, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "tiny_1x1_spatial": ((1, 16, 1, 1), (10, 16, 1, 1), {}),
    "tiny_2x2_pad": ((1, 3, 2, 2), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "kernel_covers_padding_only": ((1, 2, 3, 3), (2, 2, 3, 3), {"pads": [3, 3, 3, 3]}),
    "conv1d": ((2, 3, 17), (5, 3, 4), {"pads": [2, 1], "strides": [2]}),
    "conv1d_depthwise": ((1, 4, 12), (4, 1, 3), {"group": 4, "pads": [1, 1], "dilations": [2]}),
}


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv_kernel_paths(case: str, bias: bool) -> None:
    x_shape, w_shape, attrs = CONV_CASES[case]
    inits = {"w": rand(*w_shape, seed=1)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rand(w_shape[0], seed=2)
        inputs.append("b")
    x = rand(*x_shape)
    model = make_model([helper.make_node("Conv", inputs, ["y"], **attrs)], {"x": x}, ["y"], inits)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("case", ["3x3_pad1_oc_tail", "pointwise_multi_tile", "pointwise_packed_bands", "depthwise_3x3",
                                  "conv1d"])
def test_conv_kernel_with_fused_residual_and_relu(case: str) -> None:
    """The epilogue pass reads a residual at the output index after the rows are accumulated."""
    x_shape, w_shape, attrs = CONV_CASES[case]
    x = rand(*x_shape)
    # The residual is a graph input with the conv output's shape (found by running the conv once).
    conv_only = make_model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], {"x": x}, ["y"],
                           {"w": rand(*w_shape, seed=1)})
    r = rand(*run_onnxruntime(conv_only, {"x": x})["y"].shape, seed=3)
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs), helper.make_node("Add", ["c", "r"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        {"x": x, "r": r}, ["y"], {"w": rand(*w_shape, seed=1), "b": rand(w_shape[0], seed=2)})
    assert_matches_onnxruntime(model, {"x": x, "r": r})


@pytest.mark.parametrize("m,k,n", [(1, 640, 128), (1, 7, 3), (5, 13, 9), (9, 3, 1100), (4, 1, 4)], ids=str)
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("constant_b", [True, False], ids=["const_b", "input_b"])
def test_gemm_kernel_paths(m: int, k: int, n: int, trans_b: int, constant_b: bool) -> None:
    """M=1 (fully connected), row-block and k-chunk tails, more than one column tile, and a
    constant transposed B (stored pre-transposed) versus a runtime one (read strided)."""
    a = rand(m, k)
    b = rand(n, k, seed=1) if trans_b else rand(k, n, seed=1)
    c = rand(n, seed=2)
    feeds = {"a": a} if constant_b else {"a": a, "b": b}
    inits = {"c": c, **({"b": b} if constant_b else {})}
    model = make_model([helper.make_node("Gemm", ["a", "b", "c"], ["g"], transB=trans_b),
                        helper.make_node("Relu", ["g"], ["y"])], feeds, ["y"], inits)
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("a_shape,b_shape", [((1, 300), (300, 20)), ((6, 5), (5, 600)), ((2, 1, 3, 7), (3, 7, 9))],
                         ids=str)
def test_matmul_kernel_paths(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a, b = rand(*a_shape), rand(*b_shape, seed=1)
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a}, ["y"], {"b": b})
    assert_matches_onnxruntime(model, {"a": a})


@pytest.mark.parametrize("target", ["x86_64-v3", "rpi4", "cortex-m4f"])
def test_strided_depthwise_copies_one_channel_at_a_time(target: str) -> None:
    """A MobileNet's 3x3 stride-2 depthwise conv copies its input into column phases one channel
    at a time, each just before that channel's tiles (tiled.py _channel_at_a_time): the arena
    holds one padded channel (22 rows x 2 phases x 11 columns), not two images' worth, and the
    scratch shared by every image and channel still gives onnxruntime's result."""
    x = rand(2, 8, 20, 20)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
                        helper.make_node("Relu", ["c"], ["y"])], {"x": x}, ["y"],
                       {"w": rand(8, 1, 3, 3, seed=1), "b": rand(8, seed=2)})
    package = compile_model(model, target=target)
    plane = 22 * 2 * 11 * 4
    assert plane <= package.manifest["arena_bytes"] < 2 * plane
    if target == "x86_64-v3":  # (once: this runs the host's build)
        assert_matches_onnxruntime(model, {"x": x})


def test_conv_kernel_propagates_nan_and_inf() -> None:
    """No reassociation or contraction: a NaN or Inf input reaches exactly the outputs it should."""
    x = rand(1, 2, 6, 6)
    x[0, 0, 2, 3] = np.nan
    x[0, 1, 4, 1] = np.inf
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": x}, ["y"],
                       {"w": np.abs(rand(3, 2, 3, 3, seed=1)) + 0.1})
    assert_matches_onnxruntime(model, {"x": x})


PANEL_CASES = ["pointwise_packed_panel", "pointwise_packed_bands", "1x1_stride2_packed_panel", "1x1_stride_2x3_ragged",
               "conv1d_1x1_stride3"]


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("target", ["rpi4", "rpi3"])
@pytest.mark.parametrize("case", PANEL_CASES)
def test_packed_panel_convs_under_qemu(case: str, target: str, backend: str) -> None:
    """The packed panel on NEON (4-lane tiles, armv7 and aarch64), under qemu-user."""
    from aot.compiler import compile as compile_model
    from aot.targets import load_target
    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable

    problem = cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    x_shape, w_shape, attrs = CONV_CASES[case]
    x = rand(*x_shape)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], {"x": x}, ["y"],
                       {"w": rand(*w_shape, seed=1)})
    built = TargetModel.build(compile_model(model, backend=backend, target=target), load_target(target))
    assert_outputs_match(built.run({"x": x}), model, {"x": x})


@pytest.mark.parametrize("target,panel", [("x86_64-v4", False), ("x86_64-v3", True)])
def test_heavy_weights_keep_wide_vector_pointwise_convs_in_place(target: str, panel: bool) -> None:
    """1024 -> 256 at 14x14: the panel's 7 bands would read the 1 MB of weights 7 times; AVX-512
    targets read the input in place (TiledConv._weights_outweigh_panel), AVX2 ones through the
    panel. Both match onnxruntime."""
    from aot.compiler import compile as compile_model

    x = rand(1, 1024, 14, 14)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": x}, ["y"],
                       {"w": rand(256, 1024, 1, 1, seed=1)})
    assert ("panel" in compile_model(model, target=target).files["test_graph.c"].decode()) == panel
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("channels,side,banded", [(512, 28, True), (1024, 14, False)], ids=["1.6MB", "0.8MB"])
def test_wide_vector_pointwise_convs_in_place_run_bands_over_inputs_beyond_l2(channels: int, side: int,
                                                                               banded: bool) -> None:
    """Read in place on an AVX-512 target, a pointwise conv whose input is beyond L2 (512 -> 256
    at 28x28, 1.6 MB) runs bands of pixels outermost, every block of output channels over one
    band (with a ragged last band: 784 pixels in bands of 240) instead of each block streaming
    the whole input; an input L2 keeps (1024 -> 256 at 14x14) keeps the blocks of output
    channels outermost. Both match onnxruntime."""
    from aot.compiler import compile as compile_model

    x = rand(1, channels, side, side)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
                       {"x": x}, ["y"], {"w": rand(256, channels, 1, 1, seed=1) * 0.05, "b": rand(256, seed=2)})
    source = compile_model(model, target="x86_64-v4").files["test_graph.c"].decode()
    kernel = source[source.index("static void test_graph_"):]
    kernel = kernel[:kernel.index("\n}\n")]
    assert "panel" not in kernel
    outermost = kernel[kernel.index("for ("):].split("\n")[0]
    assert outermost.startswith("for (int32_t q0") == banded, outermost
    assert_matches_onnxruntime(model, {"x": x}, target="x86_64-v4")


@pytest.mark.parametrize("residual", [False, True], ids=["relu", "residual_relu"])
def test_wide_channel_tiles_with_reduction_slabs(residual: bool) -> None:
    """1x1 convs over a 7x7 image on a 512-bit target run as channel tiles four vectors wide, their
    2050-channel reduction in slabs whose partial sums wait in the scratch (channel_tiles.py
    _slabs): ragged slabs, channel blocks and pixel blocks; Relu, or a residual Add and Relu, in
    the epilogue. Matches onnxruntime."""
    from aot.compiler import compile as compile_model

    x = rand(1, 2050, 7, 7)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"])]
    feeds = {"x": x}
    if residual:
        feeds["r"] = rand(1, 70, 7, 7, seed=3)
        nodes.append(helper.make_node("Add", ["c", "r"], ["s"]))
    nodes.append(helper.make_node("Relu", ["s" if residual else "c"], ["y"]))
    model = make_model(nodes, feeds, ["y"], {"w": rand(70, 2050, 1, 1, seed=1) * 0.05, "b": rand(70, seed=2)})
    source = compile_model(model, target="x86_64-v4").files["test_graph.c"].decode()
    assert "AOT_F32X16_LOAD(&tile[" in source  # the accumulators resume from the partial sums
    assert_matches_onnxruntime(model, feeds, target="x86_64-v4")


def test_few_output_pixels_take_channel_tiles() -> None:
    """An STFT as a strided 1-D conv (256 taps, hop 128) over 3 frames: its im2col's 3 pixels
    would be scalar accumulators (algorithm.pixel_waste counts a scalar as a vector's issue
    slot), so the tiles run over output channels in vectors."""
    from aot.compiler import compile as compile_model

    x = rand(1, 1, 576)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[256], strides=[128])], {"x": x},
                       ["y"], {"w": rand(130, 1, 256, seed=1) * 0.1})
    source = compile_model(model, target="x86_64-v4").files["test_graph.c"].decode()
    kernel = source[source.index("static void test_graph_"):]
    assert "aot_f32x16 vacc" in kernel[:kernel.index("\n}\n")]
    assert_matches_onnxruntime(model, {"x": x}, target="x86_64-v4")


@pytest.mark.parametrize("shape,kernel,stride", [((1, 64, 14, 14), 1, 1), ((1, 256, 28, 28), 1, 1),
                                                 ((1, 128, 15, 15), 1, 2), ((1, 16, 120, 120), 3, 2)],
                         ids=["ragged_196_pixels", "through_panel", "strided_subsampled", "rows_3x3_stride2"])
def test_long_reductions_take_three_vector_tiles(shape: tuple[int, ...], kernel: int, stride: int) -> None:
    """On a 512-bit target a conv of group 1 whose reduction (channels x taps) is 64 or more runs
    tiles of 48 pixels (TileConfig.wide_cols): pointwise in place with a ragged last tile (196
    = 4 x 48 + 4), through the packed panel, strided (its input subsampled into the panel), and
    a 3x3 stride-2 conv as rows of 60 (48 + 12), with a residual Add and Relu in the epilogue.
    Matches onnxruntime."""
    from aot.compiler import compile as compile_model

    x = rand(*shape)
    out = (shape[2] + 2 * (kernel // 2) - kernel) // stride + 1
    feeds = {"x": x, "r": rand(1, 40, out, out, seed=3)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride, stride], pads=[kernel // 2] * 4),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    weights = rand(40, shape[1], kernel, kernel, seed=1) * 0.1
    model = make_model(nodes, feeds, ["y"], {"w": weights, "b": rand(40, seed=2)})
    source = compile_model(model, target="x86_64-v4").files["test_graph.c"].decode()
    kernel_source = source[source.index("static void test_graph_"):]
    assert re.search(r"[*+] 48\b", kernel_source[:kernel_source.index("\n}\n")])  # tiles (or a tail) at 48
    assert_matches_onnxruntime(model, feeds, target="x86_64-v4")


TAP_LOOP_CASES = {
    # (input, weights, attributes, whether AVX2's tiles loop over the taps): a stride-2 conv over
    # a row-interleaved phase-split copy, a 5x5 over a padded copy, dilated taps across the phases
    # of a stride-2 copy, a stride-2 conv at 20x20 in channel tiles, and an RGB stem, whose 27
    # steps stay written out (LOOPED_STEPS_FROM)
    "stride2": ((1, 4, 64, 64), (16, 4, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, True),
    "unit_5x5": ((1, 8, 24, 24), (12, 8, 5, 5), {"pads": [2, 2, 2, 2]}, True),
    "stride2_dilated": ((1, 5, 70, 70), (12, 5, 3, 3), {"pads": [2, 2, 2, 2], "strides": [2, 2],
                                                         "dilations": [2, 2]}, True),
    "stride2_channel_tiles": ((1, 32, 40, 40), (48, 32, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, True),
    "rgb_stem": ((1, 3, 64, 64), (16, 3, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),
}


@pytest.mark.parametrize("case", sorted(TAP_LOOP_CASES))
def test_register_tight_tiles_loop_over_their_taps(case: str) -> None:
    """AVX2's tiles of 6 rows x 2 vectors leave one of the 16 registers spare: with the taps
    written out, gcc and clang spilled accumulators on every step, so tiles with 32 steps or more
    run them as a loop over a table of operand offsets (TileConfig.steps_in_a_loop). AVX-512's
    tiles keep them written out. With a residual Add and Relu in the epilogue, the result
    matches onnxruntime."""
    from aot.compiler import compile as compile_package

    x_shape, w_shape, attrs, looped = TAP_LOOP_CASES[case]
    probe = make_model([helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], {"x": rand(*x_shape)}, ["y"],
                       {"w": rand(*w_shape, seed=1)})
    out_shape = run_onnxruntime(probe, {"x": rand(*x_shape)})["y"].shape
    feeds = {"x": rand(*x_shape), "r": rand(*out_shape, seed=3)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], **attrs),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, feeds, ["y"], {"w": rand(*w_shape, seed=1) * 0.2, "b": rand(w_shape[0], seed=2)})

    def conv_kernel(target: str) -> str:
        source = compile_package(model, target=target).files["test_graph.c"].decode()
        start = source.index("static void test_graph_")
        return source[start:source.index("\n}\n", start)]

    assert bool(re.search(r"\+ \(int32_t\)taps\[k0\]\]", conv_kernel("x86_64-v3"))) == looped
    assert "taps" not in conv_kernel("x86_64-v4")
    assert_matches_onnxruntime(model, feeds, target="x86_64-v3")
