"""The com.microsoft ops onnxruntime.quantization writes in QOperator format (QLinearAdd ...
QGemm), each as a one-node model with constant scales and zero points as in real models,
against onnxruntime on both backends; shapes inferred through them for the ai.onnx nodes after;
one-line errors for what is not supported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import compile as compile_model
from aot.errors import ModelLoadError, NodeError, UnsupportedError
from aot.frontend.importer import import_model
from aot.lowering.registry import is_supported
from tests.helpers import run_aot, run_onnxruntime, selected_backend
from tests.test_cli import aot, assert_user_error
from tests.test_quantize import MODELS, quantize

MS = "com.microsoft"
ONNX_TYPES = {np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
              np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int16): TensorProto.INT16}
# One backend per run: the suite runs these files once with C and once with LLVM (tests/run.sh).
BACKENDS = [selected_backend()]
DTYPES = [np.int8, np.uint8]
# Ops whose onnxruntime kernel rounds the same real value along another float32 path than
# dequantize -> op -> quantize (QLinearAdd's a*(sa/sc) + b*(sb/sc) + offset with FMAs, Mul's
# (a*b)*(sa*sb/sc), Sigmoid's own logistic approximation): a value may land one unit away.
ROUNDING_PATH_DIFFERS = {"QLinearAdd", "QLinearMul", "QLinearSigmoid"}
MIN_EXACT_SHARE = 0.999


def contrib_model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: dict[str, int],
                  initializers: dict[str, Any]) -> onnx.ModelProto:
    """Inputs typed and shaped from their arrays; outputs typed but unsized, as onnx cannot size them."""
    graph = helper.make_graph(
        nodes, "contrib",
        [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype], list(a.shape)) for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def integers(dtype: type, *shape: int, seed: int = 0) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape, dtype=dtype)


def zero(dtype: type, signed: int, unsigned: int) -> np.ndarray:
    return np.array(signed if dtype == np.int8 else unsigned, dtype)


def assert_quantized_matches(model: onnx.ModelProto, inputs: dict[str, np.ndarray], backend: str,
                             rounding_path_differs: bool = False) -> dict[str, np.ndarray]:
    """Integer outputs equal onnxruntime's, or where its rounding path differs, at least
    MIN_EXACT_SHARE of them equal and the rest one unit away; float outputs to 1e-6."""
    ours, ref = run_aot(model, inputs, backend=backend), run_onnxruntime(model, inputs)
    for name, expected in ref.items():
        got = ours[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.shape)
        if expected.dtype.kind == "f":
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
            continue
        assert len(np.unique(expected)) > 8, "a test whose output is nearly constant cannot tell much"
        diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
        if not rounding_path_differs:
            assert diff.max() == 0, f"{int((diff > 0).sum())} of {diff.size} values differ, by up to {diff.max()}"
            continue
        exact = float((diff == 0).mean())
        assert diff.max() <= 1 and exact >= MIN_EXACT_SHARE, f"exact share {exact:.5f}, max difference {diff.max()}"
    return ours


def binary_case(op: str, dtype: type) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    inputs = {"a": integers(dtype, 4, 32, 64, seed=1), "b": integers(dtype, 32, 64, seed=2)}  # B broadcasts
    inits = {"sa": np.float32(0.0371), "za": zero(dtype, 3, 131), "sb": np.float32(0.0527),
             "zb": zero(dtype, -7, 120), "sc": np.float32(0.0613), "zc": zero(dtype, 1, 128)}
    node = helper.make_node(op, ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["c"], domain=MS)
    return contrib_model([node], inputs, {"c": ONNX_TYPES[np.dtype(dtype)]}, inits), inputs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary_matches_onnxruntime(op: str, dtype: type, backend: str) -> None:
    model, inputs = binary_case(op, dtype)
    assert_quantized_matches(model, inputs, backend, rounding_path_differs=op in ROUNDING_PATH_DIFFERS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}), ("QLinearLeakyRelu", {"alpha": 0.1})], ids=str)
def test_qlinear_unary_matches_onnxruntime_on_every_input_value(op: str, attrs: dict, dtype: type,
                                                                backend: str) -> None:
    info = np.iinfo(dtype)
    inputs = {"x": np.arange(info.min, info.max + 1, dtype=dtype).reshape(2, 128)}  # all 256 values
    inits = {"xs": np.float32(0.0371), "xz": zero(dtype, 3, 131), "ys": np.float32(0.0041), "yz": zero(dtype, -128, 0)}
    if op == "QLinearLeakyRelu":
        inits["ys"], inits["yz"] = np.float32(0.0313), zero(dtype, 20, 140)
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    model = contrib_model([node], inputs, {"y": ONNX_TYPES[np.dtype(dtype)]}, inits)
    assert_quantized_matches(model, inputs, backend, rounding_path_differs=op in ROUNDING_PATH_DIFFERS)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
def test_qlinear_concat_requantises_each_part(dtype: type, backend: str) -> None:
    """Part x1 has its own scale (requantised), x2 the output's (copied), x3 only another zero point."""
    inputs = {"x1": integers(dtype, 2, 3, 5, 4, seed=1), "x2": integers(dtype, 2, 6, 5, 4, seed=2),
              "x3": integers(dtype, 2, 1, 5, 4, seed=3)}
    inits = {"ys": np.float32(0.05), "yz": zero(dtype, 2, 128), "s1": np.float32(0.031), "z1": zero(dtype, -3, 125),
             "z3": zero(dtype, 9, 119)}
    node = helper.make_node("QLinearConcat", ["ys", "yz", "x1", "s1", "z1", "x2", "ys", "yz", "x3", "ys", "z3"],
                            ["y"], domain=MS, axis=-3)
    model = contrib_model([node], inputs, {"y": ONNX_TYPES[np.dtype(dtype)]}, inits)
    ours = assert_quantized_matches(model, inputs, backend)
    np.testing.assert_array_equal(ours["y"][:, 3:9], inputs["x2"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_qlinear_concat_along_an_inner_axis(backend: str) -> None:
    """Parts joined along the rows: each part's runs are [n][c] apart in the output."""
    dtype = np.int8
    inputs = {"x1": integers(dtype, 2, 3, 5, 4, seed=4), "x2": integers(dtype, 2, 3, 2, 4, seed=5)}
    inits = {"ys": np.float32(0.05), "yz": zero(dtype, 2, 128), "s1": np.float32(0.031), "z1": zero(dtype, -3, 125)}
    node = helper.make_node("QLinearConcat", ["ys", "yz", "x1", "s1", "z1", "x2", "ys", "yz"], ["y"], domain=MS,
                            axis=2)
    model = contrib_model([node], inputs, {"y": ONNX_TYPES[np.dtype(dtype)]}, inits)
    ours = assert_quantized_matches(model, inputs, backend)
    np.testing.assert_array_equal(ours["y"][:, :, 5:], inputs["x2"])


POOL_PARAMS = {"xs": np.float32(0.031), "ys": np.float32(0.02)}


def pool_params(dtype: type) -> dict[str, Any]:
    return {**POOL_PARAMS, "xz": zero(dtype, -3, 125), "yz": zero(dtype, 1, 130)}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool(channels_last: int, dtype: type, backend: str) -> None:
    x = integers(dtype, 2, 7, 9, 16) if channels_last else integers(dtype, 2, 16, 7, 9)
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                            channels_last=channels_last)
    model = contrib_model([node], {"x": x}, {"y": ONNX_TYPES[np.dtype(dtype)]}, pool_params(dtype))
    ours = assert_quantized_matches(model, {"x": x}, backend)
    assert ours["y"].shape == ((2, 1, 1, 16) if channels_last else (2, 16, 1, 1))


AVERAGE_POOLS = {
    "3x3": {"kernel_shape": [3, 3]},
    "strided-padded-count-pad": {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0],
                                 "count_include_pad": 1},
    "ceil-mode": {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    "same-upper": {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("case", sorted(AVERAGE_POOLS))
def test_qlinear_average_pool(case: str, channels_last: int, dtype: type, backend: str) -> None:
    # 11 channels: channels first, a block of 8 summed side by side (qlinear_pool.CHAINS) and 3 more
    x = integers(dtype, 2, 7, 9, 11) if channels_last else integers(dtype, 2, 11, 7, 9)
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                            channels_last=channels_last, **AVERAGE_POOLS[case])
    model = contrib_model([node], {"x": x}, {"y": ONNX_TYPES[np.dtype(dtype)]}, pool_params(dtype))
    assert_quantized_matches(model, {"x": x}, backend)


def qgemm_case(dtype: type, case: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    rng = np.random.default_rng(5)
    a = integers(dtype, 7, 33, seed=4)
    b = integers(dtype, 33, 10, seed=6)
    inits: dict[str, Any] = {"as": np.float32(0.02), "az": zero(dtype, 3, 120), "b": b, "bs": np.float32(0.013),
                             "bz": zero(dtype, 0, 128), "ys": np.float32(0.5), "yz": zero(dtype, -1, 125)}
    names, attrs, out_type = ["a", "as", "az", "b", "bs", "bz", "", "ys", "yz"], {}, ONNX_TYPES[np.dtype(dtype)]
    if case == "transposed-bias-per-column":
        inits["b"] = np.ascontiguousarray(b.T)
        inits["bs"] = rng.uniform(0.005, 0.02, 10).astype(np.float32)
        inits["bz"] = (rng.integers(-5, 5, 10) if dtype == np.int8 else rng.integers(120, 136, 10)).astype(dtype)
        inits["c"] = rng.integers(-3000, 3000, (10,), dtype=np.int32)
        names[6], attrs = "c", {"transB": 1, "alpha": 0.75}
    elif case == "transposed-a":
        a = np.ascontiguousarray(a.T)
        attrs = {"transA": 1}
    elif case == "float-out":
        inits["c"] = rng.integers(-3000, 3000, (7, 10), dtype=np.int32)
        names, out_type = names[:6] + ["c"], TensorProto.FLOAT
    inputs = {"a": a}
    if case == "b-fed-at-run-time":  # per-column zero points subtracted in the sum, not folded
        inputs["b"] = inits.pop("b")
        inits["bs"] = rng.uniform(0.005, 0.02, 10).astype(np.float32)
        inits["bz"] = (rng.integers(-5, 5, 10) if dtype == np.int8 else rng.integers(120, 136, 10)).astype(dtype)
    node = helper.make_node("QGemm", names, ["y"], domain=MS, **attrs)
    used = {k: v for k, v in inits.items() if k in names}
    return contrib_model([node], inputs, {"y": out_type}, used), inputs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
@pytest.mark.parametrize("case", ["plain", "transposed-a", "transposed-bias-per-column", "float-out",
                                  "b-fed-at-run-time"])
def test_qgemm_matches_onnxruntime(case: str, dtype: type, backend: str) -> None:
    model, inputs = qgemm_case(dtype, case)
    assert_quantized_matches(model, inputs, backend)


# shape, attributes: rows along the last axis, along a middle one, and opset 12's rows of every
# dimension from axis on; axis defaults to -1 at any opset (onnxruntime's schema).
SOFTMAX_CASES: dict[str, tuple[tuple[int, ...], dict[str, int]]] = {
    "last-axis": ((3, 5, 40), {"axis": -1, "opset": 13}),
    "middle-axis": ((3, 40, 5), {"axis": 1, "opset": 13}),
    "opset-12-flattens-from-axis": ((3, 8, 5), {"axis": 1, "opset": 12}),
    "opset-12-flattens-from-axis--2": ((2, 3, 4, 5), {"axis": -2, "opset": 12}),
    "opset-12-default-axis": ((2, 3, 4, 5), {"opset": 12}),
}


def logits(dtype: type, shape: tuple[int, ...], zero_point: int, seed: int = 0) -> np.ndarray:
    """Quantised logits around their zero point (x_scale 0.08: a spread of about +-2 in real)."""
    info = np.iinfo(dtype)
    values = np.random.default_rng(seed).normal(size=shape) * 25 + zero_point
    return np.clip(np.round(values), info.min, info.max).astype(dtype)


def softmax_model(dtype: type, shape: tuple[int, ...], attrs: dict[str, int],
                  fed: tuple[str, ...] = ()) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """QLinearSoftmax with the output scale and zero point the quantiser writes (1/256, and -128
    for int8, 0 for uint8); the parameters named in `fed` are graph inputs instead of constants."""
    x_zero = int(zero(dtype, 4, 131))
    params: dict[str, Any] = {"xs": np.float32(0.08), "xz": zero(dtype, 4, 131), "ys": np.float32(1 / 256),
                              "yz": zero(dtype, -128, 0)}
    if fed:  # another output scale: onnxruntime takes floor(1 / 0.003) = 333 as the multiplier
        params["ys"], params["yz"] = np.float32(0.003), zero(dtype, -100, 20)
    inputs = {"x": logits(dtype, shape, x_zero), **{k: np.asarray(params.pop(k)) for k in fed}}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attrs)
    return contrib_model([node], inputs, {"y": ONNX_TYPES[np.dtype(dtype)]}, params), inputs


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
@pytest.mark.parametrize("case", sorted(SOFTMAX_CASES))
def test_qlinear_softmax_matches_onnxruntime(case: str, dtype: type, backend: str) -> None:
    shape, attrs = SOFTMAX_CASES[case]
    model, inputs = softmax_model(dtype, shape, attrs)
    ours = assert_quantized_matches(model, inputs, backend)
    # Each row's probabilities, in steps of 1/256 above the zero point, add up to 256 but for
    # each value's rounding.
    opset, rank = attrs["opset"], len(shape)
    axis = attrs.get("axis", -1) % rank
    rows = (axis,) if opset >= 13 else tuple(range(axis, rank))
    totals = (ours["y"].astype(np.int64) - int(zero(dtype, -128, 0))).sum(axis=rows)
    assert np.all(np.abs(totals - 256) <= np.prod([shape[a] for a in rows]) / 2), totals


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["int8", "uint8"])
def test_qlinear_softmax_scales_fed_at_run_time(dtype: type, backend: str) -> None:
    """X_scale, Y_scale and Y_zero_point as graph inputs: the kernel builds the exp table and
    floor(1 / Y_scale) itself, as onnxruntime does for parameters it cannot see."""
    model, inputs = softmax_model(dtype, (4, 30), {"axis": -1, "opset": 13}, fed=("xs", "ys", "yz"))
    assert_quantized_matches(model, inputs, backend)


BAD_SOFTMAX = {  # how the file differs from a good one: the message naming the node
    "no-opset": ({"attrs": {"axis": -1}}, "node 'sm' (QLinearSoftmax): attribute 'opset' is required"),
    "axis-out-of-range": ({"attrs": {"axis": 3, "opset": 13}}, "node 'sm' (QLinearSoftmax): axis 3 is out of range "
                                                               "for rank 3"),
    "string-axis": ({"attrs": {"axis": "last", "opset": 13}}, "node 'sm' (QLinearSoftmax): attribute 'axis' is "
                                                              "STRING, expected INT"),
    "int16": ({"dtype": np.int16}, "node 'sm' (QLinearSoftmax): X 'x' has dtype int16; QLinearSoftmax is "
                                   "implemented for int8 and uint8"),
    "zero-output-scale": ({"ys": 0.0}, "node 'sm' (QLinearSoftmax): Y_scale 0.0 must be a positive finite number"),
}


@pytest.mark.parametrize("case", sorted(BAD_SOFTMAX))
def test_bad_qlinear_softmax_is_one_line_naming_the_node(case: str, tmp_path: Path) -> None:
    change, message = BAD_SOFTMAX[case]
    dtype = change.get("dtype", np.uint8)
    x = np.zeros((2, 3, 10), dtype)
    inits = {"s": np.float32(0.1), "z": np.array(0, dtype), "ys": np.float32(change.get("ys", 1 / 256))}
    node = helper.make_node("QLinearSoftmax", ["x", "s", "z", "ys", "z"], ["y"], domain=MS, name="sm",
                            **change.get("attrs", {"opset": 13}))
    model = contrib_model([node], {"x": x}, {"y": ONNX_TYPES[np.dtype(dtype)]}, inits)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", ONNX_TYPES[np.dtype(dtype)], [2, 3, 10]))
    onnx.save(model, tmp_path / "m.onnx")
    result = aot("compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"))
    assert_user_error(result, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("activations", ["int8", "uint8"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_qoperator_examples_with_softmax_compile_and_verify(model: str, activations: str, tmp_path: Path) -> None:
    """`aot quantize --format qoperator` of the bundled classifiers (20 seeded calibration samples)
    ends in a QLinearSoftmax; the file compiles and `aot verify` passes against onnxruntime."""
    out, _ = quantize(tmp_path, model, "--format", "qoperator", "--activation-type", activations)
    assert (MS, "QLinearSoftmax") in {(n.domain, n.op_type) for n in onnx.load(out).graph.node}
    result = aot("verify", str(out), *MODELS[model][3], "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    (output,) = json.loads(result.stdout)["outputs"]
    assert output["passed"] and output["exact_share"] >= MIN_EXACT_SHARE, output


def chain_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """QLinearAdd -> QLinearSigmoid -> QLinearConcat -> QLinearGlobalAveragePool -> DequantizeLinear
    -> Flatten: nothing after the inputs is sized in the file."""
    inputs = {"a": integers(np.uint8, 1, 8, 6, 6, seed=7), "b": integers(np.uint8, 1, 8, 6, 6, seed=8)}
    inits = {"s": np.float32(0.04), "z": np.uint8(128), "s2": np.float32(1 / 256), "z2": np.uint8(0),
             "s3": np.float32(0.05), "z3": np.uint8(110)}
    nodes = [
        helper.make_node("QLinearAdd", ["a", "s", "z", "b", "s", "z", "s", "z"], ["sum"], domain=MS),
        helper.make_node("QLinearSigmoid", ["sum", "s", "z", "s2", "z2"], ["sig"], domain=MS),
        helper.make_node("QLinearConcat", ["s3", "z3", "sum", "s", "z", "sig", "s2", "z2"], ["cat"], domain=MS, axis=1),
        helper.make_node("QLinearGlobalAveragePool", ["cat", "s3", "z3", "s3", "z3"], ["pooled"], domain=MS),
        helper.make_node("DequantizeLinear", ["pooled", "s3", "z3"], ["real"]),
        helper.make_node("Flatten", ["real"], ["y"]),
    ]
    return contrib_model(nodes, inputs, {"y": TensorProto.FLOAT}, inits), inputs


def test_shapes_are_inferred_through_a_chain_of_contrib_ops() -> None:
    model, _ = chain_model()
    graph = import_model(model)
    shapes = {name: graph.tensors[name].shape for name in ("sum", "sig", "cat", "pooled", "real", "y")}
    assert shapes == {"sum": (1, 8, 6, 6), "sig": (1, 8, 6, 6), "cat": (1, 16, 6, 6), "pooled": (1, 16, 1, 1),
                      "real": (1, 16, 1, 1), "y": (1, 16)}
    assert graph.tensors["pooled"].dtype == np.uint8 and graph.tensors["y"].dtype == np.float32


@pytest.mark.parametrize("backend", BACKENDS)
def test_chain_of_contrib_ops_matches_onnxruntime(backend: str) -> None:
    model, inputs = chain_model()
    ours, ref = run_aot(model, inputs, backend=backend), run_onnxruntime(model, inputs)
    assert ours["y"].shape == ref["y"].shape == (1, 16)
    # Each value is a pooled integer times 0.05: at most one unit apart (a sigmoid value on the
    # other side of a half moves a pooled sum by a fraction of a unit).
    np.testing.assert_allclose(ours["y"], ref["y"], atol=0.0501)
    assert float(np.mean(ours["y"] == ref["y"])) >= 0.9


def test_registry_keeps_ops_within_their_domain() -> None:
    assert is_supported(MS, "QLinearAdd") and is_supported(MS, "QGemm")
    assert not is_supported("", "QLinearAdd") and not is_supported("ai.onnx", "QGemm")
    assert is_supported("", "Conv") and is_supported("ai.onnx", "Conv") and not is_supported(MS, "Conv")


def test_unsupported_contrib_op_is_named_with_its_domain() -> None:
    x = integers(np.uint8, 1, 4, 8)
    node = helper.make_node("QAttention", ["x", "s", "z", "s", "z"], ["y"], domain=MS)
    model = contrib_model([node], {"x": x}, {"y": TensorProto.UINT8}, {"s": np.float32(0.1), "z": np.uint8(0)})
    with pytest.raises(UnsupportedError, match="com.microsoft::QAttention"):
        compile_model(model)


def test_16_bit_qlinear_add_is_refused_naming_the_node() -> None:
    model, _ = binary_case("QLinearAdd", np.int8)
    for t in model.graph.input:
        t.type.tensor_type.elem_type = TensorProto.INT16
    for name in ("za", "zb", "zc"):
        init = next(i for i in model.graph.initializer if i.name == name)
        init.CopyFrom(numpy_helper.from_array(np.array(0, np.int16), name))
    with pytest.raises(NodeError, match=r"node 'QLinearAdd#0' .*int16.*int8 and uint8"):
        compile_model(model)


def test_per_channel_scale_of_qlinear_add_is_refused() -> None:
    model, _ = binary_case("QLinearAdd", np.uint8)
    scale = next(i for i in model.graph.initializer if i.name == "sa")
    scale.CopyFrom(numpy_helper.from_array(np.full(64, 0.03, np.float32), "sa"))
    with pytest.raises(NodeError, match="scalar or a 1-element tensor"):
        compile_model(model)


def test_bad_channels_last_is_one_line_naming_the_node(tmp_path: Path) -> None:
    x = integers(np.uint8, 1, 4, 5, 5)
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS,
                            name="gap", channels_last=2)
    model = contrib_model([node], {"x": x}, {"y": TensorProto.UINT8}, pool_params(np.uint8))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4, 1, 1]))
    onnx.save(model, tmp_path / "m.onnx")
    result = aot("compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"))
    assert_user_error(result, "node 'gap' (QLinearGlobalAveragePool)", "channels_last 2")
    assert not (tmp_path / "out").exists()


