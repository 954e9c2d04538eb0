"""Register tiles (aot/ops/contraction/register_tiles.py) for every target's vector registers: the tile
shapes chosen, and Conv/Gemm/MatMul through each shape against onnxruntime."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import aot.pipeline
from aot.compiler import compile as compile_model
from aot.lowering.tiles import DEFAULT_TILES, TileConfig
from aot.targets import Int8Dot, host_preset_name, load_target
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_aot, run_onnxruntime

SHAPES = {
    "sse-neon": TileConfig(4, 12),
    "avx2": DEFAULT_TILES,
    "avx512": TileConfig(16, 24, registers=32, l2_bytes=1 << 20),
    "scalar": TileConfig(1, 12),
    # aarch64's: broadcast operands loaded four at a time, each row taking one lane
    "aarch64-lanes": TileConfig(4, 24, registers=32, lane_broadcasts=True),
    # armv7's: 4 rows x 2 vectors, multiplied by an unfused lane (vmla by scalar on the target)
    "armv7-lanes": TileConfig(4, 12, registers=16, lane_broadcasts=True, lane_multiply_fused=False,
                              compilers_vectorise_floats=False),
}


def test_tile_shapes_follow_the_registers() -> None:
    assert TileConfig.for_registers(512, 32) == TileConfig(16, 24, registers=32)
    assert TileConfig.for_registers(256, 16) == TileConfig(8, 12)
    assert TileConfig.for_registers(0, 16).lanes == 1
    wide = TileConfig(16, 24, registers=32)
    assert [wide.width_for(c) for c in (40, 16, 12, 8, 5, 4, 3)] == [16, 16, 8, 8, 4, 4, 1]
    # as many rows as the budget allows, evened out over the blocks (64 = 6 blocks of 11 or fewer)
    assert wide.rows_for(32, 64) == 11 and wide.rows_for(16, 64) == 16 and wide.rows_for(32, 5) == 5
    assert wide.rows_for(32, 16) == 8 and TileConfig(8, 12).rows_for(16, 16) == 6 and wide.rows_for(32, 12) == 12
    # the accumulators, a row's operand vectors and a broadcast fit the registers: armv7 (16 registers
    # of 4 floats) tiles 16 columns (4 vectors) in 2 rows, not the 3 its 12 accumulators would allow
    armv7, aarch64 = TileConfig.for_registers(128, 16), TileConfig.for_registers(128, 32)
    assert armv7.rows_for(16, 64) == 2 and armv7.rows_for(8, 64) == 6 and aarch64.rows_for(16, 64) == 6
    # Presets carry their register files; the compiler takes the narrowest of several targets.
    # and their int8 dot instruction (one C source for several: portable if any of them has none)
    assert aot.pipeline.tiles_for([load_target("x86_64-v4")]) == TileConfig(16, 24, Int8Dot("vpmaddwd"), 32,
                                                                             l2_bytes=1 << 20)
    assert aot.pipeline.tiles_for([load_target("x86_64-v4"), load_target("rpi3")]) == TileConfig(
        4, 12, Int8Dot("auto"), 16, lane_multiply_fused=False, compilers_vectorise_floats=False)
    assert aot.pipeline.tiles_for([load_target("rpi4"), load_target("cortex-m7")]).int8_dot == Int8Dot("portable")
    # No target: the package is for the machine that compiles it, with its preset's tiles.
    assert aot.pipeline.tiles_for([]) == aot.pipeline.tiles_for([load_target(host_preset_name())])


def test_aarch64_tiles_take_broadcasts_by_lane(tmp_path: Path) -> None:
    """On Arm a tile's broadcast operands, consecutive floats, are one vector load whose lanes
    the multiply-add takes (aarch64's by-element fmla, one load where four broadcasts took
    four; armv7's vmla by scalar, in tiles of 4 rows x 2 vectors); x86 broadcasts from
    memory, so it keeps its broadcasts."""
    lanes = {t: aot.pipeline.tiles_for([load_target(t)]) for t in ("rpi4", "rpi5", "aarch64", "rpi3", "rpi-zero2",
                                                                     "x86_64", "x86_64-v4", "cortex-m7")}
    by_lane = [t for t, tiles in lanes.items() if tiles.lane_broadcasts]
    assert by_lane == ["rpi4", "rpi5", "aarch64", "rpi3", "rpi-zero2"]
    # armv7 (16 registers): tiles of 4 rows x 2 vectors, where broadcasts by lane pay
    assert lanes["rpi3"].by_scalar and lanes["rpi3"].cols == 8 and lanes["rpi3"].rows_for(8, 64) == 4
    assert lanes["rpi3"].one_by_one().cols == 16 and not lanes["rpi4"].by_scalar
    model, _ = _conv((1, 16, 12, 12), 22, kernel=(1, 1))  # 22 output channels: 4 groups and a ragged one
    text = compile_model(model, target="rpi4", conv_algorithm="direct").files["test_graph.c"].decode()
    assert "AOT_F32X4_MULADD_LANE(" in text
    assert "_LANE(" not in compile_model(model, target="x86_64", conv_algorithm="direct").files[
        "test_graph.c"].decode()
    # The header's portable form (no GNU vectors) has the macro too.
    package = compile_model(model, target="rpi4", conv_algorithm="direct").write(tmp_path / "pkg")
    built = subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-DAOT_NO_VECTOR_EXTENSIONS",
                            "-I", str(package), "-c", str(package / "test_graph.c"), "-o", str(tmp_path / "m.o")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr


def test_armv7_tiles_keep_their_broadcasts_four_rows_per_load() -> None:
    """armv7's by-lane tiles: 9 pixels go as 5 + 4 rows (two broadcast loads each), not 3 x 3
    rows (an operand load per row); long runs stay 4 rows."""
    rpi3 = aot.pipeline.tiles_for([load_target("rpi3")])
    assert [rpi3.rows_for(8, n) for n in (4, 5, 6, 9, 10, 49, 64, 196)] == [4, 5, 4, 5, 5, 4, 4, 4]


@pytest.mark.qemu
@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_armv7_five_row_tiles_under_qemu(backend: str) -> None:
    """A 1x1 conv over 3x3 pixels (MobileNet's last stage) in armv7's 5 + 4 row tiles, under qemu:
    the second broadcast load of a 5-row block overlaps the first."""
    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable
    from tests.helpers import assert_outputs_match

    problem = cross_unavailable("rpi3")
    if problem:
        pytest.skip(problem)
    model, feeds = _conv((1, 32, 3, 3), 20, kernel=(1, 1))
    package = compile_model(model, backend=backend, target="rpi3")
    text = package.files["test_graph.c"].decode()
    # the 5th row from lane 3 of the load at the 2nd: blocks of 5 rows x 2 vectors, then 4 rows
    assert "vacc9 = AOT_F32X4_MULADD_LANE(vacc9, vb1, vab1, 3);" in text
    built = TargetModel.build(package, load_target("rpi3"))
    assert_outputs_match(built.run(feeds), model, feeds)


@pytest.mark.qemu
@pytest.mark.parametrize(("target", "backend"), [("rpi3", "c"), ("rpi3", "llvm"), ("rpi4", "c"), ("rpi4", "llvm")])
def test_arm_kernel_row_taps_by_lane_under_qemu(target: str, backend: str) -> None:
    """A 5x5 conv in channel tiles (MNIST's second): a tile's 2 pixels x 5 taps of a kernel row
    are 6 consecutive floats, loaded as 2 vectors whose lanes the taps multiply by, under qemu
    (TileConfig.lanes_across_steps: not for gcc on aarch64, whose tiles keep their broadcasts)."""
    from aot.toolchain.target_build import TargetModel
    from tests.conformance import cross_unavailable
    from tests.helpers import assert_outputs_match

    problem = cross_unavailable(target)
    if problem:
        pytest.skip(problem)
    model, feeds = _conv((1, 8, 14, 14), 16, kernel=(5, 5), pads=[2, 2, 2, 2])
    package = compile_model(model, backend=backend, target=target)
    text = package.files["test_graph.c"].decode()
    shared = (target, backend) != ("rpi4", "c")
    assert ("AOT_F32X4_SPLAT_LOAD(" not in text) == shared and "AOT_F32X4_MULADD_LANE(" in text
    built = TargetModel.build(package, load_target(target))
    assert_outputs_match(built.run(feeds), model, feeds)


def _conv(shape: tuple[int, ...], out_channels: int, group: int = 1, kernel: tuple[int, int] = (3, 3),
          **attrs: object):
    x = rand(*shape)
    w = rand(out_channels, shape[1] // group, *kernel, seed=1)
    b = rand(out_channels, seed=2)
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], group=group, **attrs)
    relu = helper.make_node("Relu", ["c"], ["y"])
    return make_model([node, relu], {"x": x}, ["y"], initializers={"w": w, "b": b}), {"x": x}


CASES = {
    # odd widths: whole vectors, an overlapping last vector, narrower vectors, scalars
    "conv_13x13": lambda: _conv((1, 8, 13, 13), 10, pads=[1, 1, 1, 1]),
    "conv_5_wide": lambda: _conv((1, 4, 9, 5), 6, pads=[1, 1, 1, 1]),
    "conv_stride2": lambda: _conv((1, 6, 17, 23), 7, strides=[2, 2], pads=[1, 0, 1, 2]),
    "conv_stride3_dilated": lambda: _conv((1, 3, 20, 31), 5, strides=[3, 3], dilations=[2, 2]),
    "depthwise": lambda: _conv((1, 6, 11, 19), 6, group=6, pads=[1, 1, 1, 1]),
    # a keyword-spotting stem: narrow strided output through the column matrix (im2col)
    "strided_narrow_im2col": lambda: _conv((1, 2, 49, 10), 9, kernel=(10, 4), strides=[2, 2], pads=[4, 1, 5, 1]),
    # inputs beyond L2 (TiledConv._streams_input): output rows outermost, the padded or
    # phase-split copy row-interleaved (interleave_rows)
    "conv_streamed_rows": lambda: _conv((1, 40, 66, 64), 40, pads=[1, 1, 1, 1]),
    "conv_streamed_stride2": lambda: _conv((1, 32, 80, 81), 24, strides=[2, 2], pads=[1, 1, 1, 0]),
    "grid_ragged_rows": lambda: _conv((1, 5, 9, 37), 7, pads=[1, 1, 1, 1]),
    # few pixels, many channels: tiles vectorised over output channels
    "pointwise_3x3_image": lambda: _conv((1, 24, 3, 3), 70, kernel=(1, 1)),
    "pointwise_7x5_image": lambda: _conv((2, 9, 7, 5), 37, kernel=(1, 1)),
    "conv3x3_8x8_image": lambda: _conv((1, 6, 8, 8), 40, pads=[1, 1, 1, 1]),
    "conv3x3_strided_small_image": lambda: _conv((1, 8, 14, 13), 40, strides=[2, 2], pads=[1, 1, 1, 0]),
    "conv3x3_7x7_dilated": lambda: _conv((1, 5, 11, 11), 36, pads=[2, 2, 2, 2], dilations=[2, 2]),
    # depthwise with 'same' padding over the flattened image (TiledConv flat mode): rows of 5 and
    # 3 pixels, channel blocks with a tail (37 = 4 x 8 + 5 at 12x12), one channel per block at
    # 48x48, asymmetric 'same' padding of even kernels, a 1 x 5 kernel, two images
    "depthwise_flat_5_wide": lambda: _conv((2, 24, 25, 5), 24, group=24, pads=[1, 1, 1, 1]),
    "depthwise_flat_3x3_image": lambda: _conv((1, 70, 3, 3), 70, group=70, pads=[1, 1, 1, 1]),
    "depthwise_flat_block_tail": lambda: _conv((1, 37, 12, 12), 37, group=37, pads=[1, 1, 1, 1]),
    "depthwise_flat_48x48": lambda: _conv((1, 3, 48, 48), 3, group=3, pads=[1, 1, 1, 1]),
    "depthwise_flat_even_kernel": lambda: _conv((1, 5, 9, 7), 5, group=5, kernel=(4, 2), pads=[1, 0, 2, 1]),
    "depthwise_flat_1x5": lambda: _conv((1, 6, 4, 11), 6, group=6, kernel=(1, 5), pads=[0, 2, 0, 2]),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_through_each_tile_shape(monkeypatch: pytest.MonkeyPatch, shape: str, case: str) -> None:
    """The direct convolutions' tile modes (the 3x3 cases would otherwise go through Winograd,
    which tests/test_ops_conv_winograd.py checks through the same shapes)."""
    monkeypatch.setattr(aot.pipeline, "tiles_for", lambda targets, backend="c": SHAPES[shape])
    model, inputs = CASES[case]()
    assert_matches_onnxruntime(model, inputs, conv_algorithm="direct")


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_channel_tiles_with_residual_epilogue(monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """A 1x1 conv on a 3x3 image whose epilogue adds a same-shape residual and clips."""
    monkeypatch.setattr(aot.pipeline, "tiles_for", lambda targets, backend="c": SHAPES[shape])
    x, r = rand(1, 20, 3, 3), rand(1, 48, 3, 3, seed=5)
    w, b = rand(48, 20, 1, 1, seed=1), rand(48, seed=2)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Add", ["c", "r"], ["s"]),
             helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
    model = make_model(nodes, {"x": x, "r": r}, ["y"], initializers={
        "w": w, "b": b, "lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)})
    assert_matches_onnxruntime(model, {"x": x, "r": r})


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("m,k,n", [(1, 37, 50), (7, 19, 33), (16, 64, 40)])
def test_gemm_and_matmul_through_each_tile_shape(monkeypatch: pytest.MonkeyPatch, shape: str, m: int, k: int,
                                                 n: int) -> None:
    monkeypatch.setattr(aot.pipeline, "tiles_for", lambda targets, backend="c": SHAPES[shape])
    a, w, c = rand(m, k), rand(n, k, seed=1), rand(n, seed=2)
    gemm = make_model([helper.make_node("Gemm", ["a", "w", "c"], ["y"], transB=1, alpha=0.5)], {"a": a}, ["y"],
                      initializers={"w": w, "c": c})
    assert_matches_onnxruntime(gemm, {"a": a})
    b = rand(2, k, n, seed=3)
    matmul = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": np.stack([a, a * 2]), "b": b}, ["y"])
    assert_matches_onnxruntime(matmul, {"a": np.stack([a, a * 2]), "b": b})
    # constant weights shared by every batch entry (stored as column panels)
    weights = make_model([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": np.stack([a, a * 2])}, ["y"],
                         initializers={"w": b[0]})
    assert_matches_onnxruntime(weights, {"a": np.stack([a, a * 2])})


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 3], "strides": [2, 3], "dilations": [2, 1], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [2, 1, 2, 1]},
    # row maxima of 35 rows x 92 columns exceed WHOLE_PLANE_BYTES: one row at a time
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "size": (70, 90)},
], ids=["s2_ceil", "s1_padded", "dilated_strided", "wide_padding", "row_by_row"])
def test_max_pool_vectors(monkeypatch: pytest.MonkeyPatch, shape: str, attrs: dict) -> None:
    """MaxPool in vectors, window rows then window columns (-inf padding). A NaN propagates to
    every window holding it, as a +inf would (onnxruntime's result for NaN depends on where in the
    window it sits, so the reference is computed with +inf in its place)."""
    monkeypatch.setattr(aot.pipeline, "tiles_for", lambda targets, backend="c": SHAPES[shape])
    attrs = dict(attrs)
    x = rand(1, 3, *attrs.pop("size", (19, 37)))
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})
    x[0, 1, 4, 7] = np.inf
    reference = run_onnxruntime(model, {"x": x})["y"]
    x[0, 1, 4, 7] = np.nan
    ours = run_aot(model, {"x": x})["y"]
    assert np.array_equal(np.isnan(ours), np.isinf(reference)) and np.isnan(ours).any()
    np.testing.assert_array_equal(ours[~np.isnan(ours)], reference[~np.isinf(reference)])


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1, "count_include_pad": 1},
    {"kernel_shape": [2, 3], "strides": [2, 3], "dilations": [2, 1], "pads": [0, 1, 1, 0]},
    {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [2, 1, 2, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "size": (70, 90)},
], ids=["s1_padded", "s1_padded_include_pad", "s2_ceil", "s2_ceil_include_pad", "dilated_strided", "wide_padding",
        "row_by_row"])
def test_average_pool_vectors(monkeypatch: pytest.MonkeyPatch, shape: str, attrs: dict) -> None:
    """AveragePool in the same two vector passes as MaxPool (sums, zero padding), each output
    divided by its window's count: the counted rows times the counted columns, with and without
    count_include_pad, ceil_mode windows passing even the padding."""
    monkeypatch.setattr(aot.pipeline, "tiles_for", lambda targets, backend="c": SHAPES[shape])
    attrs = dict(attrs)
    x = rand(1, 3, *attrs.pop("size", (19, 37)))
    model = make_model([helper.make_node("AveragePool", ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=19)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("shape", ["avx512", "sse-neon"])
def test_flat_depthwise_keeps_inf_out_of_the_padding(monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """The flat depthwise conv reads across row ends into cells its shifted copies zero: an
    infinity in the first or last column must reach only the outputs whose window holds it
    (multiplying by a 0/1 mask instead would turn inf * 0 into NaN in the next row)."""
    monkeypatch.setattr(aot.pipeline, "tiles_for", lambda targets, backend="c": SHAPES[shape])
    model, inputs = _conv((1, 4, 6, 5), 4, group=4, pads=[1, 1, 1, 1])
    x = inputs["x"].copy()
    x[0, :, 2, 4] = np.inf
    x[0, 1, 4, 0] = -np.inf
    ours, = run_aot(model, {"x": x}).values()
    expected, = run_onnxruntime(model, {"x": x}).values()
    assert np.array_equal(np.isnan(ours), np.isnan(expected)) and np.array_equal(np.isinf(ours), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(ours[finite], expected[finite], rtol=1e-5, atol=1e-5)


def _copy_store_offsets(source: str) -> list[int]:
    """The first index each shifted copy of a flat depthwise conv stores to (its loop at 0)."""
    stores = re.findall(r"^\s*shifted\[([0-9 +()]*\bs\d+[0-9 +()]*)\] = x\[", source, re.MULTILINE)
    return [eval(re.sub(r"\bs\d+", "0", index)) for index in stores]  # noqa: S307 - integers and + only


@pytest.mark.parametrize("target,lanes", [("x86_64-v3", 8), ("x86_64-v4", 16)])
def test_flat_depthwise_copies_store_whole_aligned_vectors(target: str, lanes: int) -> None:
    """With 32- and 64-byte vectors each shifted copy of a plane starts on a vector boundary
    of the arena, so that no vector store of the copy spans two cache lines; the results stay
    exact (the unread lead before each copy is never loaded)."""
    model, inputs = CASES["depthwise_flat_48x48"]()
    package = compile_model(model, target=target)
    offsets = _copy_store_offsets(package.files[f"{model.graph.name}.c"].decode())
    assert len(offsets) == 3 and all(offset % lanes == 0 for offset in offsets), offsets
    if target == "x86_64-v3":  # this machine runs it (x86_64-v4 needs AVX-512)
        assert_matches_onnxruntime(model, inputs, target=target)
    rpi4 = _copy_store_offsets(compile_model(model, target="rpi4").files[f"{model.graph.name}.c"].decode())
    assert [offset % 4 for offset in rpi4] == [1, 3, 1], rpi4  # NEON: as before (fewer instructions)
