"""Data-movement ops (aot/ops/movement.py) against onnxruntime: Expand, Tile, Pad (constant,
reflect, edge and wrap modes; pads as attribute or input, axes, negative pads, run-time fill
value), DepthToSpace (DCR and CRD) and SpaceToDepth."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from aot.errors import AotError
from tests.helpers import assert_matches_onnxruntime, make_model, rand


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: object):
    return helper.make_node(op, inputs, outputs or ["y"], **attrs)


def check(nodes, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None,
          opset: int = 17) -> None:
    assert_matches_onnxruntime(make_model(nodes, inputs, ["y"], inits, opset=opset), inputs)


EXPAND_CASES = {
    "row_to_matrix": ((1, 4), [3, 4]),
    "column": ((3, 1), [3, 5]),
    "new_leading_dims": ((3, 1), [2, 1, 3, 4]),
    "shape_shorter_than_input": ((2, 3, 1), [1, 4]),
    "scalar": ((), [2, 3]),
    "same_shape": ((2, 3), [2, 3]),
}


@pytest.mark.parametrize("opset", [8, 13])
@pytest.mark.parametrize("case", sorted(EXPAND_CASES))
def test_expand(case: str, opset: int) -> None:
    shape, target = EXPAND_CASES[case]
    x = rand(*shape) if shape else np.array(1.5, np.float32)
    check([node("Expand", ["x", "s"])], {"x": x}, {"s": np.array(target, np.int64)}, opset=opset)


@pytest.mark.parametrize("op,target,value", [("Expand", (3, 4), [3, 1]), ("Tile", (4, 8), [2, 2])], ids=str)
def test_shape_input_at_run_time(op: str, target: tuple[int, ...], value: list[int]) -> None:
    """The output's static shape decides, as for Reshape; the shape/repeats input is not read."""
    feeds = {"x": rand(2, 4) if op == "Tile" else rand(1, 4), "s": np.array(value, np.int64)}
    model = make_model([node(op, ["x", "s"])], feeds, ["y"])
    dims = model.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    for d in target:
        dims.add().dim_value = d
    assert_matches_onnxruntime(model, feeds)


def test_expand_integer_and_bool_data() -> None:
    check([node("Expand", ["x", "s"])], {"x": np.array([[1], [2]], np.int64)}, {"s": np.array([2, 3], np.int64)})
    check([node("Expand", ["x", "s"])], {"x": np.array([True, False])}, {"s": np.array([3, 2], np.int64)})


TILE_CASES = {
    "1d": ((3,), [4]),
    "2d": ((2, 3), [2, 3]),
    "one_axis": ((2, 3, 2), [1, 3, 1]),
    "identity": ((2, 3), [1, 1]),
}


@pytest.mark.parametrize("opset", [6, 13])
@pytest.mark.parametrize("case", sorted(TILE_CASES))
def test_tile(case: str, opset: int) -> None:
    shape, repeats = TILE_CASES[case]
    check([node("Tile", ["x", "r"])], {"x": rand(*shape)}, {"r": np.array(repeats, np.int64)}, opset=opset)


def test_tile_integer_data() -> None:
    check([node("Tile", ["x", "r"])], {"x": np.arange(6, dtype=np.int32).reshape(2, 3)},
          {"r": np.array([3, 2], np.int64)})


PAD_CASES = {
    "both_sides": ((3, 4), [1, 2, 2, 1]),
    "one_axis": ((2, 3, 4), [0, 0, 2, 0, 0, 3]),
    "4d_spatial": ((1, 2, 3, 3), [0, 0, 1, 2, 0, 0, 2, 1]),
    "negative_crop": ((4, 5), [-1, 2, 1, -2]),
    "crop_and_pad_same_axis": ((6,), [-2, 3]),
    "zero": ((2, 3), [0, 0, 0, 0]),
}
MODES = ["constant", "reflect", "edge", "wrap"]


# Negative pads (cropping) only in constant mode: numpy, ONNX's reference, refuses them in the
# other modes, so their meaning there is not pinned down.
PAD_PARAMS = [(case, mode) for case in sorted(PAD_CASES) for mode in MODES
              if mode == "constant" or min(PAD_CASES[case][1]) >= 0]


