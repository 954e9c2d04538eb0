"""Reductions (aot/ops/reduce.py) against onnxruntime over their attribute and opset variants:
Reduce* (axes as attribute or input, negative axes, keepdims, noop_with_empty_axes, empty sets),
ArgMax/ArgMin, Hardmax, TopK and CumSum; plus the NaN rules onnxruntime follows."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from aot.errors import AotError
from tests.helpers import BIT_EXACT_TARGET, assert_matches_onnxruntime, make_model, rand, run_aot, run_onnxruntime

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


def _axes_as_input_since(op: str) -> int:
    return 13 if op == "ReduceSum" else 18


def reduce_model(op: str, x: np.ndarray, axes: list[int] | None, opset: int, **attrs: object):
    """A one-node Reduce model with axes given the way `opset` wants them."""
    inits = {}
    inputs = ["x"]
    if opset >= _axes_as_input_since(op):
        if axes is not None:
            inits["axes"] = np.array(axes, dtype=np.int64)
            inputs.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    return make_model([helper.make_node(op, inputs, ["y"], **attrs)], {"x": x}, ["y"], inits, opset=opset)


def reduce_input(op: str, *shape: int, seed: int = 0) -> np.ndarray:
    x = rand(*shape, seed=seed)
    if op == "ReduceLogSum":
        return np.abs(x) + 0.1  # log of a positive sum
    if op == "ReduceProd":
        return (0.5 + np.abs(x)).astype(np.float32)  # keeps products of ~20 terms near 1
    return x


AXES_CASES = {
    "all": (None, {}),
    "one": ([1], {}),
    "negative": ([-1], {}),
    "two": ([0, 2], {}),
    "two_unsorted_negative": ([-1, 0], {}),
    "no_keepdims": ([1], {"keepdims": 0}),
    "all_no_keepdims": (None, {"keepdims": 0}),
}


# Axes as an attribute (11), and as an input since 13 (ReduceSum) or 18 (the others).
OP_OPSETS = [(op, opset) for op in REDUCE_OPS for opset in (11, _axes_as_input_since(op))]


@pytest.mark.parametrize("case", sorted(AXES_CASES))
@pytest.mark.parametrize("op,opset", OP_OPSETS, ids=[f"{op}-{opset}" for op, opset in OP_OPSETS])
def test_reduce(op: str, opset: int, case: str) -> None:
    axes, attrs = AXES_CASES[case]
    x = reduce_input(op, 3, 4, 5)
    assert_matches_onnxruntime(reduce_model(op, x, axes, opset, **attrs), {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_noop_with_empty_axes(op: str) -> None:
    """Empty axes with noop_with_empty_axes=1 reduce nothing: each element on its own (so
    ReduceSumSquare squares, ReduceL1 takes abs, ...)."""
    x = reduce_input(op, 2, 3)
    opset = _axes_as_input_since(op)
    for axes in (None, []):
        model = reduce_model(op, x, axes, opset, noop_with_empty_axes=1)
        assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_rank0_and_size1(op: str) -> None:
    for x in (reduce_input(op, 1, seed=3).reshape(()), reduce_input(op, 1, 1, 4, seed=4)):
        assert_matches_onnxruntime(reduce_model(op, x, None, 18), {"x": x})


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_empty_set(op: str) -> None:
    """Reducing zero elements gives the reduction's identity (0, 1, -inf, +inf, log 0 ...).
    onnxruntime rejects empty inputs here, so the expected values are ONNX's reference ones."""
    x = np.zeros((2, 0, 4), np.float32)
    model = reduce_model(op, x, [1], 18)
    expected = {"ReduceSum": 0.0, "ReduceMean": np.nan, "ReduceMax": -np.inf, "ReduceMin": np.inf,
                "ReduceProd": 1.0, "ReduceL1": 0.0, "ReduceL2": 0.0, "ReduceSumSquare": 0.0,
                "ReduceLogSum": -np.inf, "ReduceLogSumExp": -np.inf}[op]
    y = run_aot(model, {"x": x})["y"]
    np.testing.assert_array_equal(y, np.full((2, 1, 4), expected, np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceSumSquare", "ReduceMean"])
def test_reduce_integers(op: str, dtype: type) -> None:
    x = np.random.default_rng(1).integers(-9, 10, size=(3, 4, 2)).astype(dtype)
    for axes, keepdims in (([1], 1), ([0, 2], 0), (None, 1)):
        assert_matches_onnxruntime(reduce_model(op, x, axes, 18, keepdims=keepdims), {"x": x})


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_bool(op: str) -> None:
    x = np.array([[True, False, True], [False, False, False], [True, True, True]])
    for axes in ([1], [0]):
        assert_matches_onnxruntime(reduce_model(op, x, axes, 20), {"x": x})


def test_reduce_log_sum_exp_is_stable() -> None:
    """Large inputs would overflow exp() without subtracting the maximum; infinities and an
    all -inf row give +inf and -inf, not NaN."""
    x = np.array([[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -999.5], [np.inf, 1.0, 2.0],
                  [-np.inf, -np.inf, -np.inf], [-np.inf, 3.0, 1.0]], np.float32)
    assert_matches_onnxruntime(reduce_model("ReduceLogSumExp", x, [1], 18), {"x": x})


def _nan_rows() -> np.ndarray:
    return np.array([[1.0, np.nan, 3.0, 2.0], [np.nan, 1.0, 5.0, np.nan], [3.0, 3.0, 1.0, 1.0],
                     [-np.inf, -np.inf, -np.inf, -np.inf], [2.0, 1.0, np.nan, np.nan]], np.float32)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_nan_like_onnxruntime(op: str) -> None:
    """A NaN wins only when it comes first (onnxruntime's scalar path: short rows, outer axes)."""
    x = _nan_rows()
    for axes in ([1], [0]):
        assert_matches_onnxruntime(reduce_model(op, x, axes, 18, keepdims=0), {"x": x})


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_nan_rule_on_long_rows(op: str) -> None:
    """Long contiguous rows follow the same first-element rule (onnxruntime's SIMD path does not
    follow any fixed order there, so the reference is the rule itself)."""
    x = rand(6, 40, seed=5)
    x[0, 0] = x[1, 17] = x[2, 39] = x[3, 5] = x[3, 0] = np.nan
    y = run_aot(reduce_model(op, x, [1], 18, keepdims=0), {"x": x})["y"]
    better = np.greater if op == "ReduceMax" else np.less
    expected = []
    for row in x:
        acc = row[0]
        for v in row[1:]:
            if better(v, acc):
                acc = v
        expected.append(acc)
    np.testing.assert_array_equal(y, np.array(expected, np.float32))


ARG_CASES = {
    "default": {},
    "axis1": {"axis": 1},
    "negative_axis": {"axis": -1},
    "no_keepdims": {"axis": 1, "keepdims": 0},
    "last_index": {"axis": 2, "select_last_index": 1},
    "last_index_no_keepdims": {"axis": 0, "select_last_index": 1, "keepdims": 0},
}


@pytest.mark.parametrize("case", sorted(ARG_CASES))
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce(op: str, case: str) -> None:
    # Rounded values make ties, where select_last_index matters.
    x = np.round(rand(3, 4, 5) * 2).astype(np.float32)
    model = make_model([helper.make_node(op, ["x"], ["y"], **ARG_CASES[case])], {"x": x}, ["y"], opset=13)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_opset11_and_integers(op: str) -> None:
    x = np.random.default_rng(2).integers(-5, 5, size=(4, 6)).astype(np.int32)
    model = make_model([helper.make_node(op, ["x"], ["y"], axis=1)], {"x": x}, ["y"], opset=11)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reduce_nan_like_onnxruntime(op: str, last: int) -> None:
    x = _nan_rows()
    for axis in (0, 1):
        model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis, select_last_index=last)],
                           {"x": x}, ["y"], opset=13)
        assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("opset,attrs", [
    (11, {}), (11, {"axis": 0}), (11, {"axis": 2}), (13, {}), (13, {"axis": 1}), (13, {"axis": 0}),
], ids=str)
def test_hardmax(opset: int, attrs: dict[str, int]) -> None:
    x = np.round(rand(2, 3, 4) * 2).astype(np.float32)  # ties: the first maximum gets the 1
    model = make_model([helper.make_node("Hardmax", ["x"], ["y"], **attrs)], {"x": x}, ["y"], opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


def test_hardmax_nan_like_onnxruntime() -> None:
    x = _nan_rows()
    model = make_model([helper.make_node("Hardmax", ["x"], ["y"], axis=1)], {"x": x}, ["y"], opset=13)
    assert_matches_onnxruntime(model, {"x": x})


TOPK_CASES = {
    "largest_last_axis": ((3, 7), 3, {}),
    "smallest": ((3, 7), 4, {"largest": 0}),
    "axis0": ((6, 4), 2, {"axis": 0}),
    "negative_axis_3d": ((2, 5, 3), 2, {"axis": -2}),
    "k_equals_length": ((2, 5), 5, {}),
    "k1": ((4, 9), 1, {"largest": 0}),
}


@pytest.mark.parametrize("case", sorted(TOPK_CASES))
def test_topk(case: str) -> None:
    shape, k, attrs = TOPK_CASES[case]
    # Opset 10 takes k as an input but has no `largest` and no negative axes other than -1.
    opset = 10 if attrs.get("largest", 1) == 1 and attrs.get("axis", -1) >= -1 else 11
    x = rand(*shape)
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], **attrs)], {"x": x}, ["v", "i"],
                       {"k": np.array([k], np.int64)}, opset=opset)
    assert_matches_onnxruntime(model, {"x": x})


