"""Shape, Size, Constant, ConstantOfShape and Range (aot/ops/shape_ops.py).

The frontend folds these into initializers whenever it can, so these tests turn folding off
(shape inference only) to exercise the lowerings themselves, including size inputs fed at run
time, which the outputs' static shapes make redundant (as for Reshape)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from aot.compiler import load
from aot.frontend import importer
from aot.frontend.shape_folding import fold_static_subgraphs
from aot.lowering.program import lower_graph
from aot.passes.pipeline import run_passes
from tests.helpers import assert_matches_onnxruntime, make_model, rand


@pytest.fixture
def no_folding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every node: the lowering, not onnx's reference evaluator, computes the values."""
    monkeypatch.setattr(importer, "fold_static_subgraphs",
                        lambda model, source, **options: fold_static_subgraphs(model, source, **options,
                                                                               keep_nodes=True))


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: object) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs or ["y"], **attrs)


def kernel_ops(model: onnx.ModelProto) -> list[str]:
    """The op of each kernel aot generates for `model`."""
    graph, _ = load(model)
    run_passes(graph)
    return [k.op for k in lower_graph(graph).kernels]


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"start": -2}, {"end": -1}, {"start": 1, "end": 100}], ids=str)
def test_shape(no_folding: None, attrs: dict[str, int]) -> None:
    x = rand(2, 3, 4, 5)
    model = make_model([node("Shape", ["x"], **attrs)], {"x": x}, ["y"], opset=15 if attrs else 13)
    assert_matches_onnxruntime(model, {"x": x})


def test_shape_and_size_feed_kernels(no_folding: None) -> None:
    """Their constant outputs are read by later kernels like any weight."""
    x = rand(2, 3)
    nodes = [node("Shape", ["x"], ["s"]), node("Size", ["x"], ["n"]), node("ReduceSum", ["s"], ["total"]),
             node("Add", ["total", "n"], ["y"])]
    assert_matches_onnxruntime(make_model(nodes, {"x": x}, ["y"], opset=13), {"x": x})


def test_size(no_folding: None) -> None:
    x = rand(3, 1, 7)
    assert_matches_onnxruntime(make_model([node("Size", ["x"])], {"x": x}, ["y"]), {"x": x})


CONSTANT_ATTRS = {
    "tensor": {"value": numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)},
    "value_float": {"value_float": 1.25},
    "value_floats": {"value_floats": [1.0, -2.0, 3.5]},
    "value_int": {"value_int": 7},
    "value_ints": {"value_ints": [3, -1, 4]},
}


@pytest.mark.parametrize("case", sorted(CONSTANT_ATTRS))
def test_constant(no_folding: None, case: str) -> None:
    attrs = CONSTANT_ATTRS[case]
    model = make_model([node("Constant", [], ["c"], **attrs), node("Identity", ["c"], ["y"])], {}, ["y"], opset=13)
    assert_matches_onnxruntime(model, {})


def test_constant_read_by_a_kernel(no_folding: None) -> None:
    x = rand(2, 3)
    c = numpy_helper.from_array(rand(2, 3, seed=1))
    model = make_model([node("Constant", [], ["c"], value=c), node("Add", ["x", "c"])], {"x": x}, ["y"])
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([-3], np.int64),
                                   np.array([7], np.int32)], ids=["default", "float", "int64", "int32"])
def test_constant_of_shape(no_folding: None, value: np.ndarray | None) -> None:
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    model = make_model([node("ConstantOfShape", ["s"], **attrs)], {}, ["y"], {"s": np.array([2, 3, 4], np.int64)})
    assert_matches_onnxruntime(model, {})
    assert kernel_ops(model) == ["ConstantOfShape"]  # a fill loop, not a stored copy of the values


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int64), (10, -3, -4, np.int32), (1.5, 4.0, 0.5, np.float32), (3.0, 1.0, -0.7, np.float32),
    (5, 5, 1, np.int64),
], ids=str)
def test_range(no_folding: None, start: float, limit: float, delta: float, dtype: type) -> None:
    inits = {"a": np.array(start, dtype), "b": np.array(limit, dtype), "d": np.array(delta, dtype)}
    model = make_model([node("Range", ["a", "b", "d"])], {}, ["y"], inits, opset=11)
    assert_matches_onnxruntime(model, {})


def test_folded_by_default() -> None:
    """With folding on (the default), a static Shape/ConstantOfShape/Range chain needs no kernel
    except the copy into the output."""
    x = rand(2, 3)
    nodes = [node("Shape", ["x"], ["s"]), node("ConstantOfShape", ["s"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"])
    assert kernel_ops(model) == ["Copy"]
    assert_matches_onnxruntime(model, {"x": x})


def _declare_output(model: onnx.ModelProto, shape: tuple[int, ...]) -> None:
    """Give the graph output a static shape, as an exporter's value_info would, so the model gets
    past shape inference to the lowering."""
    dims = model.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    for d in shape:
        dims.add().dim_value = d


def test_runtime_shape_of_constant_of_shape(no_folding: None) -> None:
    """The fill covers the output's declared static shape; the shape input is not read."""
    feeds = {"s": np.array([2, 3], np.int64)}
    model = make_model([node("ConstantOfShape", ["s"])], feeds, ["y"])
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    _declare_output(model, (2, 3))
    assert_matches_onnxruntime(model, feeds)


def test_runtime_range(no_folding: None) -> None:
    """start and delta are read at run time; the length is the output's declared one."""
    feeds = {"a": np.array(-1.5, np.float32), "b": np.array(1.0, np.float32), "d": np.array(0.75, np.float32)}
    model = make_model([node("Range", ["a", "b", "d"])], feeds, ["y"], opset=11)
    model.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    _declare_output(model, (4,))
    assert_matches_onnxruntime(model, feeds)
