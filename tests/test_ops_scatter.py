"""ScatterND, ScatterElements and TensorScatter against onnxruntime (TensorScatter against onnx's
reference evaluator: onnxruntime 1.32 has no kernel for it), and the in-place form that writes
only the updates into an intermediate nobody reads afterwards."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from aot.errors import NodeError
from aot.lowering.program import lower_graph
from aot.passes.pipeline import run_passes
from tests.helpers import assert_matches_onnxruntime, compare, make_model, rand, run_aot

REDUCTIONS = ["none", "add", "mul", "max", "min"]


def scatter(op: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], opset: int = 18,
            **attrs: object) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    names = ["data", "indices", "updates"] if op != "TensorScatter" else ["data", "updates", "indices"]
    names = [n for n in names if n in inputs or n in consts]
    node = helper.make_node(op, names, ["y"], name=f"{op.lower()}_node", **attrs)
    return make_model([node], inputs, ["y"], consts, opset=opset), inputs


def split(values: dict[str, np.ndarray], constant: bool) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The graph inputs and the initializers: indices are one or the other."""
    inputs = {k: v for k, v in values.items() if k != "indices" or not constant}
    consts = {k: v for k, v in values.items() if k == "indices" and constant}
    return inputs, consts


# ---------------------------------------------------------------------------------------------
# ScatterND


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("constant", [True, False], ids=["const_indices", "input_indices"])
def test_scatter_nd_reductions(reduction: str, constant: bool) -> None:
    rng = np.random.default_rng(3)
    indices = np.array([[1, -1], [0, 2], [-3, 0]], dtype=np.int64)  # negative ones count from the end
    values = {"data": rand(3, 4, 5, seed=1), "indices": indices, "updates": rand(3, 5, seed=2)}
    values["updates"] += rng.integers(0, 2, size=(3, 5)).astype(np.float32)
    model, feeds = scatter("ScatterND", *split(values, constant), reduction=reduction)
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("constant", [True, False], ids=["const_indices", "input_indices"])
def test_scatter_nd_duplicate_indices_add(constant: bool) -> None:
    indices = np.array([[1], [0], [1], [-2]], dtype=np.int64)  # row 1 four times, -2 is 1 too
    values = {"data": rand(3, 6, seed=4), "indices": indices, "updates": rand(4, 6, seed=5)}
    model, feeds = scatter("ScatterND", *split(values, constant), opset=16, reduction="add")
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("opset", [11, 13])
def test_scatter_nd_whole_elements_and_int_data(opset: int) -> None:
    data = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    indices = np.array([[[0, 1, 2], [1, 2, -1]], [[1, 0, 0], [0, 0, 3]]], dtype=np.int64)
    values = {"data": data, "indices": indices, "updates": -np.arange(4, dtype=np.int32).reshape(2, 2)}
    model, feeds = scatter("ScatterND", *split(values, False), opset=opset)
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("seed", range(4))
def test_scatter_nd_random_shapes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 5))
    shape = [int(d) for d in rng.integers(1, 6, size=rank)]
    m = int(rng.integers(1, rank + 1))
    count = int(rng.integers(1, 4))
    # distinct positions: with 'none', which of two duplicates wins is left to the implementation
    flat = rng.permutation(int(np.prod(shape[:m])))[:count]
    indices = np.stack(np.unravel_index(flat, shape[:m]), axis=-1).astype(np.int64)
    values = {"data": rand(*shape, seed=seed), "indices": indices, "updates": rand(len(flat), *shape[m:], seed=9)}
    model, feeds = scatter("ScatterND", *split(values, seed % 2 == 0))
    assert_matches_onnxruntime(model, feeds)


