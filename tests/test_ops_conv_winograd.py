"""Winograd F(2x2, 3x3) convolutions (aot/ops/conv/winograd.py): the transforms, which
convolutions take it, and its results against onnxruntime through every vector register shape,
every way its tiles are cut (partial last tile row and column, runs of whole tile rows, rows in
pieces, several blocks of tile rows), padding, fused epilogues and batches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import aot.pipeline
from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.lowering.tiles import TileConfig
from aot.ops.conv.winograd import F2X2_3X3
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_aot, run_onnxruntime

SHAPES = {"sse-neon": TileConfig(4, 12), "avx2": TileConfig(8, 12), "avx512": TileConfig(16, 24, registers=32),
          # armv7's: the transforms written as vectors (TileConfig.loops_in_vectors)
          "armv7": TileConfig(4, 12, registers=16, lane_broadcasts=True)}


def test_transforms_compute_a_correlation() -> None:
    """A^T [(G g G^T) * (B^T d B)] A is the 2x2 'valid' correlation of a 4x4 patch with a 3x3
    filter: the matrices are right."""
    rng = np.random.default_rng(0)
    bt, g, at = (np.array(m, dtype=np.float64) for m in (F2X2_3X3.bt, F2X2_3X3.g, F2X2_3X3.at))
    for _ in range(5):
        d, f = rng.standard_normal((4, 4)), rng.standard_normal((3, 3))
        direct = np.array([[np.sum(d[i:i + 3, j:j + 3] * f) for j in range(2)] for i in range(2)])
        winograd = at @ ((g @ f @ g.T) * (bt @ d @ bt.T)) @ at.T
        np.testing.assert_allclose(winograd, direct, rtol=1e-12, atol=1e-12)
    u = F2X2_3X3.filter_transform(rng.standard_normal((5, 3, 3, 3)).astype(np.float32))
    assert u.shape == (16, 5, 3) and u.dtype == np.float32


def _conv_model(shape: tuple[int, ...], out_channels: int, pads: list[int], bias: bool = True,
                residual: bool = False, relu: bool = True, seed: int = 0, activation: str = "Relu"):
    x = rand(*shape, seed=seed)
    inits = {"w": rand(out_channels, shape[1], 3, 3, seed=seed + 1) * np.float32(1.0 / np.sqrt(9 * shape[1]))}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rand(out_channels, seed=seed + 2)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c"], kernel_shape=[3, 3], pads=pads)]
    feeds = {"x": x}
    last = "c"
    out_h, out_w = shape[2] + pads[0] + pads[2] - 2, shape[3] + pads[1] + pads[3] - 2
    if residual:
        feeds["r"] = rand(shape[0], out_channels, out_h, out_w, seed=seed + 3)
        nodes.append(helper.make_node("Add", [last, "r"], ["s"]))
        last = "s"
    if relu:
        nodes.append(helper.make_node(activation, [last], ["y"]))
        last = "y"
    return make_model(nodes, feeds, [last], initializers=inits), feeds


CASES = {
    # even output, 'same' padding; runs of whole tile rows (4 tiles per row)
    "8x8_same": lambda: _conv_model((1, 8, 8, 8), 16, [1, 1, 1, 1]),
    # odd output: the last tile row and column are partial
    "13x13_same": lambda: _conv_model((1, 16, 13, 13), 24, [1, 1, 1, 1]),
    # no padding, odd channels, no bias, no epilogue
    "valid_odd": lambda: _conv_model((1, 9, 12, 17), 11, [0, 0, 0, 0], bias=False, relu=False),
    # asymmetric padding, a residual Add and Relu fused
    "asymmetric_residual": lambda: _conv_model((1, 12, 10, 15), 20, [0, 1, 2, 1], residual=True),
    # rows of 35 tiles: each tile row in pieces, the last one ragged and partial
    "wide_rows": lambda: _conv_model((1, 8, 6, 70), 8, [1, 1, 1, 0]),
    # 64 channels x 40x40: the transformed input exceeds a block, several blocks of tile rows
    "several_blocks": lambda: _conv_model((1, 64, 40, 41), 16, [1, 1, 1, 1], residual=True),
    # two images
    "batch_of_two": lambda: _conv_model((2, 8, 9, 9), 12, [1, 1, 1, 1]),
    # 16 tiles of a 7x7 output: one AVX-512 vector of tiles, the last tile row and column partial
    "7x7_output": lambda: _conv_model((1, 16, 7, 7), 24, [1, 1, 1, 1], residual=True),
    # an epilogue without a lane-wise form: armv7's output transform stays scalar
    "sigmoid_epilogue": lambda: _conv_model((1, 8, 12, 12), 8, [1, 1, 1, 1], activation="Sigmoid"),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_winograd_matches_onnxruntime(monkeypatch: pytest.MonkeyPatch, shape: str, case: str) -> None:
    monkeypatch.setattr(aot.pipeline, "tiles_for", lambda targets, backend="c": SHAPES[shape])
    model, feeds = CASES[case]()
    source = compile_model(model).files["test_graph.c"].decode()
    assert "Conv/winograd" in source, "expected this convolution to run as Winograd"
    assert_matches_onnxruntime(model, feeds)


def test_armv7_transforms_are_written_as_vectors() -> None:
    """gcc and LLVM vectorise no float loop for armv7 NEON (it flushes denormals), so there the
    transforms are vector code of their own (`python -m benchmarks.arm` counts the difference),
    the output's two columns per tile zipped into consecutive outputs; other targets leave the
    loops to the compiler. A tile column count that is no multiple of 4 ends in scalar tiles."""
    model, _ = _conv_model((1, 16, 13, 13), 24, [1, 1, 1, 1], residual=True)  # 7 tiles per row
    armv7 = compile_model(model, target="rpi3").files["test_graph.c"].decode()
    assert "AOT_F32X4_ZIP_LO(" in armv7 and "AOT_F32X4_ZIP_HI(" in armv7
    assert "aot_f32x4 wt0 = " in armv7 and "float wt" in armv7  # vectors of 4 tiles, then the rest
    for target in ("rpi4", "x86_64-v3"):
        text = compile_model(model, target=target).files["test_graph.c"].decode()
        assert "_ZIP_" not in text and "float wt0 = " in text
    # LLVM's vectoriser leaves aarch64's output transform scalar, gcc's does not
    # (TileConfig.vectorises_loops)
    aarch64_llvm = compile_model(model, target="rpi4", backend="llvm").files["test_graph.c"].decode()
    assert "AOT_F32X4_ZIP_LO(" in aarch64_llvm and "aot_f32x4 wt0 = " in aarch64_llvm


@pytest.mark.qemu
@pytest.mark.parametrize(("target", "backend"), [("rpi3", "c"), ("rpi3", "llvm"), ("rpi4", "llvm")])
@pytest.mark.parametrize("case", ["13x13_same", "asymmetric_residual", "wide_rows", "7x7_output", "batch_of_two",
                                  "sigmoid_epilogue"])
def test_vector_transforms_under_qemu(case: str, target: str, backend: str) -> None:
    """The transforms' own vector code (vzip, the lane-wise epilogues) on rpi3, and in LLVM's
    rpi4 objects, under qemu-user."""
    from aot.targets import load_target
    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable
    from tests.helpers import assert_outputs_match

    problem = cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    model, feeds = CASES[case]()
    package = compile_model(model, backend=backend, target=target)
    built = TargetModel.build(package, load_target(target))
    assert_outputs_match(built.run(feeds), model, feeds)


def test_winograd_with_threads_matches_the_serial_run() -> None:
    """Both ways of splitting over threads (blocks of tile rows; output channels of an image of
    one block) give the serial run's bytes: the split changes no summation order."""
    for shape, out_channels in (((1, 64, 40, 40), 24), ((1, 16, 12, 12), 40)):
        model, feeds = _conv_model(shape, out_channels, [1, 1, 1, 1], residual=True)
        serial = run_aot(model, feeds)
        threaded = run_aot(model, feeds, parallel=True)
        np.testing.assert_array_equal(threaded["y"], serial["y"])