def test_wrongly_declared_contrib_output_is_refused() -> None:
    model, _ = binary_case("QLinearMul", np.int8)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("c", TensorProto.INT8, [4, 32, 32]))
    with pytest.raises(ModelLoadError, match=r"'c' is declared int8 \[4, 32, 32\] but the node computes int8 "
                                             r"\[4, 32, 64\]"):
        import_model(model)


def float_model_for_quantization(path: Path) -> None:
    """Add, Mul, Sigmoid, LeakyRelu, AveragePool, Concat, GlobalAveragePool, Flatten, Gemm: each
    of them but Flatten has a com.microsoft QOperator form."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Add", ["x", "c1"], ["a"]),
        helper.make_node("Mul", ["a", "x"], ["m"]),
        helper.make_node("Sigmoid", ["m"], ["s"]),
        helper.make_node("LeakyRelu", ["a"], ["l"], alpha=0.1),
        helper.make_node("AveragePool", ["l"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["s", "p"], ["cat"], axis=1),
        helper.make_node("GlobalAveragePool", ["cat"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w", "bias"], ["y"]),
    ]
    inits = {"c1": rng.normal(size=(1, 16, 1, 1)), "w": rng.normal(size=(32, 10)) * 0.2, "bias": rng.normal(size=10)}
    graph = helper.make_graph(nodes, "float", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(v.astype(np.float32), n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_quantize_static_qoperator_model_matches_onnxruntime(activations: str, backend: str, tmp_path: Path) -> None:
    """What onnxruntime.quantization.quantize_static writes in QOperator format (opset imports ""
    and com.microsoft 1) loads, compiles and gives onnxruntime's outputs."""
    quantization = pytest.importorskip("onnxruntime.quantization")
    float_model_for_quantization(tmp_path / "float.onnx")
    rng = np.random.default_rng(1)

    class Calibration(quantization.CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter([{"x": rng.normal(size=(1, 16, 8, 8)).astype(np.float32)} for _ in range(8)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.batches, None)

    quantization.quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "q.onnx"), Calibration(),
                                 quant_format=quantization.QuantFormat.QOperator,
                                 activation_type=getattr(quantization.QuantType, activations),
                                 weight_type=quantization.QuantType.QInt8)
    model = onnx.load(tmp_path / "q.onnx")
    assert {(n.domain, n.op_type) for n in model.graph.node} >= {(MS, op) for op in (
        "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", "QLinearAveragePool", "QLinearConcat",
        "QLinearGlobalAveragePool", "QGemm")}
    inputs = {"x": rng.normal(size=(1, 16, 8, 8)).astype(np.float32)}
    ours, ref = run_aot(model, inputs, backend=backend), run_onnxruntime(model, inputs)
    np.testing.assert_array_equal(ours["y"], ref["y"])


