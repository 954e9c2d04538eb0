"""The ai.onnx integer ops (QLinearConv, ConvInteger, QLinearMatMul, MatMulInteger,
DynamicQuantizeLinear) against onnxruntime on both backends: random int8/uint8 activations, the
weights, scales and zero points constants as in a quantised model's layers (the packed kernels),
or fed at run time (the plain ones). Integer outputs must match exactly."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from aot.compiler import compile as compile_model
from aot.errors import NodeError
from tests.helpers import assert_matches_onnxruntime, make_model, run_aot, run_onnxruntime, selected_backend

# One backend per run: the suite runs these files once with C and once with LLVM (tests/run.sh).
BACKENDS = [selected_backend()]


def quantized(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def assert_quantized_match(ours: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """Every output equal to the reference's, element for element."""
    for name, want in expected.items():
        got = ours[name]
        assert got.dtype == want.dtype and got.shape == want.shape, (name, got.dtype, got.shape, want.shape)
        wrong = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        assert wrong.size == 0, (f"{name}: {wrong.size} of {got.size} elements differ, first at {wrong[0]}: "
                                 f"{got.reshape(-1)[wrong[0]]} vs {want.reshape(-1)[wrong[0]]}")


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], backend: str, reference: str = "onnxruntime") -> None:
    expected = run_onnxruntime(model, feeds) if reference == "onnxruntime" else \
        dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))
    assert_quantized_match(run_aot(model, feeds, backend=backend), expected)


