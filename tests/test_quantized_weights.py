"""Weights kept quantised: a float MatMul or Gemm over DequantizeLinear(int8 weights) stores the
integers (a quarter of the float bytes) and widens them in its tiles, with the same results as
the float graph (onnxruntime with its graph optimisations off, which would otherwise quantise
the activations too: its DQ -> MatMul fusion is MatMulIntegerToFloat)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from tests.helpers import make_model, run_aot

RNG = np.random.default_rng(0)
X = RNG.standard_normal((5, 64)).astype(np.float32)


def _float_reference(model, inputs):  # noqa: ANN001, ANN202
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def _case(name: str):  # noqa: ANN202
    w8 = RNG.integers(-127, 128, (64, 40)).astype(np.int8)
    wu = RNG.integers(0, 256, (40, 64)).astype(np.uint8)
    columns = RNG.uniform(0.001, 0.01, 40).astype(np.float32)
    dq = helper.make_node
    if name == "matmul_per_column_int8":
        return [dq("DequantizeLinear", ["w", "s", "z"], ["wd"], axis=1), dq("MatMul", ["x", "wd"], ["y"])], \
            {"w": w8, "s": columns, "z": np.zeros(40, np.int8)}, 40 * 64
    if name == "gemm_transposed_uint8_bias_relu":
        return [dq("DequantizeLinear", ["w", "s", "z"], ["wd"], axis=0),
                dq("Gemm", ["x", "wd", "c"], ["g"], transB=1, alpha=0.5), dq("Relu", ["g"], ["y"])], \
            {"w": wu, "s": columns, "z": np.full(40, 128, np.uint8), "c": RNG.standard_normal(40).astype(np.float32)}, \
            40 * 64
    if name == "matmul_per_tensor_uint8_int16":  # w - 100 spans [-100, 155]: MatMulNBits keeps the bytes
        return [dq("DequantizeLinear", ["w", "s", "z"], ["wd"]), dq("MatMul", ["x", "wd"], ["y"])], \
            {"w": wu.T.copy(), "s": np.array(0.004, np.float32), "z": np.array(100, np.uint8)}, 40 * 64
    assert name == "matmul_three_columns"
    return [dq("DequantizeLinear", ["w", "s"], ["wd"], axis=1), dq("MatMul", ["x", "wd"], ["y"])], \
        {"w": w8[:, :3].copy(), "s": columns[:3]}, 3 * 64


@pytest.mark.parametrize("name", ["matmul_per_column_int8", "gemm_transposed_uint8_bias_relu",
                                  "matmul_per_tensor_uint8_int16", "matmul_three_columns"])
def test_weights_stay_quantized_and_match_the_float_graph(name: str) -> None:
    nodes, inits, weight_bytes = _case(name)
    model = make_model(nodes, {"x": X}, ["y"], inits, opset=13)
    np.testing.assert_allclose(run_aot(model, {"x": X})["y"], _float_reference(model, {"x": X}),
                               rtol=1e-5, atol=1e-5)
    stored = compile_model(model).manifest["weights_bytes"]
    # The integers, the per-column scales and the bias: far below the 4 bytes per float weight.
    assert weight_bytes <= stored < weight_bytes + 64 * 8, stored


def test_per_layer_verify_sees_the_dequantized_weights(tmp_path) -> None:  # noqa: ANN001
    """`aot verify --per-layer` makes every tensor an output, the weights' DequantizeLinear's
    too: that one then computes its float weights, and every layer matches."""
    import onnx

    from tests.test_cli import aot

    nodes, inits, _ = _case("matmul_per_column_int8")
    path = tmp_path / "weight_only.onnx"
    onnx.save(make_model(nodes, {"x": X}, ["y"], inits, opset=13), path)
    result = aot("verify", str(path), "--per-layer")
    assert result.returncode == 0 and "every layer within tolerance" in result.stdout, result.stdout + result.stderr