def test_qgemm_zero_point_of_another_type_than_b_is_refused() -> None:
    model, _ = qgemm_case(np.int8, "plain")
    zero_point = next(i for i in model.graph.initializer if i.name == "bz")
    zero_point.CopyFrom(numpy_helper.from_array(np.array(0, np.uint8), "bz"))
    with pytest.raises(NodeError, match=r"b_zero_point 'bz' has dtype uint8; the tensor it describes is int8"):
        compile_model(model)


def test_alternating_contrib_and_onnx_nodes_are_sized_without_a_whole_model_inference_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """50 QLinearAdd -> Identity pairs: the contrib ops and the ai.onnx nodes after them are sized
    in one pass in graph order, not by one inference of the whole model per pair (which took 27 s
    for 200 pairs beside 20 MB of weights)."""
    from aot.frontend import shape_folding

    nodes, previous = [], "x"
    for i in range(50):
        nodes.append(helper.make_node("QLinearAdd", [previous, "s", "z", previous, "s", "z", "s", "z"], [f"a{i}"],
                                      domain=MS))
        nodes.append(helper.make_node("Identity", [f"a{i}"], [f"b{i}"]))
        previous = f"b{i}"
    model = contrib_model(nodes, {"x": integers(np.int8, 1, 64)}, {previous: TensorProto.INT8},
                          {"s": np.float32(0.05), "z": np.int8(0)})
    whole_model_inferences = []
    real = shape_folding.infer_shapes
    monkeypatch.setattr(shape_folding, "infer_shapes",
                        lambda *args, **kwargs: whole_model_inferences.append(1) or real(*args, **kwargs))
    graph = import_model(model)
    assert graph.tensors[previous].shape == (1, 64)
    assert len(whole_model_inferences) <= 4, len(whole_model_inferences)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scales_and_zero_points_fed_at_run_time(backend: str) -> None:
    """Per-tensor parameters that are graph inputs are read by the kernels (a QLinearAdd form and
    the global pool's multiplier) instead of becoming literals."""
    inputs = {"a": integers(np.uint8, 2, 8, 5, 5, seed=1), "b": integers(np.uint8, 8, 1, 1, seed=2),
              "sa": np.array(0.031, np.float32), "za": np.array(117, np.uint8), "sp": np.array(0.07, np.float32)}
    nodes = [helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["c"], domain=MS),
             helper.make_node("QLinearGlobalAveragePool", ["c", "sc", "zc", "sp", "zc"], ["y"], domain=MS)]
    model = contrib_model(nodes, inputs, {"y": TensorProto.UINT8},
                          {"sb": np.float32(0.043), "zb": np.uint8(131), "sc": np.float32(0.029), "zc": np.uint8(126)})
    model.graph.output.append(helper.make_tensor_value_info("c", TensorProto.UINT8, None))
    ours = assert_quantized_matches(model, inputs, backend, rounding_path_differs=True)
    assert ours["y"].shape == (2, 8, 1, 1)