def test_topk_opset1_attribute_and_ties() -> None:
    """Equal values come out lowest index first, for both largest and smallest."""
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 0, 0, 0]], np.float32)
    model = make_model([helper.make_node("TopK", ["x"], ["v", "i"], k=4)], {"x": x}, ["v", "i"], opset=9)
    assert_matches_onnxruntime(model, {"x": x})
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=0)], {"x": x}, ["v", "i"],
                       {"k": np.array([5], np.int64)}, opset=11)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_topk_integers(dtype: type) -> None:
    x = np.random.default_rng(3).integers(-4, 4, size=(3, 8)).astype(dtype)
    for largest in (0, 1):
        model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=largest)], {"x": x},
                           ["v", "i"], {"k": np.array([3], np.int64)}, opset=11)
        assert_matches_onnxruntime(model, {"x": x})


def test_topk_unsorted_holds_the_same_elements() -> None:
    """sorted=0 lets the order be anything; aot returns it sorted, onnxruntime may not."""
    x = rand(4, 10, seed=6)
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0)], {"x": x}, ["v", "i"],
                       {"k": np.array([4], np.int64)}, opset=11)
    ours, ref = run_aot(model, {"x": x}), run_onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(np.sort(ours["i"], axis=1), np.sort(ref["i"], axis=1))
    np.testing.assert_array_equal(np.take_along_axis(x, ours["i"], axis=1), ours["v"])