# ---------------------------------------------------------------------------------------------
# ScatterElements


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("constant", [True, False], ids=["const_indices", "input_indices"])
def test_scatter_elements_reductions(reduction: str, constant: bool) -> None:
    indices = np.array([[0, -1, 2], [1, 1, -3], [2, 0, 0]], dtype=np.int64)
    values = {"data": rand(3, 4, seed=6), "indices": indices, "updates": rand(3, 3, seed=7)}
    model, feeds = scatter("ScatterElements", *split(values, constant), axis=1, reduction=reduction)
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("opset", [11, 13, 16])
def test_scatter_elements_negative_axis_and_duplicates(opset: int) -> None:
    indices = np.array([[[1, 1], [0, -1]], [[-2, 0], [1, 1]]], dtype=np.int32)
    values = {"data": rand(2, 3, 2, seed=8), "indices": indices, "updates": rand(2, 2, 2, seed=9)}
    attrs = {"reduction": "add"} if opset >= 16 else {}
    model, feeds = scatter("ScatterElements", *split(values, False), opset=opset, axis=-2, **attrs)
    assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("seed", range(4))
def test_scatter_elements_random_shapes(seed: int) -> None:
    rng = np.random.default_rng(10 + seed)
    rank = int(rng.integers(1, 5))
    shape = [int(d) for d in rng.integers(1, 6, size=rank)]
    axis = int(rng.integers(-rank, rank))
    ishape = [int(rng.integers(1, d + 1)) for d in shape]
    indices = rng.integers(-shape[axis], shape[axis], size=ishape).astype(np.int64)
    values = {"data": rand(*shape, seed=seed), "indices": indices, "updates": rand(*ishape, seed=seed + 1)}
    model, feeds = scatter("ScatterElements", *split(values, seed % 2 == 1), axis=axis, reduction="add")
    assert_matches_onnxruntime(model, feeds)


# ---------------------------------------------------------------------------------------------
# KV-cache-like updates: one position along axis 2 of [1, 4, 128, 64]


def test_kv_cache_scatter_nd() -> None:
    cache, new = rand(1, 4, 128, 64, seed=1), rand(1, 4, 1, 64, seed=2)
    indices = np.array([[[[0, h, 77]] for h in range(4)]], dtype=np.int64)  # [1, 4, 1, 3]
    model, feeds = scatter("ScatterND", {"data": cache, "indices": indices, "updates": new}, {})
    assert_matches_onnxruntime(model, feeds)


def test_kv_cache_scatter_elements() -> None:
    cache, new = rand(1, 4, 128, 64, seed=1), rand(1, 4, 1, 64, seed=2)
    indices = np.full((1, 4, 1, 64), -5, dtype=np.int64)
    model, feeds = scatter("ScatterElements", {"data": cache, "indices": indices, "updates": new}, {}, axis=2)
    assert_matches_onnxruntime(model, feeds)


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """onnx's reference evaluator: onnxruntime 1.32 implements no TensorScatter kernel."""
    return ReferenceEvaluator(model).run(None, feeds)[0]


def assert_matches_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    result = compare("y", run_aot(model, feeds)["y"], reference(model, feeds), 1e-6)
    assert result.passed, result.detail


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_kv_cache_tensor_scatter(mode: str) -> None:
    cache, new = rand(2, 4, 128, 64, seed=1), rand(2, 4, 3, 64, seed=2)
    write = np.array([77, 126], dtype=np.int64)  # circular: the second sample wraps to 0
    if mode == "linear":
        write[1] = 125
    model, feeds = scatter("TensorScatter", {"data": cache, "updates": new, "indices": write}, {}, opset=24,
                           axis=2, mode=mode)
    assert_matches_reference(model, feeds)


def test_tensor_scatter_without_write_indices_negative_axis() -> None:
    model, feeds = scatter("TensorScatter", {"data": rand(3, 5, 2, seed=3), "updates": rand(3, 2, 2, seed=4)}, {},
                           opset=24)
    assert_matches_reference(model, feeds)


