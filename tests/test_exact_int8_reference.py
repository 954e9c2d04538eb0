"""aot/commands/exact_int8_reference.py: the int8 reference runs of verify, quantize and the tests stay
exact on x86 machines without VNNI, where onnxruntime's uint8 x int8 products saturate."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from aot.commands.exact_int8_reference import onnxruntime_int8_saturates, reencode_int8
from tests.helpers import make_model
from tests.test_ops_quantized_integer import model_of


def _matmul_integer_case() -> tuple:
    """MatMulInteger of uint8 activations at 255 by int8 weights at 127: each pair of products
    is 64770, which 16 bits cannot hold."""
    rng = np.random.default_rng(0)
    a = rng.integers(200, 256, size=(4, 64)).astype(np.uint8)
    b = rng.integers(100, 128, size=(64, 8)).astype(np.int8)
    values = {"a": a, "b": b, "a_zero_point": np.array(0, np.uint8)}
    model, feeds = model_of("MatMulInteger", ["a", "b", "a_zero_point"], values, {"a"}, ["y"])
    exact = a.astype(np.int64) @ b.astype(np.int64)
    return model, feeds, exact


def _run(model, feeds) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_reencoded_products_are_exact() -> None:
    model, feeds, exact = _matmul_integer_case()
    reencoded = reencode_int8(model)
    assert reencoded is not None and not reencoded.inputs and not reencoded.outputs
    (y,) = _run(reencoded.model, reencoded.feeds(feeds))
    np.testing.assert_array_equal(y, exact)


def test_onnxruntime_saturates_where_the_reference_says_it_does() -> None:
    """The reason for the module, measured on this machine: its own run of the file is off."""
    model, feeds, exact = _matmul_integer_case()
    (y,) = _run(model, feeds)
    assert bool(np.any(y != exact)) == onnxruntime_int8_saturates()


def test_int8_graph_inputs_and_outputs_are_shifted_back() -> None:
    """A QLinearMatMul whose int8 input and output are the graph's: the caller feeds and reads
    int8, the re-encoded graph runs uint8, and the results are those of the int8 graph."""
    rng = np.random.default_rng(1)
    values = {"a": rng.integers(-128, 128, size=(3, 16)).astype(np.int8), "a_scale": np.float32(0.05),
              "a_zero_point": np.array(-3, np.int8), "b": rng.integers(-20, 20, size=(16, 5)).astype(np.int8),
              "b_scale": np.float32(0.02), "b_zero_point": np.array(0, np.int8), "y_scale": np.float32(0.04),
              "y_zero_point": np.array(5, np.int8)}
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
    model, feeds = model_of("QLinearMatMul", names, values, {"a"}, ["y"])
    reencoded = reencode_int8(model)
    assert reencoded is not None and reencoded.inputs == {"a"} and reencoded.outputs == {"y"}
    (y,) = _run(reencoded.model, reencoded.feeds(feeds))
    got = reencoded.result("y", y)
    assert got.dtype == np.int8
    # |products| stay far below the 16-bit bound here, so onnxruntime's own int8 run is exact too
    np.testing.assert_array_equal(got, _run(model, feeds)[0])


@pytest.mark.parametrize("op", ["Cast", "Add"])
def test_other_uses_of_int8_keep_the_graph_as_it_is(op: str) -> None:
    """An int8 tensor read as a number (Cast to float, integer Add) would change with the shift."""
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, size=(2, 8)).astype(np.uint8)
    b = rng.integers(-128, 128, size=(8, 3)).astype(np.int8)
    product = helper.make_node("MatMulInteger", ["a", "b"], ["p"])
    other = helper.make_node("Cast", ["b"], ["y"], to=1) if op == "Cast" else helper.make_node("Add", ["b", "b"], ["y"])
    model = make_model([product, other], {"a": a}, ["p", "y"], {"b": b})
    assert reencode_int8(model) is None


def test_concatenated_int8_inputs_are_reencoded_together() -> None:
    """Concat moves bytes from all its inputs: the graph is re-encoded and gives the same result."""
    rng = np.random.default_rng(3)
    a1, a2 = (rng.integers(-128, 128, size=(2, 8)).astype(np.int8) for _ in range(2))
    inits = {"s": np.float32(0.05), "z": np.array(1, np.int8), "b": rng.integers(-9, 9, size=(8, 4)).astype(np.int8),
             "bs": np.float32(0.02), "bz": np.array(0, np.int8), "ys": np.float32(0.03), "yz": np.array(-2, np.int8)}
    nodes = [helper.make_node("Concat", ["a1", "a2"], ["a"], axis=0),
             helper.make_node("QLinearMatMul", ["a", "s", "z", "b", "bs", "bz", "ys", "yz"], ["y"])]
    model = make_model(nodes, {"a1": a1, "a2": a2}, ["y"], inits)
    reencoded = reencode_int8(model)
    assert reencoded is not None and reencoded.inputs == {"a1", "a2"}
    feeds = {"a1": a1, "a2": a2}
    (y,) = _run(reencoded.model, reencoded.feeds(feeds))
    np.testing.assert_array_equal(reencoded.result("y", y), _run(model, feeds)[0])