def test_topk_only_indices_output() -> None:
    x = rand(3, 6)
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"])], {"x": x}, ["i"],
                       {"k": np.array([2], np.int64)}, opset=11)
    assert_matches_onnxruntime(model, {"x": x})


def test_topk_nan_is_largest() -> None:
    x = np.array([[1.0, np.nan, 3.0, 2.0, np.nan]], np.float32)
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"])], {"x": x}, ["v", "i"],
                       {"k": np.array([3], np.int64)}, opset=11)
    ours = run_aot(model, {"x": x})
    np.testing.assert_array_equal(ours["i"], [[1, 4, 2]])
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=0)], {"x": x}, ["v", "i"],
                       {"k": np.array([4], np.int64)}, opset=11)
    np.testing.assert_array_equal(run_aot(model, {"x": x})["i"], [[0, 3, 2, 1]])


def test_topk_runtime_k_is_refused() -> None:
    x = rand(2, 5)
    model = make_model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top")],
                       {"x": x, "k": np.array([2], np.int64)}, ["v", "i"], opset=11)
    for out in model.graph.output:  # a declared static shape gets it past shape inference
        dims = out.type.tensor_type.shape.dim
        del dims[:]
        for d in (2, 2):
            dims.add().dim_value = d
    with pytest.raises(AotError, match=r"node 'top' \(TopK\).*K.*compile-time constant"):
        compile_model(model)