def test_out_of_range_runtime_indices_are_clamped() -> None:
    """onnxruntime refuses out-of-range indices at run time; aot clamps them like Gather."""
    data, updates = rand(4, 3, seed=1), rand(2, 3, seed=2)
    indices = np.array([[100], [-100]], dtype=np.int64)
    model, feeds = scatter("ScatterND", {"data": data, "indices": indices, "updates": updates}, {})
    expected = data.copy()
    expected[3], expected[0] = updates[0], updates[1]
    np.testing.assert_array_equal(run_aot(model, feeds)["y"], expected)
    model, feeds = scatter("ScatterElements", {"data": data, "indices": indices, "updates": updates[:, :1]}, {},
                           axis=0, reduction="add")
    expected = data.copy()
    expected[3, 0] += updates[0, 0]
    expected[0, 0] += updates[1, 0]
    np.testing.assert_allclose(run_aot(model, feeds)["y"], expected, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# In place: a scatter into an intermediate nobody reads afterwards writes only the updates


def in_place_model(op: str, readers_after: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """data = x * 2 scattered at one position along axis 2; optionally data is also read after."""
    x, new = rand(1, 4, 16, 8, seed=1), rand(1, 4, 1, 8, seed=2)
    two = np.array(2, dtype=np.float32)
    if op == "ScatterND":
        extra = {"indices": np.array([[[[0, h, 5]] for h in range(4)]], dtype=np.int64)}
        node = helper.make_node(op, ["data", "indices", "new"], ["s"], name="scatter")
    elif op == "ScatterElements":
        extra = {"indices": np.full((1, 4, 1, 8), 5, dtype=np.int64)}
        node = helper.make_node(op, ["data", "indices", "new"], ["s"], name="scatter", axis=2)
    else:
        extra = {"indices": np.array([5], dtype=np.int64)}
        node = helper.make_node(op, ["data", "new", "indices"], ["s"], name="scatter", axis=2)
    nodes = [helper.make_node("Mul", ["x", "two"], ["data"], name="mul"), node,
             helper.make_node("Add", ["s", "data" if readers_after else "x"], ["y"], name="add")]
    return make_model(nodes, {"x": x, "new": new, **extra}, ["y"], {"two": two}, opset=24), {"x": x, "new": new,
                                                                                          **extra}


def scatter_kernel_params(model: onnx.ModelProto, name: str = "scatter") -> list[int]:
    from aot.compiler import load

    graph, _ = load(model)
    run_passes(graph)
    program = lower_graph(graph)
    kernel = next(k for k, node in zip(program.kernels, program.nodes) if node is not None and node.name == name)
    return sorted(b.size for b in kernel.params)


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements", "TensorScatter"])
def test_in_place_writes_only_the_updates(op: str) -> None:
    model, feeds = in_place_model(op, readers_after=False)
    # the cache (512 elements) is bound once, as the output: no read of a separate copy
    assert scatter_kernel_params(model).count(4 * 16 * 8) == 1
    if op == "TensorScatter":
        assert_matches_reference(model, feeds)
    else:
        assert_matches_onnxruntime(model, feeds)


@pytest.mark.parametrize("op", ["ScatterND", "ScatterElements", "TensorScatter"])
def test_data_read_afterwards_is_copied(op: str) -> None:
    model, feeds = in_place_model(op, readers_after=True)
    assert scatter_kernel_params(model).count(4 * 16 * 8) == 2
    if op == "TensorScatter":
        assert_matches_reference(model, feeds)
    else:
        assert_matches_onnxruntime(model, feeds)


# ---------------------------------------------------------------------------------------------
# Bad input: one line naming the node


def test_bad_input_is_one_line_from_the_cli(tmp_path) -> None:  # noqa: ANN001
    from tests.test_cli import aot, assert_user_error

    path = tmp_path / "bad.onnx"
    onnx.save(raw_model("ScatterND", {"data": [3, 4], "indices": [2, 1], "updates": [2, 4]}, reduction="avg"), path)
    assert_user_error(aot("compile", str(path), "-o", str(tmp_path / "pkg")), "'bad'", "reduction 'avg'")
    assert not (tmp_path / "pkg").exists()


def lowering_error(model: onnx.ModelProto) -> str:
    from aot.compiler import load

    graph, _ = load(model)
    run_passes(graph)
    with pytest.raises(NodeError) as info:
        lower_graph(graph)
    message = str(info.value)
    assert "\n" not in message
    return message


def raw_model(op: str, inputs: dict[str, list[int]], opset: int = 18, **attrs: object) -> onnx.ModelProto:
    """A model onnx's checker would refuse, with the output typed like data (shape inference off)."""
    types = {"indices": onnx.TensorProto.INT64}
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), ["y"], name="bad", **attrs)], "bad",
        [helper.make_tensor_value_info(n, types.get(n, onnx.TensorProto.FLOAT), s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, inputs["data"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize(("op", "inputs", "attrs", "says"), [
    ("ScatterND", {"data": [3, 4], "indices": [2, 3], "updates": [2]}, {}, "indices [2, 3]"),
    ("ScatterND", {"data": [3, 4], "indices": [2, 1], "updates": [2, 3]}, {}, "updates [2, 3]"),
    ("ScatterND", {"data": [3, 4], "indices": [2, 1], "updates": [2, 4]}, {"reduction": "avg"}, "reduction 'avg'"),
    ("ScatterElements", {"data": [3, 4], "indices": [2], "updates": [2]}, {}, "indices rank 1"),
    ("ScatterElements", {"data": [3, 4], "indices": [2, 2], "updates": [2, 2]}, {"axis": 2}, "axis 2"),
    ("ScatterElements", {"data": [3, 4], "indices": [2, 2], "updates": [2, 3]}, {}, "updates [2, 3]"),
    ("TensorScatter", {"data": [2, 4, 3], "updates": [2, 5, 3]}, {"axis": 1}, "update [2, 5, 3]"),
    ("TensorScatter", {"data": [2, 4, 3], "updates": [2, 1, 3]}, {"axis": 0}, "axis 0"),
    ("TensorScatter", {"data": [2, 4, 3], "updates": [2, 1, 3]}, {"mode": "ring"}, "mode 'ring'"),
])
def test_bad_input_names_the_node(op: str, inputs: dict[str, list[int]], attrs: dict[str, object], says: str) -> None:
    message = lowering_error(raw_model(op, inputs, opset=24 if op == "TensorScatter" else 18, **attrs))
    assert "'bad'" in message and says in message, message


@pytest.mark.parametrize("early", ["ReduceMax", "Sin"])
def test_in_place_after_an_earlier_reader(early: str) -> None:
    """data is read by a node before the scatter: a ReduceMax runs before it, so the scatter may
    write into data (the scheduler keeps the ReduceMax first); a Sin fuses into the final Add and
    runs after it, so the first scatter copies data. The second scatter writes into the first's
    output, which nothing else reads."""
    x, new = rand(2, 8, seed=1), rand(1, 8, seed=2)
    indices = np.array([[-2]], dtype=np.int64)
    nodes = [helper.make_node("Mul", ["x", "x"], ["data"], name="mul"),
             helper.make_node(early, ["data"], ["z"], name="early"),
             helper.make_node("ScatterND", ["data", "indices", "new"], ["s"], name="scatter"),
             helper.make_node("ScatterND", ["s", "indices", "new"], ["s2"], name="again", reduction="mul"),
             helper.make_node("Add", ["s2", "z"], ["y"], name="add")]
    model = make_model(nodes, {"x": x, "new": new, "indices": indices}, ["y"], opset=18)
    assert scatter_kernel_params(model).count(16) == (1 if early == "ReduceMax" else 2)
    assert scatter_kernel_params(model, "again").count(16) == 1
    assert_matches_onnxruntime(model, {"x": x, "new": new, "indices": indices})