@pytest.mark.parametrize("case,mode", PAD_PARAMS, ids=[f"{c}-{m}" for c, m in PAD_PARAMS])
def test_pad(case: str, mode: str) -> None:
    shape, pads = PAD_CASES[case]
    x = rand(*shape)
    inits = {"p": np.array(pads, np.int64)}
    opset = 19 if mode == "wrap" else 13
    if mode == "constant":
        inits["v"] = np.array(2.5, np.float32)
        check([node("Pad", ["x", "p", "v"], mode=mode)], {"x": x}, inits, opset=opset)
    else:
        check([node("Pad", ["x", "p"], mode=mode)], {"x": x}, inits, opset=opset)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_opset2_attributes(mode: str) -> None:
    x = rand(3, 4)
    check([node("Pad", ["x"], mode=mode, pads=[1, 2, 2, 1], value=-1.0)], {"x": x}, opset=2)


@pytest.mark.parametrize("mode", MODES)
def test_pad_axes_input(mode: str) -> None:
    x = rand(2, 3, 4)
    inits = {"p": np.array([1, 2, 2, 1], np.int64), "a": np.array([-1, 1], np.int64)}
    check([node("Pad", ["x", "p", "", "a"], mode=mode)], {"x": x}, inits, opset=19)


def test_pad_fill_value_at_run_time() -> None:
    x = rand(2, 3)
    check([node("Pad", ["x", "p", "v"])], {"x": x, "v": np.array(7.0, np.float32)},
          {"p": np.array([1, 0, 0, 2], np.int64)}, opset=11)


def test_pad_reflect_wider_than_the_axis() -> None:
    """Reflect pads of up to n - 1 elements (the most onnxruntime takes) on a short axis."""
    check([node("Pad", ["x", "p"], mode="reflect")], {"x": rand(3, 2)}, {"p": np.array([2, 1, 2, 1], np.int64)},
          opset=13)


@pytest.mark.parametrize("mode", MODES)
def test_pad_integer_data(mode: str) -> None:
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    check([node("Pad", ["x", "p"], mode=mode)], {"x": x}, {"p": np.array([1, 1, 2, 2], np.int64)}, opset=19)


def test_pad_runtime_pads_are_refused() -> None:
    x = rand(2, 3)
    model = make_model([node("Pad", ["x", "p"], name="grow")], {"x": x, "p": np.array([0, 1, 0, 1], np.int64)},
                       ["y"], opset=13)
    dims = model.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    for d in (2, 5):
        dims.add().dim_value = d
    with pytest.raises(AotError, match=r"node 'grow' \(Pad\): input 1 \(pads.*compile-time constant"):
        compile_model(model)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("shape,block", [((1, 8, 2, 3), 2), ((2, 18, 2, 2), 3), ((1, 4, 1, 1), 2)], ids=str)
def test_depth_to_space(shape: tuple[int, ...], block: int, mode: str, opset: int) -> None:
    check([node("DepthToSpace", ["x"], blocksize=block, mode=mode)], {"x": rand(*shape)}, opset=opset)


def test_depth_to_space_opset1_default_mode() -> None:
    check([node("DepthToSpace", ["x"], blocksize=2)], {"x": rand(1, 8, 3, 2)}, opset=9)


@pytest.mark.parametrize("opset", [7, 13])
@pytest.mark.parametrize("shape,block", [((1, 2, 4, 6), 2), ((2, 3, 6, 3), 3), ((1, 1, 2, 2), 2)], ids=str)
def test_space_to_depth(shape: tuple[int, ...], block: int, opset: int) -> None:
    check([node("SpaceToDepth", ["x"], blocksize=block)], {"x": rand(*shape)}, opset=opset)


def test_depth_to_space_then_space_to_depth() -> None:
    x = rand(2, 12, 3, 2)
    for mode in ("DCR", "CRD"):
        check([node("DepthToSpace", ["x"], ["s"], blocksize=2, mode=mode), node("SpaceToDepth", ["s"], blocksize=2)],
              {"x": x}, opset=13)
