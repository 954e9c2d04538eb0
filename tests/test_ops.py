"""Every op of the foundation set against onnxruntime on random inputs, over its attribute variants.

Each case compiles a one- or two-node model with aot, builds it with -Werror -pedantic, runs it on
the host and compares with onnxruntime (tolerance 1e-4 relative to the output's scale).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aot.targets import host_preset_name
from tests.helpers import (
    assert_matches_onnxruntime,
    host_runs,
    make_model,
    rand,
    run_aot,
    run_onnxruntime,
    selected_backend,
)


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: object):
    return helper.make_node(op, inputs, outputs or ["y"], **attrs)


CONV_CASES = {
    "basic": ((1, 3, 8, 8), (4, 3, 3, 3), {}),
    "pads": ((1, 3, 8, 8), (4, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "asymmetric_pads": ((1, 2, 7, 9), (3, 2, 3, 2), {"pads": [0, 1, 2, 0]}),
    "strides": ((2, 3, 9, 9), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "dilations": ((1, 2, 10, 10), (3, 2, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "groups": ((1, 4, 6, 6), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "depthwise": ((1, 8, 7, 7), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "pointwise": ((1, 16, 5, 5), (8, 16, 1, 1), {}),
    "same_upper": ((1, 3, 7, 7), (2, 3, 4, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "same_lower": ((1, 3, 7, 7), (2, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    "valid": ((1, 3, 7, 7), (2, 3, 3, 3), {"auto_pad": "VALID"}),
    "conv1d": ((2, 3, 11), (5, 3, 3), {"pads": [1, 1], "strides": [2]}),
    "conv3d": ((1, 2, 5, 6, 4), (3, 2, 3, 3, 2), {"pads": [1, 1, 0, 1, 1, 1]}),
    "rectangular": ((1, 3, 10, 6), (2, 3, 5, 1), {"pads": [2, 0, 2, 0]}),
}


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_conv(case: str, bias: bool) -> None:
    x_shape, w_shape, attrs = CONV_CASES[case]
    inits = {"w": rand(*w_shape, seed=1)}
    inputs = ["x", "w"]
    if bias:
        inits["b"] = rand(w_shape[0], seed=2)
        inputs.append("b")
    x = rand(*x_shape)
    model = make_model([node("Conv", inputs, **attrs)], {"x": x}, ["y"], inits)
    assert_matches_onnxruntime(model, {"x": x})


def test_conv_weights_as_runtime_input() -> None:
    x, w = rand(1, 2, 5, 5), rand(3, 2, 3, 3, seed=1)
    model = make_model([node("Conv", ["x", "w"], pads=[1, 1, 1, 1])], {"x": x, "w": w}, ["y"])
    assert_matches_onnxruntime(model, {"x": x, "w": w})


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (5,), (1, 5), (3, 5), (3, 1)], ids=str)
def test_gemm(trans_a: int, trans_b: int, c_shape: tuple[int, ...] | None) -> None:
    a = rand(4, 3) if trans_a else rand(3, 4)
    b = rand(5, 4, seed=1) if trans_b else rand(4, 5, seed=1)
    inits = {"b": b}
    inputs = ["a", "b"]
    if c_shape is not None:
        inits["c"] = rand(*c_shape, seed=2)
        inputs.append("c")
    model = make_model([node("Gemm", inputs, transA=trans_a, transB=trans_b, alpha=0.7, beta=1.3)],
                       {"a": a}, ["y"], inits)
    assert_matches_onnxruntime(model, {"a": a})


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((1, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4,)),
], ids=str)
def test_matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a, b = rand(*a_shape), rand(*b_shape, seed=1)
    model = make_model([node("MatMul", ["a", "b"])], {"a": a, "b": b}, ["y"])
    assert_matches_onnxruntime(model, {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1)), ((1, 3, 1), (2, 1, 4)), ((2, 3), ()),
    ((), (2, 3)), ((5,), (1,)),
], ids=str)
def test_binary_broadcast(op: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    a, b = rand(*a_shape), rand(*b_shape, seed=1)
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 0.5, b).astype(np.float32)
    model = make_model([node(op, ["a", "b"])], {"a": a, "b": b}, ["y"])
    assert_matches_onnxruntime(model, {"a": a, "b": b})


def test_binary_same_input_twice() -> None:
    x = rand(3, 4)
    model = make_model([node("Mul", ["x", "x"])], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("op,attrs", [
    ("Relu", {}), ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.2}), ("Sigmoid", {}), ("Tanh", {}),
], ids=lambda v: str(v))
def test_activation(op: str, attrs: dict) -> None:
    x = rand(2, 3, 5) * 4
    model = make_model([node(op, ["x"], **attrs)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


def test_activations_on_special_values() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 100.0, -100.0, 1e-30], dtype=np.float32)
    for op in ("Relu", "Sigmoid", "Tanh", "LeakyRelu"):
        model = make_model([node(op, ["x"])], {"x": x}, ["y"])
        assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("bounds", [(-0.5, 0.5), (0.0, 6.0), (None, 0.3), (-0.3, None), (None, None)], ids=str)
def test_clip_opset13_inputs(bounds: tuple[float | None, float | None]) -> None:
    x = rand(3, 7) * 3
    inits, inputs = {}, ["x"]
    lo, hi = bounds
    inputs.append("lo" if lo is not None else "")
    if lo is not None:
        inits["lo"] = np.array(lo, dtype=np.float32)
    if hi is not None:
        inputs.append("hi")
        inits["hi"] = np.array(hi, dtype=np.float32)
    model = make_model([node("Clip", inputs)], {"x": x}, ["y"], inits, opset=13)
    assert_matches_onnxruntime(model, {"x": x})


def test_clip_opset6_attributes() -> None:
    x = rand(3, 7) * 3
    model = make_model([node("Clip", ["x"], min=-1.0, max=2.0)], {"x": x}, ["y"], opset=6)
    assert_matches_onnxruntime(model, {"x": x})


POOL_CASES = {
    "basic": ((1, 2, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    "overlap": ((1, 2, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    "pads": ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "asym_pads": ((1, 2, 7, 8), {"kernel_shape": [3, 2], "pads": [1, 0, 0, 1]}),
    "ceil_mode": ((1, 2, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    "ceil_mode_pads": ((1, 1, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                       "ceil_mode": 1}),
    "same_upper": ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    "same_lower": ((1, 2, 7, 7), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    "pool1d": ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
    "pool3d": ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 1, 2]}),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_maxpool(case: str) -> None:
    shape, attrs = POOL_CASES[case]
    x = rand(*shape)
    model = make_model([node("MaxPool", ["x"], **attrs)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


def test_maxpool_dilations_and_indices() -> None:
    x = rand(1, 2, 9, 9)
    attrs = {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1]}
    model = make_model([node("MaxPool", ["x"], ["y", "idx"], **attrs)], {"x": x}, ["y", "idx"])
    assert_matches_onnxruntime(model, {"x": x})


def test_maxpool_indices_column_major() -> None:
    x = rand(2, 2, 6, 5)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 1], "storage_order": 1}
    model = make_model([node("MaxPool", ["x"], ["y", "idx"], **attrs)], {"x": x}, ["y", "idx"], opset=11)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_averagepool(case: str, include_pad: int) -> None:
    shape, attrs = POOL_CASES[case]
    x = rand(*shape)
    model = make_model([node("AveragePool", ["x"], count_include_pad=include_pad, **attrs)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 3, 5, 5), (2, 4, 7), (1, 2, 3, 4, 5)], ids=str)
def test_global_pool(op: str, shape: tuple[int, ...]) -> None:
    x = rand(*shape)
    model = make_model([node(op, ["x"])], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3), (1, 4, 6)], ids=str)
def test_batchnorm_constant_params(shape: tuple[int, ...]) -> None:
    c = shape[1]
    x = rand(*shape)
    inits = {"s": rand(c, seed=1), "b": rand(c, seed=2), "m": rand(c, seed=3), "v": np.abs(rand(c, seed=4)) + 0.1}
    model = make_model([node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)], {"x": x}, ["y"], inits)
    assert_matches_onnxruntime(model, {"x": x})


def test_batchnorm_runtime_params() -> None:
    x = rand(2, 3, 4, 4)
    feeds = {"x": x, "s": rand(3, seed=1), "b": rand(3, seed=2), "m": rand(3, seed=3),
             "v": np.abs(rand(3, seed=4)) + 0.1}
    model = make_model([node("BatchNormalization", ["x", "s", "b", "m", "v"])], feeds, ["y"])
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 1), (13, 0), (11, 1), (11, 2), (11, -1)], ids=str)
def test_softmax(op: str, opset: int, axis: int) -> None:
    x = rand(2, 3, 4) * 5
    model = make_model([node(op, ["x"], axis=axis)], {"x": x}, ["y"], opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


# Softmax's vector row sums add in another order than onnxruntime's (lanes, then a halving tree of
# the lanes, then the tail: see aot/ops/softmax.py) and exp differs by an ulp or two: outputs agree
# within a few ulp, far inside this relative tolerance.
SOFTMAX_RTOL = 1e-5


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("target", [None, "x86_64-v3", "host", "cortex-m4f"], ids=["generic", "avx2", "host", "scalar"])
@pytest.mark.parametrize("shape,opset,axis", [
    ((3, 37), 13, -1),          # ragged: 37 is no multiple of 8 or 16 lanes
    ((2, 5, 19), 13, 0), ((2, 5, 19), 13, 1), ((2, 5, 19), 13, 2),  # every axis, ragged inner rows
    ((2, 8, 4, 40), 13, 1), ((2, 8, 4, 40), 13, -1), ((2, 8, 4, 40), 13, 2),
    ((2, 3), 13, -1), ((5, 2, 3), 13, 1),  # rows and inner rows shorter than a vector: scalar
    ((2, 3, 7, 5), 11, 1), ((2, 3, 7, 5), 11, 2), ((4, 4, 4), 11, 0),  # flattened trailing dims
], ids=str)
def test_softmax_vector_rows(op: str, target: str | None, shape: tuple[int, ...], opset: int, axis: int) -> None:
    """Every axis and ragged lengths, through the register widths of the presets (the vector max
    and sum along a row or across inner rows, and the scalar form below 4 elements and on a target
    without vectors: Cortex-M's C, built for the host)."""
    if target == "cortex-m4f" and selected_backend(None) != "c":
        pytest.skip("the LLVM backend has no host object for a Cortex-M target")
    if target == "x86_64-v3" and not host_runs("x86_64-v3"):
        pytest.skip("needs an AVX2 host")
    target = host_preset_name() if target == "host" else target
    x = rand(*shape, seed=7) * 6
    model = make_model([node(op, ["x"], axis=axis)], {"x": x}, ["y"], opset=opset)
    ours = run_aot(model, {"x": x}, **({"target": target} if target else {}))["y"]
    ref = run_onnxruntime(model, {"x": x})["y"]
    np.testing.assert_allclose(ours, ref, rtol=SOFTMAX_RTOL, atol=1e-6 if op == "Softmax" else 1e-5)
    if op == "Softmax" and opset >= 13:
        np.testing.assert_allclose(ours.astype(np.float64).sum(axis=axis), 1.0, rtol=1e-5)


def test_softmax_float64_rows_are_scalar_and_exact() -> None:
    """float64 has no vector form: the scalar rows, against numpy in float64."""
    x = rand(3, 37, seed=3).astype(np.float64) * 6
    model = make_model([node("Softmax", ["x"], axis=-1)], {"x": x}, ["y"])
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(run_aot(model, {"x": x})["y"], e / e.sum(axis=-1, keepdims=True), rtol=1e-12)


def test_softmax_large_values_are_stable() -> None:
    x = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1000.0, -1001.0]], dtype=np.float32)
    model = make_model([node("Softmax", ["x"])], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("target", [(6, 4), (-1, 2), (0, -1), (2, 3, 4), (24,)], ids=str)
def test_reshape(target: tuple[int, ...]) -> None:
    x = rand(2, 3, 4)
    model = make_model([node("Reshape", ["x", "shape"]), node("Relu", ["y"], ["z"])], {"x": x}, ["z"],
                       {"shape": np.array(target, dtype=np.int64)})
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_flatten(axis: int) -> None:
    x = rand(2, 3, 4, 5)
    model = make_model([node("Flatten", ["x"], axis=axis)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


def test_squeeze_unsqueeze_views() -> None:
    x = rand(1, 3, 1, 4)
    model = make_model([node("Squeeze", ["x", "axes"], ["s"]), node("Unsqueeze", ["s", "axes2"], ["y"])],
                       {"x": x}, ["y"], {"axes": np.array([0, 2], dtype=np.int64),
                                         "axes2": np.array([1], dtype=np.int64)})
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("perm", [None, (0, 2, 1), (2, 0, 1), (1, 0, 2)], ids=str)
def test_transpose(perm: tuple[int, ...] | None) -> None:
    x = rand(2, 3, 4)
    attrs = {"perm": list(perm)} if perm else {}
    model = make_model([node("Transpose", ["x"], **attrs)], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


def test_transpose_4d_nchw_to_nhwc() -> None:
    x = rand(1, 3, 5, 6)
    model = make_model([node("Transpose", ["x"], perm=[0, 2, 3, 1])], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


def test_transpose_of_size_one_axes_is_a_view() -> None:
    """[1, C, 1, 1] -> [1, 1, 1, C] (after a global pool) keeps the bytes in order: no copy kernel,
    both as an intermediate (feeding Relu) and as the graph output."""
    from aot.compiler import compile as compile_model

    x = rand(1, 5, 1, 1)
    inner = make_model([node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]), node("Relu", ["t"])], {"x": x}, ["y"])
    assert_matches_onnxruntime(inner, {"x": x})
    assert compile_model(inner).manifest["kernels"] == 1
    last = make_model([node("Relu", ["x"], ["r"]), node("Transpose", ["r"], perm=[0, 2, 3, 1])], {"x": x}, ["y"])
    assert_matches_onnxruntime(last, {"x": x})


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat(axis: int) -> None:
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[axis] = i + 1
    feeds = {f"x{i}": rand(*s, seed=i) for i, s in enumerate(shapes)}
    model = make_model([node("Concat", list(feeds), axis=axis)], feeds, ["y"])
    assert_matches_onnxruntime(model, feeds)


def test_concat_with_constant_and_repeated_input() -> None:
    x = rand(1, 2, 3)
    model = make_model([node("Concat", ["x", "c", "x"], axis=1)], {"x": x}, ["y"], {"c": rand(1, 4, 3, seed=5)})
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("op", ["Identity", "Dropout"])
def test_identity_like(op: str) -> None:
    x = rand(2, 5)
    model = make_model([node(op, ["x"], ["t"]), node("Sigmoid", ["t"])], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


def test_dropout_mask_output() -> None:
    x = rand(2, 5)
    model = make_model([node("Dropout", ["x"], ["y", "mask"])], {"x": x}, ["y", "mask"])
    assert_matches_onnxruntime(model, {"x": x})


def test_output_that_is_an_input_and_duplicated_outputs() -> None:
    """Graph outputs that alias an input, a view, or each other still get their own buffers."""
    x = rand(2, 3)
    model = make_model([node("Identity", ["x"], ["a"]), node("Relu", ["x"], ["r"]),
                        node("Reshape", ["r", "shape"], ["b"])],
                       {"x": x}, ["a", "r", "b"], {"shape": np.array([3, 2], dtype=np.int64)})
    assert_matches_onnxruntime(model, {"x": x})


def test_constant_output() -> None:
    x = rand(2, 3)
    model = make_model([node("Relu", ["x"]), node("Identity", ["c"], ["k"])], {"x": x}, ["y", "k"],
                       {"c": rand(4, seed=3)})
    assert_matches_onnxruntime(model, {"x": x})