def model_of(op: str, inputs: list[str], values: dict[str, np.ndarray], fed: set[str], outputs: list[str],
             opset: int = 13, **attrs: Any) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-node model: the `fed` inputs are graph inputs, the other values initializers."""
    node = helper.make_node(op, inputs, outputs, **attrs)
    feeds = {name: np.asarray(values[name]) for name in inputs if name in fed}
    inits = {name: values[name] for name in inputs if name and name not in fed}
    return make_model([node], feeds, outputs, inits, opset=opset), feeds


# -- QLinearConv / ConvInteger ----------------------------------------------------------------------

CONV_CASES = {
    # name: (x shape, w shape, attrs)
    "3x3_s1_pad1": ((1, 16, 14, 14), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "3x3_s2_pad1": ((1, 16, 15, 15), (24, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "depthwise_3x3_s1": ((1, 32, 12, 12), (32, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 32}),
    "depthwise_3x3_s2": ((2, 24, 11, 11), (24, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 24, "strides": [2, 2]}),
    "pointwise": ((1, 32, 10, 10), (48, 32, 1, 1), {}),
    "grouped_dilated": ((1, 16, 9, 9), (16, 4, 3, 3), {"group": 4, "dilations": [2, 2], "pads": [2, 1, 2, 1]}),
    "same_upper_s2": ((1, 8, 10, 10), (8, 8, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "1d_stride2": ((2, 8, 20), (12, 8, 5), {"pads": [2, 1], "strides": [2]}),
    "depthwise_multiplier_5x5": ((1, 8, 9, 9), (16, 1, 5, 5), {"group": 8, "pads": [2, 2, 2, 2]}),
    # unit-stride depthwise convs run over each padded plane as one row (_flat_depthwise): no padding
    # (the copy's slack is what the last row reads past the plane), dilation, a DS-CNN-like 25x5
    # plane, and a plane of more sums than one chunk (full chunks and a ragged last one)
    "depthwise_valid": ((1, 8, 7, 9), (8, 1, 3, 3), {"group": 8}),
    "depthwise_dilated": ((1, 8, 11, 10), (8, 1, 3, 3), {"group": 8, "dilations": [2, 2], "pads": [2, 1, 2, 3]}),
    "depthwise_25x5": ((1, 64, 25, 5), (64, 1, 3, 3), {"group": 64, "pads": [1, 1, 1, 1]}),
    "depthwise_chunks": ((1, 4, 70, 40), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    # strided ones too, in float on x86, over the plane split by stride phase (PhasePlanes): odd
    # sizes, uneven strides and pads, dilation sharing one phase, a 5x5 kernel over a ragged chunk
    "depthwise_s2_dilated": ((1, 6, 13, 12), (6, 1, 3, 3), {"group": 6, "strides": [2, 2], "dilations": [2, 2],
                                                            "pads": [2, 1, 1, 2]}),
    "depthwise_s2x1": ((1, 5, 9, 11), (5, 1, 3, 3), {"group": 5, "strides": [2, 1], "pads": [0, 1, 1, 0]}),
    "depthwise_s3_5x5": ((1, 3, 80, 31), (3, 1, 5, 5), {"group": 3, "strides": [3, 3], "pads": [2, 2, 2, 2]}),
    "3d": ((1, 4, 5, 6, 7), (6, 4, 3, 3, 3), {"pads": [1, 0, 1, 1, 1, 0]}),  # the direct loop nest
}


def conv_values(case: str, x_dtype: str, w_dtype: str, seed: int = 0) -> tuple[dict[str, np.ndarray], dict]:
    x_shape, w_shape, attrs = CONV_CASES[case]
    rng = np.random.default_rng(seed)
    m, taps = w_shape[0], int(np.prod(w_shape[1:]))
    x_scale, w_scale = np.float32(0.02), (0.001 + 0.01 * rng.random(m)).astype(np.float32)
    # y's scale spreads the outputs over about +-50 levels (saturating a few), as a calibrated model's do.
    y_scale = np.float32(x_scale * float(w_scale.mean()) * 74 * 74 * np.sqrt(taps) / 50)
    values = {
        "x": quantized(rng, x_shape, x_dtype), "x_scale": x_scale,
        "x_zero_point": np.array(rng.integers(-10, 10) + (128 if x_dtype == "uint8" else 0), x_dtype),
        "w": quantized(rng, w_shape, w_dtype), "w_scale": w_scale,
        "w_zero_point": np.array(0 if w_dtype == "int8" else 131, w_dtype),
        "y_scale": y_scale, "y_zero_point": np.array(3 + (128 if x_dtype == "uint8" else 0), x_dtype),
        "B": rng.integers(-20000, 20000, size=m).astype(np.int32),
    }
    return values, attrs


QLINEAR_CONV_INPUTS = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", sorted(CONV_CASES))
def test_qlinear_conv_constant_weights(case: str, x_dtype: str, backend: str) -> None:
    """Per-channel int8 weights, int32 bias: the packed kernels (dot, depthwise)."""
    values, attrs = conv_values(case, x_dtype, "int8")
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    check(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["3x3_s2_pad1", "depthwise_3x3_s1"])
def test_qlinear_conv_uint8_weights_with_zero_point(case: str, backend: str) -> None:
    """uint8 weights with a zero point (131): w - w_zero_point is stored widened to int16."""
    values, attrs = conv_values(case, "uint8", "uint8", seed=1)
    values["w_scale"] = values["w_scale"][:1]
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS[:8], values, {"x"}, ["y"], **attrs)
    check(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["3x3_s1_pad1", "depthwise_3x3_s2", "1d_stride2"])
def test_qlinear_conv_parameters_at_run_time(case: str, backend: str) -> None:
    """Scales, zero points and bias fed at run time over constant weights (the folded bias then
    computed in the kernel), and everything fed at run time (the direct loop nest)."""
    values, attrs = conv_values(case, "uint8", "int8", seed=2)
    fed = {"x", "x_scale", "x_zero_point", "y_scale", "y_zero_point", "B", "w_scale"}
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, fed, ["y"], **attrs)
    check(model, feeds, backend)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, fed | {"w", "w_zero_point"}, ["y"], **attrs)
    check(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["3x3_s1_pad1", "depthwise_3x3_s2", "grouped_dilated", "pointwise"])
def test_qlinear_conv_per_channel_weight_zero_points(case: str, backend: str) -> None:
    """ONNX allows a w_zero_point per output channel (onnxruntime does not): the ONNX reference."""
    values, attrs = conv_values(case, "uint8", "uint8", seed=3)
    values["w_zero_point"] = np.random.default_rng(4).integers(100, 156, size=values["w"].shape[0]).astype(np.uint8)
    model, feeds = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], **attrs)
    check(model, feeds, backend, reference="onnx")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("case", ["3x3_s1_pad1", "3x3_s2_pad1", "depthwise_3x3_s1", "depthwise_valid", "pointwise",
                                  "1d_stride2", "3d"])
def test_conv_integer(case: str, x_dtype: str, backend: str) -> None:
    """int32 outputs of constant weights with their zero point, padded taps reading as x_zero_point."""
    values, attrs = conv_values(case, x_dtype, "uint8" if x_dtype == "uint8" else "int8", seed=5)
    inputs = ["x", "w", "x_zero_point", "w_zero_point"]
    model, feeds = model_of("ConvInteger", inputs, values, {"x"}, ["y"], **attrs)
    check(model, feeds, backend)
    model, feeds = model_of("ConvInteger", inputs, values, {"x", "w", "x_zero_point"}, ["y"], **attrs)
    check(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_integer_per_channel_weight_zero_points(backend: str) -> None:
    values, attrs = conv_values("3x3_s2_pad1", "uint8", "uint8", seed=6)
    values["w_zero_point"] = np.random.default_rng(7).integers(0, 255, size=values["w"].shape[0]).astype(np.uint8)
    model, feeds = model_of("ConvInteger", ["x", "w", "x_zero_point", "w_zero_point"], values, {"x"}, ["y"], **attrs)
    check(model, feeds, backend, reference="onnx")


# -- QLinearMatMul / MatMulInteger ------------------------------------------------------------------

MATMUL_CASES = {
    # name: (a shape, b shape, per-column b scale and zero point)
    "2d": ((64, 96), (96, 48), True),
    "batched_3d_shared_weights": ((4, 16, 32), (32, 24), True),
    "batched_3d_batched_weights": ((2, 8, 40), (2, 40, 12), True),
    "batched_3d_per_tensor": ((3, 8, 40), (3, 40, 12), False),
    "vector_times_matrix": ((40,), (40, 10), True),
}


def matmul_values(case: str, a_dtype: str, b_dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    a_shape, b_shape, per_column = MATMUL_CASES[case]
    rng = np.random.default_rng(seed)
    n, k = b_shape[-1], b_shape[-2]
    # Per column: [n] for a matrix, [..., 1, n] for a batch of them.
    columns = (*b_shape[:-2], 1, n) if len(b_shape) > 2 else (n,)
    b_scale = (0.002 + 0.01 * rng.random(columns)).astype(np.float32) if per_column else np.float32(0.004)
    offset = 128 if b_dtype == "uint8" else 0
    b_zp = (rng.integers(-5, 5, size=columns) + offset).astype(b_dtype) if per_column else np.array(offset + 2, b_dtype)
    a_scale = np.float32(0.03)
    return {
        "a": quantized(rng, a_shape, a_dtype), "a_scale": a_scale,
        "a_zero_point": np.array(rng.integers(-10, 10) + (128 if a_dtype == "uint8" else 0), a_dtype),
        "b": quantized(rng, b_shape, b_dtype), "b_scale": b_scale, "b_zero_point": b_zp,
        "y_scale": np.float32(a_scale * float(np.mean(b_scale)) * 74 * 74 * np.sqrt(k) / 50),
        "y_zero_point": np.array(-4 + (128 if a_dtype == "uint8" else 0), a_dtype),
    }


QLINEAR_MATMUL_INPUTS = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
MATMUL_DTYPES = [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtypes", MATMUL_DTYPES, ids=["u8s8", "s8s8", "u8u8"])
@pytest.mark.parametrize("case", sorted(MATMUL_CASES))
def test_qlinear_matmul_constant_weights(case: str, dtypes: tuple[str, str], backend: str) -> None:
    values = matmul_values(case, *dtypes)
    model, feeds = model_of("QLinearMatMul", QLINEAR_MATMUL_INPUTS, values, {"a"}, ["y"])
    check(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", ["2d", "batched_3d_batched_weights"])
def test_qlinear_matmul_parameters_at_run_time(case: str, backend: str) -> None:
    values = matmul_values(case, "uint8", "int8", seed=1)
    model, feeds = model_of("QLinearMatMul", QLINEAR_MATMUL_INPUTS, values, set(QLINEAR_MATMUL_INPUTS), ["y"])
    check(model, feeds, backend)
    fed = set(QLINEAR_MATMUL_INPUTS) - {"b", "b_zero_point"}
    model, feeds = model_of("QLinearMatMul", QLINEAR_MATMUL_INPUTS, values, fed, ["y"])
    check(model, feeds, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_qlinear_matmul_per_row_a(backend: str) -> None:
    """ONNX allows a's scale and zero point per row (onnxruntime does not): the ONNX reference."""
    values = matmul_values("2d", "uint8", "uint8", seed=2)
    rng = np.random.default_rng(3)
    values["a_scale"] = (0.01 + 0.05 * rng.random((64, 1))).astype(np.float32)
    values["a_zero_point"] = rng.integers(100, 156, size=(64, 1)).astype(np.uint8)
    model, feeds = model_of("QLinearMatMul", QLINEAR_MATMUL_INPUTS, values, {"a"}, ["y"], opset=21)
    check(model, feeds, backend, reference="onnx")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtypes", MATMUL_DTYPES, ids=["u8s8", "s8s8", "u8u8"])