@pytest.mark.parametrize("attrs,channels", [
    ({"strides": [2, 2]}, 16),          # strided
    ({"dilations": [2, 2]}, 16),        # dilated
    ({"group": 2}, 16),                 # grouped
    ({}, 4),                            # too few channels: the transforms would not pay
    ({"size": 4}, 16),                  # 4 tiles, fewer than a vector's 8 lanes
], ids=["strided", "dilated", "grouped", "few_channels", "few_tiles"])
def test_other_convolutions_stay_direct(attrs: dict, channels: int) -> None:
    attrs = dict(attrs)
    size = attrs.pop("size", 12)
    x = rand(1, channels, size, size)
    w = rand(16, channels // attrs.get("group", 1), 3, 3, seed=1)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], **attrs)], {"x": x}, ["y"],
                       initializers={"w": w})
    assert "Conv/winograd" not in compile_model(model).files["test_graph.c"].decode()
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("size,channels,winograd", [(7, 512, False), (14, 256, True)], ids=["7x7_512", "14x14_256"])
def test_weight_bound_convolutions_stay_direct(size: int, channels: int, winograd: bool) -> None:
    """512 -> 512 at 7x7: 16 tiles for 16.8 MB of transformed weights, read from memory on every
    run (algorithm._winograd_weight_bound); 256 -> 256 at 14x14 has 49 tiles for 4.2 MB."""
    w = (rand(channels, channels, 3, 3, seed=1) * 0.05).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       {"x": rand(1, channels, size, size)}, ["y"], initializers={"w": w})
    source = compile_model(model, target="x86_64-v4").files["test_graph.c"].decode()
    assert ("Conv/winograd" in source) == winograd