BAD_NODES = {
    "no-parts": (helper.make_node("QLinearConcat", ["s", "z"], ["y"], domain=MS, axis=0), [2], [2],
                 "node 'QLinearConcat#0' (QLinearConcat): has no inputs to concatenate"),
    "window-too-wide": (helper.make_node("QLinearAveragePool", ["x", "s", "z", "s", "z"], ["y"], domain=MS,
                                         kernel_shape=[9, 9]), [1, 2, 4, 4], [1, 2, 1, 1],
                        "window [9, 9] does not fit the input's spatial shape [4, 4]"),
    "k-mismatch": (helper.make_node("QGemm", ["x", "s", "z", "x", "s", "z"], ["y"], domain=MS), [2, 4], [2, 4],
                   "node 'QGemm#0' (QGemm): A [2, 4] and B [2, 4] do not multiply"),
    "no-broadcast": (helper.make_node("QLinearMul", ["x", "s", "z", "w", "s", "z", "s", "z"], ["y"], domain=MS),
                     [2], [3], "inputs of shapes [2] and [3] do not broadcast"),
}


@pytest.mark.parametrize("case", sorted(BAD_NODES))
def test_bad_contrib_node_is_one_line_naming_it(case: str, tmp_path: Path) -> None:
    node, x_shape, y_shape, message = BAD_NODES[case]
    inputs = {"x": np.zeros(x_shape, np.uint8)}
    if "w" in node.input:
        inputs["w"] = np.zeros(y_shape, np.uint8)
    model = contrib_model([node], inputs, {"y": TensorProto.UINT8}, {"s": np.float32(0.1), "z": np.uint8(3)})
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.UINT8, y_shape))
    onnx.save(model, tmp_path / "m.onnx")
    result = aot("compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out"))
    assert_user_error(result, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("side_shape", [(8, 1, 1), (2, 8, 5, 5)], ids=["broadcast-side-input", "same-shape-side-input"])
def test_table_lookup_with_a_fused_epilogue(side_shape: tuple[int, ...], backend: str) -> None:
    """QLinearSigmoid (a 256-entry table) with the QLinearMul after it fused into its kernel: the
    epilogue reads its other operand at each element, broadcast or not."""
    inputs = {"x": integers(np.int8, 2, 8, 5, 5, seed=3), "b": integers(np.int8, *side_shape, seed=4)}
    inits = {"sx": np.float32(0.05), "zx": np.int8(-4), "ss": np.float32(1 / 256), "zs": np.int8(-128),
             "sb": np.float32(0.02), "zb": np.int8(1), "sy": np.float32(0.004), "zy": np.int8(-100)}
    nodes = [helper.make_node("QLinearSigmoid", ["x", "sx", "zx", "ss", "zs"], ["s"], domain=MS),
             helper.make_node("QLinearMul", ["s", "ss", "zs", "b", "sb", "zb", "sy", "zy"], ["y"], domain=MS)]
    model = contrib_model(nodes, inputs, {"y": TensorProto.INT8}, inits)
    assert_quantized_matches(model, inputs, backend, rounding_path_differs=True)
    order = compile_model(model, backend=backend).manifest["kernel_order"]
    assert [k["op"] for k in order] == ["QLinearSigmoid+QLinearMul"], order


def test_contrib_attribute_of_the_wrong_type_is_refused() -> None:
    """No onnx schema checks com.microsoft attributes: a string axis is refused before any
    lowering reads it as a number."""
    model, _ = qgemm_case(np.uint8, "plain")
    model.graph.node[0].attribute.append(helper.make_attribute("transB", "yes"))
    with pytest.raises(ModelLoadError, match=r"node 'QGemm#0' \(QGemm\): attribute 'transB' is STRING, expected INT"):
        import_model(model)