@pytest.mark.parametrize("case", sorted(MATMUL_CASES))
def test_matmul_integer(case: str, dtypes: tuple[str, str], backend: str) -> None:
    values = matmul_values(case, *dtypes, seed=4)
    inputs = ["a", "b", "a_zero_point", "b_zero_point"]
    model, feeds = model_of("MatMulInteger", inputs, values, {"a"}, ["y"])
    check(model, feeds, backend)
    model, feeds = model_of("MatMulInteger", inputs, values, set(inputs), ["y"])
    check(model, feeds, backend)


# -- DynamicQuantizeLinear ------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spread", ["mixed", "positive", "negative", "zeros"])
def test_dynamic_quantize_linear(spread: str, backend: str) -> None:
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((3, 64, 17)) * 4).astype(np.float32)
    x = {"mixed": x, "positive": np.abs(x) + 0.5, "negative": -np.abs(x) - 0.5, "zeros": x * 0}[spread]
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"])
    model = make_model([node], {"x": x}, ["y", "y_scale", "y_zero_point"], opset=13)
    # All zeros leave no range: the ONNX reference then takes 1 / 255 for the scale, onnxruntime 1.
    check(model, {"x": x}, backend, reference="onnx" if spread == "zeros" else "onnxruntime")


# -- errors ---------------------------------------------------------------------------------------