def test_direct_algorithm_is_a_direct_sum() -> None:
    """conv_algorithm="direct" turns Winograd off (and says so in the manifest); a bad value is
    an error naming the option."""
    model, feeds = _conv_model((1, 16, 10, 10), 16, [1, 1, 1, 1])
    direct = compile_model(model, conv_algorithm="direct")
    assert "Conv/winograd" not in direct.files["test_graph.c"].decode()
    assert direct.manifest["conv_algorithm"] == "direct"
    assert compile_model(model).manifest["conv_algorithm"] == "auto"
    assert_matches_onnxruntime(model, feeds, conv_algorithm="direct")
    with pytest.raises(AotError, match="--conv-algorithm 'fast'"):
        compile_model(model, conv_algorithm="fast")


def test_nan_reaches_the_outputs_it_reaches_in_a_direct_sum() -> None:
    """A NaN input spoils exactly the outputs whose 3x3 window holds it, as in a direct sum (the
    transforms of F(2x2, 3x3) only mix a patch element into the outputs that read it)."""
    model, feeds = _conv_model((1, 8, 9, 10), 8, [1, 1, 1, 1], relu=False)
    x = feeds["x"].copy()
    for position in ((0, 0, 0, 0), (0, 3, 4, 5), (0, 7, 8, 9), (0, 2, 3, 0), (0, 5, 1, 7)):
        x[position] = np.nan
    winograd = run_aot(model, {"x": x})["c"]
    direct = run_aot(model, {"x": x}, conv_algorithm="direct")["c"]
    assert np.isnan(direct).any() and not np.isnan(direct).all()
    np.testing.assert_array_equal(np.isnan(winograd), np.isnan(direct))
    finite = ~np.isnan(direct)
    np.testing.assert_allclose(winograd[finite], direct[finite], rtol=1e-4, atol=1e-5)


def test_non_finite_weight_keeps_the_conv_direct() -> None:
    """An Inf or a NaN weight: G g G^T mixes every tap of a filter into all 16 transformed taps,
    so Winograd made the whole output channel NaN. Weights are known at compile time; such a Conv
    runs direct, and its output is the direct sum's, NaN for NaN, and onnxruntime's. (Unpadded:
    at a padded border a direct sum multiplies the padding's zeros, and 0 * Inf is NaN, where
    onnxruntime skips the padded taps.)"""
    model, feeds = _conv_model((1, 8, 12, 12), 8, [0, 0, 0, 0], relu=False)
    w = numpy_helper.to_array(model.graph.initializer[0]).copy()
    w[0, 0, 1, 1] = np.inf
    w[3, 2, 0, 0] = np.nan
    w[5, 7, 2, 1] = -np.inf
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    assert "Conv/winograd" not in compile_model(model).files["test_graph.c"].decode()
    ours = run_aot(model, feeds)["c"]
    np.testing.assert_array_equal(ours, run_aot(model, feeds, conv_algorithm="direct")["c"])
    reference = run_onnxruntime(model, feeds)["c"]
    assert np.isnan(reference).any() and not np.isnan(reference).all()
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(reference))
    np.testing.assert_array_equal(np.isinf(ours), np.isinf(reference))
    finite = np.isfinite(reference)
    np.testing.assert_allclose(ours[finite], reference[finite], rtol=1e-4, atol=1e-5)


def test_extreme_weight_range_keeps_the_conv_direct() -> None:
    """A filter with one tap 2^30 times its others (bytes of a weight damaged, as the fuzzer
    makes them): Winograd's rounding, which scales with the filter's largest tap, left tiny_cnn's
    output 5.7e-4 off against onnxruntime (tolerance 1e-4). Such a Conv runs direct, and matches;
    the undamaged model keeps Winograd."""
    model = onnx.load(str(Path(__file__).resolve().parent.parent / "examples" / "tiny_cnn.onnx"))
    assert "Conv/winograd" in compile_model(model).files["tiny_cnn.c"].decode()
    init = next(i for i in model.graph.initializer if i.name == "expand.w")
    w = numpy_helper.to_array(init).copy()
    w.flat[5] *= np.float32(2.0 ** 30)
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    assert "Conv/winograd" not in compile_model(model).files["tiny_cnn.c"].decode()
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    assert_matches_onnxruntime(model, {x.name: rand(*shape)})