CUMSUM_CASES = {
    "1d": ((7,), 0, {}),
    "axis1": ((3, 5), 1, {}),
    "negative_axis": ((2, 3, 4), -2, {}),
    "exclusive": ((3, 5), 1, {"exclusive": 1}),
    "reverse": ((3, 5), 0, {"reverse": 1}),
    "exclusive_reverse": ((2, 6), 1, {"exclusive": 1, "reverse": 1}),
}


@pytest.mark.parametrize("axis_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("case", sorted(CUMSUM_CASES))
def test_cumsum(case: str, axis_dtype: type) -> None:
    shape, axis, attrs = CUMSUM_CASES[case]
    x = rand(*shape)
    model = make_model([helper.make_node("CumSum", ["x", "axis"], ["y"], **attrs)], {"x": x}, ["y"],
                       {"axis": np.array(axis, axis_dtype)}, opset=14)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_cumsum_integers(dtype: type) -> None:
    x = np.arange(12, dtype=dtype).reshape(3, 4) - 5
    model = make_model([helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=1)], {"x": x}, ["y"],
                       {"axis": np.array(1, np.int64)}, opset=11)
    assert_matches_onnxruntime(model, {"x": x})


def test_runtime_axes_are_refused_with_the_node_name() -> None:
    x = rand(3, 4)
    model = make_model([helper.make_node("ReduceMean", ["x", "axes"], ["y"], name="mean", keepdims=1)],
                       {"x": x, "axes": np.array([1], np.int64)}, ["y"], opset=18)
    dims = model.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    for d in (3, 1):
        dims.add().dim_value = d
    with pytest.raises(AotError, match=r"node 'mean' \(ReduceMean\): input 1 \(axes.*compile-time constant"):
        compile_model(model)


def _same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, what
    if a.dtype.kind == "f":
        nan = np.isnan(b)
        assert np.array_equal(np.isnan(a), nan), f"{what}: NaN positions differ"
        assert np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)), f"{what}: values differ"
    else:
        assert np.array_equal(a, b), what


def test_llvm_and_c_agree_bit_for_bit_on_special_values() -> None:
    """NaN, infinities and signed zeros through every reduction kind: the LLVM object computes
    exactly what the C backend's code computes."""
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e38, 2.5, 1e30, -7.0], np.float32)
    x = np.stack([np.roll(specials, k) for k in range(6)])
    k = {"k": np.array([4], np.int64)}
    cases = [
        *[([helper.make_node(op, ["x"], ["y"], axes=[1])], {}, 11)
          for op in ("ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceSum", "ReduceMean", "ReduceL2",
                     "ReduceProd")],
        ([helper.make_node("ReduceMax", ["x"], ["y"], axes=[0])], {}, 11),
        ([helper.make_node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1)], {}, 13),
        ([helper.make_node("Hardmax", ["x"], ["y"], axis=1)], {}, 13),
        ([helper.make_node("TopK", ["x", "k"], ["y", "i"], largest=0)], k, 11),
        ([helper.make_node("CumSum", ["x", "a"], ["y"], reverse=1)], {"a": np.array(1, np.int64)}, 14),
    ]
    for nodes, inits, opset in cases:
        model = make_model(nodes, {"x": x}, list(nodes[0].output), inits, opset=opset)
        llvm = run_aot(model, {"x": x}, backend="llvm", target=BIT_EXACT_TARGET)
        c = run_aot(model, {"x": x}, backend="c", target=BIT_EXACT_TARGET)
        for name in c:
            _same_bits(llvm[name], c[name], f"{nodes[0].op_type} {name}")
