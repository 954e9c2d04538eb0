"""Compile-time folding never fails a valid model: every op folds its constant inputs over long
axes (hundreds of entries) to what onnxruntime computes, and a model whose constant subgraph
onnx's reference evaluator cannot run still compiles and verifies."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.frontend.shape_folding import fold_static_subgraphs
from tests.helpers import assert_matches_onnxruntime, rand

N = 512  # past the 32/64 choices np.choose takes
_rng = np.random.default_rng(0)


def _ints(low: int, high: int, shape: tuple[int, ...]) -> np.ndarray:
    return _rng.integers(low, high, shape).astype(np.int64)


# (op, constant inputs, attributes, number of outputs)
CASES: list[tuple[str, list[np.ndarray], dict[str, object], int]] = [
    ("GatherElements", [rand(1, N), _ints(-N, N, (1, 128))], {"axis": 1}, 1),
    ("GatherElements", [rand(N, 3), _ints(0, N, (700, 2))], {"axis": 0}, 1),
    ("GatherElements", [rand(4, N, 3), _ints(0, N, (2, 300, 3))], {"axis": -2}, 1),
    ("ScatterElements", [rand(1, N), _ints(0, N, (1, 1)), rand(1, 1)], {"axis": 1}, 1),
    ("Gather", [rand(N, 4), _ints(-N, N, (300,))], {"axis": 0}, 1),
    ("GatherND", [rand(1, N), _ints(0, N, (1, 128, 1))], {"batch_dims": 1}, 1),
    ("ScatterND", [rand(1, N), np.array([[0, 5]], np.int64), rand(1)], {}, 1),
    ("TopK", [rand(1, N), np.array([100], np.int64)], {"axis": 1}, 2),
    ("ArgMax", [rand(3, N)], {"axis": 1}, 1),
    ("CumSum", [rand(2, N), np.array(1, np.int64)], {"reverse": 1}, 1),
    ("Softmax", [rand(2, N)], {"axis": 1}, 1),
    ("Concat", [rand(2, N), rand(2, 7)], {"axis": 1}, 1),
    ("Split", [rand(2, N), np.array([100, N - 100], np.int64)], {"axis": 1}, 2),
    ("Slice", [rand(2, N), np.array([-300], np.int64), np.array([N], np.int64), np.array([1], np.int64)], {}, 1),
    ("OneHot", [_ints(0, N, (1, 64)), np.array(N, np.int64), np.array([0, 1], np.float32)], {}, 1),
    ("Trilu", [rand(N, N)], {"upper": 0}, 1),
    ("Range", [np.array(0, np.int64), np.array(N, np.int64), np.array(1, np.int64)], {}, 1),
    ("Where", [rand(1, N) > 0, rand(1, N), rand(1, N)], {}, 1),
    ("Expand", [rand(1, N), np.array([3, N], np.int64)], {}, 1),
    ("Tile", [rand(1, N), np.array([2, 2], np.int64)], {}, 1),
    ("Transpose", [rand(N, 3)], {"perm": [1, 0]}, 1),
    ("ReduceMax", [rand(3, N), np.array([1], np.int64)], {"keepdims": 0}, 1),
    ("ReduceSum", [rand(3, N), np.array([1], np.int64)], {}, 1),
    ("Pad", [rand(1, N), np.array([0, 3, 0, 3], np.int64)], {"mode": "reflect"}, 1),
    ("DepthToSpace", [rand(1, N, 2, 2)], {"blocksize": 2}, 1),
    ("MatMul", [rand(2, N), rand(N, 3)], {}, 1),
    ("Einsum", [rand(3, N), rand(N, 4)], {"equation": "ij,jk->ik"}, 1),
]


def _one_node_model(op: str, inputs: list[np.ndarray], attrs: dict[str, object], outputs: int) -> onnx.ModelProto:
    names = [f"c{i}" for i in range(len(inputs))]
    out_names = [f"y{i}" for i in range(outputs)]
    graph = helper.make_graph(
        [helper.make_node(op, names, out_names, **attrs)], "fold",
        [], [helper.make_empty_tensor_value_info(name) for name in out_names],
        [numpy_helper.from_array(np.asarray(value), name) for name, value in zip(names, inputs)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


@pytest.mark.parametrize("op, inputs, attrs, outputs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_op_folds_long_axes_as_onnxruntime_computes(op: str, inputs: list[np.ndarray],
                                                         attrs: dict[str, object], outputs: int) -> None:
    model = _one_node_model(op, inputs, attrs, outputs)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    folded = fold_static_subgraphs(model, "fold.onnx")
    assert not folded.graph.node, f"{op} was not folded"
    values = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    for index, want in enumerate(expected):
        got = values[f"y{index}"]
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"{op} output {index}")


def test_out_of_range_constant_gather_elements_names_the_node() -> None:
    from aot.errors import ModelLoadError

    model = _one_node_model("GatherElements", [rand(1, 8), np.array([[9]], np.int64)], {"axis": 1}, 1)
    model.graph.node[0].name = "positions"
    with pytest.raises(ModelLoadError, match=r"node 'positions' \(GatherElements\).*index 9 is out of range"):
        fold_static_subgraphs(model, "bad.onnx")


def test_token_type_buffer_gathered_by_position_compiles_and_verifies() -> None:
    """The BERT embedding pattern transformers exports: a 1x512 buffer gathered by a constant
    1x128 position table, added to the embeddings."""
    positions = np.arange(128, dtype=np.int64).reshape(1, 128)
    buffer = _rng.standard_normal((1, N)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("GatherElements", ["buffer", "positions"], ["token_types"], axis=1, name="node_gather"),
         helper.make_node("Unsqueeze", ["token_types", "axes"], ["column"]),
         helper.make_node("Add", ["x", "column"], ["y"])],
        "bert_positions",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128, 16])],
        [numpy_helper.from_array(buffer, "buffer"), numpy_helper.from_array(positions, "positions"),
         numpy_helper.from_array(np.array([2], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    assert_matches_onnxruntime(model, {"x": rand(1, 128, 16)})