def test_quantization_parameters_that_do_not_fit_name_the_node() -> None:
    values, attrs = conv_values("3x3_s1_pad1", "uint8", "int8")
    values["w_scale"] = values["w_scale"][:3]
    model, _ = model_of("QLinearConv", QLINEAR_CONV_INPUTS, values, {"x"}, ["y"], name="conv1", **attrs)
    with pytest.raises(NodeError, match=r"conv1.*w_scale 'w_scale' has shape \[3\].*\[32\] \(one per output channel\)"):
        compile_model(model)
    values = matmul_values("2d", "uint8", "int8")
    values["a_scale"] = np.full(5, 0.03, np.float32)
    model, _ = model_of("QLinearMatMul", QLINEAR_MATMUL_INPUTS, values, {"a"}, ["y"], name="fc")
    with pytest.raises(NodeError, match=r"fc.*scales \[5\] and \[48\] are not per row of a and per column of b"):
        compile_model(model)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamically_quantized_linear_layer(backend: str) -> None:
    """What onnxruntime's quantize_dynamic makes of a linear layer: DynamicQuantizeLinear feeds
    MatMulInteger its uint8 activations and their zero point (so the folded bias is computed at
    run time from it), then the int32 product is scaled back to float."""
    rng = np.random.default_rng(9)
    x = (rng.standard_normal((2, 16, 64)) * 2).astype(np.float32)
    w_scale = (0.001 + 0.01 * rng.random(32)).astype(np.float32)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zero_point"]),
        helper.make_node("MatMulInteger", ["xq", "w", "x_zero_point", "w_zero_point"], ["acc"]),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Mul", ["x_scale", "w_scale"], ["scale"]),
        helper.make_node("Mul", ["acc_f", "scale"], ["y"]),
    ]
    inits = {"w": quantized(rng, (64, 32), "int8"), "w_zero_point": np.zeros(32, np.int8), "w_scale": w_scale}
    model = make_model(nodes, {"x": x}, ["y"], inits, opset=13)
    assert_matches_onnxruntime(model, {"x": x}, backend=backend)
