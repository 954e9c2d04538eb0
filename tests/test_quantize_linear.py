"""QuantizeLinear / DequantizeLinear against onnxruntime, the QDQ rewrite into integer ops, and
how verify compares quantised outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from aot.commands.precision import FLOAT, INT8, precision_summary
from aot.commands.verify import compare
from aot.compiler import load
from aot.passes.pipeline import run_passes
from tests.helpers import make_model, run_aot, run_onnxruntime
from tests.test_cli import aot, assert_user_error
from tests.test_fusion import kernels_of


def _q_dq_model(dtype: type, axis_values: int | None, opset: int = 13) -> tuple:
    """x -> QuantizeLinear -> q (a graph output) -> DequantizeLinear -> y, constant parameters,
    per tensor (axis_values None) or per axis 1 with that many channels."""
    rng = np.random.default_rng(3)
    shape = (2, axis_values or 3, 5, 7)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    # Halves of a step, to test round-half-to-even; and values far out of range, to test saturation.
    x.reshape(-1)[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, 1e4]
    lo = -128 if dtype is np.int8 else 0
    if axis_values is None:
        scale, zero = np.array(0.05, np.float32), np.array(lo + 100, dtype)
    else:
        scale = rng.uniform(0.01, 0.1, axis_values).astype(np.float32)
        zero = rng.integers(lo, lo + 200, axis_values).astype(dtype)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
    return make_model(nodes, {"x": x}, ["q", "y"], {"s": scale, "z": zero}, opset=opset), {"x": x}


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("channels", [None, 4], ids=["per_tensor", "per_axis"])
def test_quantize_dequantize_match_onnxruntime_exactly(dtype: type, channels: int | None) -> None:
    model, inputs = _q_dq_model(dtype, channels)
    ours, ref = run_aot(model, inputs), run_onnxruntime(model, inputs)
    assert ours["q"].dtype == dtype
    np.testing.assert_array_equal(ours["q"], ref["q"])
    np.testing.assert_array_equal(ours["y"], ref["y"])


def test_dequantize_fuses_with_the_float_ops_after_it() -> None:
    """DQ -> Relu -> Mul: one kernel reads the int8 tensor and writes the float result."""
    q = np.random.default_rng(0).integers(-128, 128, (1, 8, 6, 6)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Mul", ["r", "k"], ["y"])]
    model = make_model(nodes, {"q": q}, ["y"], {"s": np.array(0.1, np.float32), "z": np.array(3, np.int8),
                                                "k": np.array(2.0, np.float32)})
    assert kernels_of(model) == ["DequantizeLinear+Relu+Mul"]
    np.testing.assert_array_equal(run_aot(model, {"q": q})["y"], run_onnxruntime(model, {"q": q})["y"])


def _qdq_conv_model(activation: str = "", bias_scale: float | None = None) -> tuple:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    w = rng.integers(-127, 128, (6, 4, 3, 3)).astype(np.int8)
    inits = {"xs": np.array(0.03, np.float32), "xz": np.array(-3, np.int8),
             "w": w, "ws": rng.uniform(0.001, 0.01, 6).astype(np.float32), "wz": np.zeros(6, np.int8),
             "b": rng.integers(-500, 500, 6).astype(np.int32),
             "ys": np.array(0.05, np.float32), "yz": np.array(5, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1]),
             *_activation(activation, "c", "a"),
             helper.make_node("QuantizeLinear", ["a" if activation else "c", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    # The bias's scale is x_scale * w_scale, as quantisers write it; `bias_scale` another one.
    inits["bs"] = (np.float32(0.03) * inits["ws"]).astype(np.float32) if bias_scale is None else \
        np.full(6, bias_scale, np.float32)
    if activation == "Clip":
        inits.update(lo=np.array(0.0, np.float32), hi=np.array(2.0, np.float32))
    return make_model(nodes, {"x": x}, ["y"], inits, opset=13), {"x": x}


def _activation(op: str, x: str, y: str) -> list:
    if op == "Relu":
        return [helper.make_node("Relu", [x], [y])]
    if op == "Clip":
        return [helper.make_node("Clip", [x, "lo", "hi"], [y])]
    return []


def test_qdq_conv_becomes_one_integer_conv() -> None:
    model, _ = _qdq_conv_model()
    graph, _ = load(model)
    ops = [n.op_type for n in run_passes(graph).nodes]
    assert ops == ["QuantizeLinear", "QLinearConv", "DequantizeLinear"], ops
    conv = next(n for n in graph.nodes if n.op_type == "QLinearConv")
    assert conv.inputs[3] is not None and conv.inputs[3].dtype == np.int8  # the weights stay int8


@pytest.mark.parametrize("bias_scale", [None, 1.5e-4], ids=["product_scale", "own_scale"])
def test_qdq_conv_matches_onnxruntime(bias_scale: float | None) -> None:
    model, inputs = _qdq_conv_model(bias_scale=bias_scale)
    ours, ref = run_aot(model, inputs), run_onnxruntime(model, inputs)
    step = 0.05
    result = compare("y", ours["y"], ref["y"], 1e-4, step)
    assert result.passed, result.detail
    assert result.exact_share is not None and result.exact_share >= 0.99, result.detail


@pytest.mark.parametrize("activation", ["Relu", "Clip"])
def test_an_activation_before_the_quantize_becomes_an_int8_clip(activation: str) -> None:
    model, inputs = _qdq_conv_model(activation)
    graph, _ = load(model)
    ops = [n.op_type for n in run_passes(graph).nodes]
    assert ops == ["QuantizeLinear", "QLinearConv", "Clip", "DequantizeLinear"], ops
    ours, ref = run_aot(model, inputs), run_onnxruntime(model, inputs)
    result = compare("y", ours["y"], ref["y"], 1e-4, 0.05)
    assert result.passed, result.detail
    assert ours["y"].min() >= -1e-6 and (activation == "Relu" or ours["y"].max() <= 2.0 + 1e-6)


def test_qdq_maxpool_runs_on_the_int8_tensor() -> None:
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"s": np.array(0.02, np.float32), "z": np.array(-7, np.int8)})
    graph, _ = load(model)
    assert [n.op_type for n in run_passes(graph).nodes] == ["QuantizeLinear", "MaxPool", "DequantizeLinear"]
    np.testing.assert_array_equal(run_aot(model, {"x": x})["y"], run_onnxruntime(model, {"x": x})["y"])


def test_quantized_outputs_compare_in_steps() -> None:
    expected = np.arange(2000, dtype=np.float32) * 0.1
    one_off = expected.copy()
    one_off[0] += 0.1  # one element one step off: 99.95% exact
    assert compare("y", one_off, expected, 1e-4, step=0.1).passed
    assert not compare("y", one_off, expected, 1e-4).passed  # as plain floats it fails
    many_off = expected + 0.1 * (np.arange(2000) % 100 == 0)  # 1% one step off: still within one step
    assert compare("y", many_off, expected, 1e-4, step=0.1).passed
    two_off = expected.copy()
    two_off[:3] += 0.2  # 0.15% two steps off
    result = compare("y", two_off, expected, 1e-4, step=0.1)
    assert not result.passed and "within one step" in result.detail


def test_inspect_and_report_say_which_nodes_run_in_int8(tmp_path: Path) -> None:
    model, _ = _qdq_conv_model()
    path = tmp_path / "qdq_conv.onnx"
    onnx.save(model, path)
    inspected = json.loads(aot("inspect", str(path), "--json").stdout)
    precision = inspected["precision"]
    assert [n["op"] for n in precision["int8_nodes"]] == ["QLinearConv"]
    assert precision["float_nodes"] == []
    weights = precision["weight_bytes_by_dtype"]
    assert weights["int8"] >= 6 * 4 * 3 * 3 > weights.get("float32", 0)  # the weights stay int8
    text = aot("inspect", str(path)).stdout
    assert "Precision" in text and "QLinearConv 1" in text
    report = tmp_path / "report.html"
    aot("report", str(path), "-o", str(report))
    assert re.search(r"<td>QLinearConv[^<]*</td><td>[^<]*</td><td>int8</td>", report.read_text())


def test_a_conversion_closes_an_elementwise_kernel() -> None:
    """DQ -> Relu -> Q is one kernel reading and writing int8; a Conv's kernel, which accumulates
    in its output, does not take the QuantizeLinear after it."""
    q = np.random.default_rng(4).integers(-128, 128, (1, 4, 5, 5)).astype(np.int8)
    s, z = np.array(0.1, np.float32), np.array(-2, np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s2", "z"], ["y"])]
    model = make_model(nodes, {"q": q}, ["y"], {"s": s, "z": z, "s2": np.array(0.07, np.float32)})
    assert kernels_of(model) == ["DequantizeLinear+Relu+QuantizeLinear"]
    np.testing.assert_array_equal(run_aot(model, {"q": q})["y"], run_onnxruntime(model, {"q": q})["y"])
    x = np.random.default_rng(5).standard_normal((1, 4, 5, 5)).astype(np.float32)
    conv = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"])]
    model = make_model(conv, {"x": x}, ["y"], {"w": np.ones((2, 4, 1, 1), np.float32), "s": s, "z": z})
    assert kernels_of(model) == ["Conv", "QuantizeLinear"]
    np.testing.assert_array_equal(run_aot(model, {"x": x})["y"], run_onnxruntime(model, {"x": x})["y"])


def test_a_dequantize_with_too_many_scales_is_an_error_naming_it(tmp_path: Path) -> None:
    """4 scales along an axis of length 1 (what onnxruntime 1.32's quantiser writes for a [1, N]
    Gemm bias with its bias adjustment off): ONNX does not define it; one line, exit 2."""
    nodes = [helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0, name="bias_dq"),
             helper.make_node("Add", ["x", "b"], ["y"])]
    x = np.zeros((1, 4), np.float32)
    model = make_model(nodes, {"x": x}, ["y"], {"bq": np.ones((1, 4), np.int32), "bs": np.full(4, 0.5, np.float32)},
                       opset=13)
    model.graph.value_info.append(helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1, 4]))
    path = tmp_path / "bad_bias.onnx"
    onnx.save(model, path)
    result = aot("compile", str(path), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "bias_dq", "DequantizeLinear")
    assert not (tmp_path / "pkg").exists()


def test_a_quantized_cnn_runs_in_int8_but_its_softmax(tmp_path: Path) -> None:
    """examples/tiny_cnn.onnx through `aot quantize` (QDQ): after the graph passes every group
    runs as an integer op (QLinearConv, QLinearAdd, int8 MaxPool and Flatten, the average pool,
    QGemm); only the Softmax stays float, between one DequantizeLinear and one QuantizeLinear."""
    import aot

    rng = np.random.default_rng(0)
    samples = tmp_path / "calibration.npz"
    np.savez(samples, image=rng.standard_normal((20, 1, 3, 32, 32)).astype(np.float32))
    quantized = tmp_path / "tiny_cnn_int8.onnx"
    aot.quantize(Path(__file__).parent.parent / "examples" / "tiny_cnn.onnx", samples, quantized)
    graph, _ = load(str(quantized))
    summary = precision_summary(run_passes(graph))
    assert {op for _, op in summary.nodes[INT8]} == {"QLinearConv", "QLinearAdd", "MaxPool", "Flatten",
                                                     "QLinearGlobalAveragePool", "QGemm"}
    assert [op for _, op in summary.nodes[FLOAT]] == ["Softmax"]


def test_quantizing_nan_and_infinities_is_defined() -> None:
    """+-inf saturate; NaN, which C cannot convert to an integer, gives the least value too."""
    x = np.array([[np.nan, np.inf, -np.inf, 1.0]], np.float32)
    model = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"])], {"x": x}, ["q"],
                       {"s": np.array(0.5, np.float32), "z": np.array(1, np.int8)})
    np.testing.assert_array_equal(run_aot(model, {"x": x})["q"], np.array([[-128, 127, -128, 3]], np.int8))
