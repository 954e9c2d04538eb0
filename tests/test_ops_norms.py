"""LayerNormalization, InstanceNormalization and LRN against onnxruntime over their attributes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aot.commands.verify import compare
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_aot

LAYER_NORM_CASES = {
    # name: (x shape, axis, scale/bias shape (None: the normalised shape), attrs)
    "last_axis": ((2, 5, 16), -1, None, {}),
    "default_axis_2d": ((4, 7), None, None, {}),
    "axis1_of_3": ((2, 3, 8), 1, None, {}),
    "axis0": ((3, 4), 0, None, {}),
    "axis_neg2_4d": ((2, 3, 4, 5), -2, None, {}),
    "epsilon": ((2, 6, 10), -1, None, {"epsilon": 0.1}),
    "scale_broadcast": ((2, 3, 4, 5), 2, (5,), {}),
    "scale_broadcast_row": ((2, 3, 4, 5), 1, (1, 4, 5), {}),
}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("opset", [17, 18, 21])
@pytest.mark.parametrize("case", sorted(LAYER_NORM_CASES))
def test_layer_normalization(case: str, opset: int, bias: bool) -> None:
    shape, axis, param_shape, attrs = LAYER_NORM_CASES[case]
    rank = len(shape)
    norm_axis = (axis if axis is not None else -1) % rank
    param_shape = param_shape or shape[norm_axis:]
    x = rand(*shape) * 3 + 1
    inits = {"scale": rand(*param_shape, seed=1)}
    inputs = ["x", "scale"]
    if bias:
        inits["b"] = rand(*param_shape, seed=2)
        inputs.append("b")
    if axis is not None:
        attrs = {**attrs, "axis": axis}
    node = helper.make_node("LayerNormalization", inputs, ["y", "mean", "inv"], **attrs)
    model = make_model([node], {"x": x}, ["y", "mean", "inv"], inits, opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("node_outputs,graph_outputs", [
    (["y"], ["y"]), (["y", "mean"], ["y", "mean"]), (["y", "", "inv"], ["y", "inv"]),
    # Y computed by the node but read by nobody: only the statistics are stored.
    (["y", "mean", "inv"], ["mean", "inv"]),
], ids=str)
def test_layer_normalization_output_subsets(node_outputs: list[str], graph_outputs: list[str]) -> None:
    x = rand(3, 4, 6)
    node = helper.make_node("LayerNormalization", ["x", "scale", "b"], node_outputs, axis=-1)
    model = make_model([node], {"x": x}, graph_outputs, {"scale": rand(6, seed=1), "b": rand(6, seed=2)})
    assert_matches_onnxruntime(model, {"x": x})


def test_layer_normalization_runtime_scale() -> None:
    x, scale, b = rand(2, 3, 5), rand(5, seed=1), rand(5, seed=2)
    node = helper.make_node("LayerNormalization", ["x", "scale", "b"], ["y"])
    model = make_model([node], {"x": x, "scale": scale, "b": b}, ["y"])
    assert_matches_onnxruntime(model, {"x": x, "scale": scale, "b": b})


@pytest.mark.parametrize("opset", [7, 17, 21])
@pytest.mark.parametrize("shape,epsilon", [((2, 3, 5, 4), None), ((1, 4, 9), 0.01), ((2, 2, 3, 2, 3), 1e-3)],
                         ids=str)
def test_instance_normalization(shape: tuple[int, ...], epsilon: float | None, opset: int) -> None:
    x = rand(*shape) * 2 - 0.5
    attrs = {} if epsilon is None else {"epsilon": epsilon}
    node = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], **attrs)
    channels = shape[1]
    model = make_model([node], {"x": x}, ["y"], {"s": rand(channels, seed=1), "b": rand(channels, seed=2)},
                       opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("opset", [7, 13])
@pytest.mark.parametrize("size,attrs", [
    (3, {}), (5, {"alpha": 0.002, "beta": 0.5, "bias": 2.0}), (1, {"bias": 0.5}), (9, {"alpha": 0.01}),
    (7, {"beta": 0.9}),
], ids=str)
def test_lrn(size: int, attrs: dict, opset: int) -> None:
    x = rand(2, 6, 4, 3) * 3
    node = helper.make_node("LRN", ["x"], ["y"], size=size, **attrs)
    model = make_model([node], {"x": x}, ["y"], opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


def _lrn_spec(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> np.ndarray:
    """The ONNX LRN formula in float64, for what onnxruntime rejects (even sizes, rank != 4) and
    onnx's reference cannot do (it only takes 4-D input and sums the wrong axis)."""
    x64 = x.astype(np.float64)
    channels = x.shape[1]
    square_sum = np.zeros_like(x64)
    for c in range(channels):
        lo, hi = max(0, c - (size - 1) // 2), min(channels - 1, c + -(-(size - 1) // 2))
        square_sum[:, c] = (x64[:, lo:hi + 1] ** 2).sum(axis=1)
    return (x64 / (bias + alpha / size * square_sum) ** beta).astype(x.dtype)


@pytest.mark.parametrize("shape,size,attrs", [
    ((2, 6, 4, 3), 2, {"alpha": 0.1}), ((2, 6, 4, 3), 4, {"beta": 0.9, "alpha": 0.05}), ((1, 5, 7), 3, {"alpha": 0.05}),
    ((1, 4, 2, 3, 2), 5, {"alpha": 0.3, "bias": 1.5}), ((1, 3, 4), 6, {"alpha": 0.2}),
], ids=str)
def test_lrn_beyond_onnxruntime(shape: tuple[int, ...], size: int, attrs: dict) -> None:
    x = rand(*shape) * 3
    model = make_model([helper.make_node("LRN", ["x"], ["y"], size=size, **attrs)], {"x": x}, ["y"])
    ours = run_aot(model, {"x": x})["y"]
    result = compare("y", ours, _lrn_spec(x, size, **attrs), 1e-4)
    assert result.passed, result


def test_layer_normalization_constant_rows_give_bias() -> None:
    """A row with zero variance normalises to 0 (then y = bias): 1/sqrt(eps) stays finite."""
    x = np.full((2, 8), 3.0, dtype=np.float32)
    node = helper.make_node("LayerNormalization", ["x", "scale", "b"], ["y"])
    model = make_model([node], {"x": x}, ["y"], {"scale": rand(8, seed=1), "b": rand(8, seed=2)})
    out = assert_matches_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(out["y"], np.broadcast_to(rand(8, seed=2), (2, 8)), atol=1e-6)
