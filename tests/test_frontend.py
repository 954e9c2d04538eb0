"""ONNX frontend: fixing shapes, folding shape subgraphs, external data, opset upgrades, errors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import load
from aot.errors import InputShapeError, ModelLoadError, UnsupportedError
from aot.frontend.input_shapes import parse_input_shapes
from tests.helpers import assert_matches_onnxruntime, matmul_model_file, rand


def dynamic_reshape_model() -> onnx.ModelProto:
    """What exporters emit for x.view(x.size(0), -1): Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y"]),
        helper.make_node("ConstantOfShape", ["target_len"], ["ones"], value=numpy_helper.from_array(
            np.array([1.0], dtype=np.float32))),
        helper.make_node("Add", ["y", "ones"], ["z"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axes0"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
        numpy_helper.from_array(rand(48, 5, seed=3), "w"),
        numpy_helper.from_array(np.array([5], dtype=np.int64), "target_len"),
    ]
    graph = helper.make_graph(nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_shape_subgraph_folds_to_a_static_graph() -> None:
    graph, _ = load(dynamic_reshape_model(), {"x": (2, 3, 4, 4)})
    assert sorted(n.op_type for n in graph.nodes) == ["Add", "MatMul", "Reshape"]
    assert graph.outputs[0].shape == (2, 5)


def test_folded_model_matches_onnxruntime() -> None:
    x = rand(3, 3, 4, 4)
    assert_matches_onnxruntime(dynamic_reshape_model(), {"x": x}, input_shapes={"x": (3, 3, 4, 4)})


def test_symbolic_dimension_without_input_shape_is_named() -> None:
    with pytest.raises(InputShapeError, match=r"'x' dimension 0 \(N\).*--input-shape"):
        load(dynamic_reshape_model())


def test_input_shape_naming_no_input() -> None:
    with pytest.raises(InputShapeError, match=r"no input 'image' \(inputs: 'x'\)"):
        load(dynamic_reshape_model(), {"image": (1, 3, 4, 4)})


def test_input_shape_with_wrong_rank() -> None:
    with pytest.raises(InputShapeError, match="rank 4 .* rank 2"):
        load(dynamic_reshape_model(), {"x": (1, 48)})


def test_input_shape_conflicting_with_fixed_dim() -> None:
    with pytest.raises(InputShapeError, match="dimension 1 of input 'x' is fixed at 3"):
        load(dynamic_reshape_model(), {"x": (1, 4, 4, 4)})


@pytest.mark.parametrize("text,message", [
    ("x", "expected NAME="), ("=1x2", "expected NAME="), ("x=1xa", "'a' is not an integer"),
    ("x=1x0", "must be positive"), ("x=-1x3", "must be positive"),
])
def test_parse_input_shape_errors(text: str, message: str) -> None:
    with pytest.raises(InputShapeError, match=message):
        parse_input_shapes([text])


def test_parse_input_shape_forms() -> None:
    assert parse_input_shapes(["a=1x3x224x224", "b=4", "c=2,3", "d="]) == {
        "a": (1, 3, 224, 224), "b": (4,), "c": (2, 3), "d": ()}


def test_all_unsupported_ops_are_listed_at_once() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"),
             helper.make_node("HardSwishy", ["a"], ["b"], name="custom1", domain="my.domain"),
             helper.make_node("NonMaxSuppression", ["b", "b"], ["c"], name="nms1"),
             helper.make_node("NonMaxSuppression", ["b", "b"], ["d"], name="nms2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
                              [helper.make_tensor_value_info("c", TensorProto.INT64, None),
                               helper.make_tensor_value_info("d", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.domain", 1)])
    with pytest.raises(UnsupportedError) as info:
        load(model)
    message = str(info.value)
    assert "2 unsupported op types" in message
    assert "NonMaxSuppression (2 nodes: 'nms1', 'nms2')" in message
    assert "my.domain::HardSwishy (1 node: 'custom1')" in message
    assert info.value.unsupported == {"NonMaxSuppression": ["nms1", "nms2"], "my.domain::HardSwishy": ["custom1"]}


def test_old_opset_is_upgraded() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Softmax", ["a"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 5)])
    model.ir_version = 3
    x = rand(2, 5)
    from tests.helpers import run_aot

    ours = run_aot(model, {"x": x})["y"]
    e = np.exp(np.maximum(x, 0) - np.maximum(x, 0).max(axis=1, keepdims=True))
    np.testing.assert_allclose(ours, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def _external_model(tmp_path: Path, location: str) -> Path:
    w = rand(4, 3, seed=2)
    tensor = numpy_helper.from_array(w, "w")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(w.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return matmul_model_file(tmp_path, tensor)


def test_external_data_inside_the_model_folder(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(rand(4, 3, seed=2).tobytes())
    graph, _ = load(path)
    np.testing.assert_array_equal(graph.tensors["w"].data, rand(4, 3, seed=2))


@pytest.mark.parametrize("location,message", [
    ("/etc/passwd", "absolute paths are not allowed"),
    ("../outside.bin", "leaves the model's folder"),
    ("missing.bin", "file not found"),
])
def test_external_data_paths_are_confined(tmp_path: Path, location: str, message: str) -> None:
    (tmp_path / "outside.bin").write_bytes(b"\0" * 48)
    inner = tmp_path / "m"
    inner.mkdir()
    path = _external_model(inner, location)
    with pytest.raises(ModelLoadError, match=message):
        load(path)


def test_external_data_symlink_out_of_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.bin").write_bytes(b"\0" * 48)
    inner = tmp_path / "m"
    inner.mkdir()
    os.symlink(tmp_path / "secret.bin", inner / "weights.bin")
    with pytest.raises(ModelLoadError, match="leaves the model's folder"):
        load(_external_model(inner, "weights.bin"))


def test_external_data_file_too_short(tmp_path: Path) -> None:
    path = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(b"\0" * 20)
    with pytest.raises(ModelLoadError, match="shorter than the tensor"):
        load(path)
