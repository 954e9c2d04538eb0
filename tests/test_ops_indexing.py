"""Indexing ops (aot/ops/indexing.py) against onnxruntime: Gather, GatherElements, GatherND,
Slice, Split and Trilu over their attribute and opset variants; out-of-range run-time indices
are clamped (ONNX leaves them undefined) and never read outside a tensor, under sanitizers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from aot.compiler import compile as compile_model
from aot.errors import AotError
from aot.host.build import STRICT_CFLAGS
from tests.helpers import assert_matches_onnxruntime, make_model, rand, run_aot


def node(op: str, inputs: list[str], outputs: list[str] | None = None, **attrs: object):
    return helper.make_node(op, inputs, outputs or ["y"], **attrs)


def check(nodes, inputs: dict[str, np.ndarray], inits: dict[str, np.ndarray] | None = None, opset: int = 17,
          outputs: list[str] | None = None) -> None:
    model = make_model(nodes, inputs, outputs or ["y"], inits, opset=opset)
    assert_matches_onnxruntime(model, inputs)


# ---------------------------------------------------------------------------------------------
# Gather family

GATHER_CASES = {
    "axis0": ((5, 4), 0, [[0, 4], [2, 2], [1, 3]]),
    "axis1": ((3, 6, 2), 1, [5, 0, 3, 3]),
    "negative_indices": ((4, 5), 1, [[-1, -5], [2, -2]]),
    "negative_axis": ((2, 3, 4), -1, [1, -1, 0]),
    "scalar_index": ((4, 3), 0, 2),
    "scalar_negative_index": ((4, 3), 1, -1),
}


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("case", sorted(GATHER_CASES))
def test_gather(case: str, index_dtype: type) -> None:
    shape, axis, indices = GATHER_CASES[case]
    x = rand(*shape)
    idx = np.array(indices, index_dtype)
    check([node("Gather", ["x", "i"], axis=axis)], {"x": x, "i": idx}, opset=13)


def test_gather_constant_indices_and_integer_data_opset11() -> None:
    table = np.arange(24, dtype=np.int64).reshape(6, 4)
    check([node("Gather", ["t", "i"], axis=0)], {"t": table}, {"i": np.array([[5, 0], [-1, 2]], np.int64)},
          opset=11)


def test_gather_bool_data() -> None:
    x = rand(3, 4) > 0
    check([node("Gather", ["x", "i"], axis=1)], {"x": x, "i": np.array([3, 1], np.int64)})


GATHER_ELEMENTS_CASES = {
    "axis0": ((3, 4), (2, 4), 0),
    "axis1": ((3, 4), (3, 6), 1),
    "smaller_other_dims": ((4, 5, 3), (2, 3, 3), 1),
    "negative_axis": ((2, 3, 4), (2, 3, 2), -1),
}


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("case", sorted(GATHER_ELEMENTS_CASES))
def test_gather_elements(case: str, opset: int) -> None:
    data_shape, idx_shape, axis = GATHER_ELEMENTS_CASES[case]
    x = rand(*data_shape)
    dim = data_shape[axis]
    # Values in [-dim, dim): negative ones count from the end.
    idx = np.random.default_rng(1).integers(-dim, dim, size=idx_shape).astype(np.int64)
    check([node("GatherElements", ["x", "i"], axis=axis)], {"x": x, "i": idx}, opset=opset)


GATHER_ND_CASES = {
    "full_index": ((2, 3), [[0, 1], [1, 2], [-1, -3]], 0),
    "slices": ((3, 4, 2), [[1], [-1], [0]], 0),
    "nested": ((2, 3, 4), [[[0, 1]], [[1, 2]]], 0),
    "batch1": ((2, 3, 4), [[[1], [2]], [[0], [-1]]], 1),
    "batch1_full": ((2, 3, 4), [[1, 3], [2, 0]], 1),
    "batch2": ((2, 2, 3, 2), [[[1], [2]], [[0], [1]]], 2),
}


@pytest.mark.parametrize("case", sorted(GATHER_ND_CASES))
def test_gather_nd(case: str) -> None:
    shape, indices, batch_dims = GATHER_ND_CASES[case]
    x = rand(*shape)
    idx = np.array(indices, np.int64)
    check([node("GatherND", ["x", "i"], batch_dims=batch_dims)], {"x": x, "i": idx}, opset=13)


def test_gather_nd_opset11() -> None:
    x = rand(3, 4)
    check([node("GatherND", ["x", "i"])], {"x": x, "i": np.array([[2, 3], [0, 0]], np.int64)}, opset=11)


def _out_of_range_models() -> list[tuple[str, object, dict[str, np.ndarray], np.ndarray]]:
    """Each op with indices past both ends, and what clamping into the axis gives."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    gather_idx = np.array([-9, -4, 3, 4, 100], np.int64)
    gather_elements_idx = np.array([[7, -8, 0, 2]], np.int64)
    gather_nd_idx = np.array([[5, -1], [-6, 9]], np.int64)
    return [
        ("Gather", make_model([node("Gather", ["x", "i"], axis=1)], {"x": x, "i": gather_idx}, ["y"]),
         {"x": x, "i": gather_idx}, x[:, [0, 0, 3, 3, 3]]),
        ("GatherElements", make_model([node("GatherElements", ["x", "i"], axis=0)],
                                      {"x": x, "i": gather_elements_idx}, ["y"]),
         {"x": x, "i": gather_elements_idx}, np.array([[x[2, 0], x[0, 1], x[0, 2], x[2, 3]]])),
        ("GatherND", make_model([node("GatherND", ["x", "i"])], {"x": x, "i": gather_nd_idx}, ["y"]),
         {"x": x, "i": gather_nd_idx}, np.array([x[2, 3], x[0, 3]])),
    ]


def test_out_of_range_indices_are_clamped() -> None:
    for op, model, feeds, expected in _out_of_range_models():
        np.testing.assert_array_equal(run_aot(model, feeds)["y"], expected, err_msg=op)


def test_out_of_range_indices_run_clean_under_sanitizers(tmp_path: Path) -> None:
    """The package runner, built with AddressSanitizer and UBSan, reads nothing out of bounds."""
    flags = f"-O1 -g {STRICT_CFLAGS} -fsanitize=address,undefined -fno-sanitize-recover=all"
    for op, model, feeds, expected in _out_of_range_models():
        pkg = compile_model(model, name="clamp").write(tmp_path / op)
        subprocess.run(["make", "-s", "-C", str(pkg), f"CFLAGS={flags}", "LDFLAGS=-fsanitize=address,undefined"],
                       check=True, capture_output=True)
        files = []
        for name, value in feeds.items():
            np.save(tmp_path / f"{op}_{name}.npy", value)
            files.append(str(tmp_path / f"{op}_{name}.npy"))
        out = tmp_path / f"{op}_out"
        out.mkdir()
        result = subprocess.run([str(pkg / "clamp_runner"), "-o", str(out), *files], capture_output=True, text=True)
        assert result.returncode == 0 and "runtime error" not in result.stderr, result.stderr
        np.testing.assert_array_equal(np.load(out / "output0.npy"), expected, err_msg=op)


# ---------------------------------------------------------------------------------------------
# Slice

SLICE_CASES = {
    "basic": ((5, 6), [1, 2], [4, 5], None, None),
    "axes_subset": ((4, 5, 6), [1], [3], [1], None),
    "negative_starts_ends": ((5, 6), [-4, -3], [-1, 100], None, None),
    "clamped": ((5, 6), [-100, 2], [100, 1000], [0, 1], None),
    "steps": ((7, 8), [0, 1], [7, 8], [0, 1], [2, 3]),
    "negative_step": ((7, 8), [6, -1], [0, -100], [0, 1], [-1, -2]),
    "negative_step_from_end": ((6,), [100], [-100], [0], [-2]),
    "negative_axes": ((3, 4, 5), [1, 0], [4, 2], [-1, -3], None),
    "empty": ((4, 5), [3], [1], [0], None),
    "whole": ((3, 4), [0], [100], [1], None),
}


@pytest.mark.parametrize("opset", [10, 13])
@pytest.mark.parametrize("case", sorted(SLICE_CASES))
def test_slice(case: str, opset: int) -> None:
    shape, starts, ends, axes, steps = SLICE_CASES[case]
    x = rand(*shape)
    inits = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64)}
    inputs = ["x", "s", "e"]
    if axes is not None or steps is not None:
        inits["a"] = np.array(axes if axes is not None else list(range(len(starts))), np.int64)
        inputs.append("a")
    if steps is not None:
        inits["t"] = np.array(steps, np.int64)
        inputs.append("t")
    check([node("Slice", inputs)], {"x": x}, inits, opset=opset)


# (onnx's shape inference for Slice-1 gives up on out-of-range starts, empty results and unsorted
# axes.)
@pytest.mark.parametrize("case", ["basic", "axes_subset", "negative_starts_ends", "whole"])
def test_slice_opset9_attributes(case: str) -> None:
    shape, starts, ends, axes, _ = SLICE_CASES[case]
    x = rand(*shape)
    attrs = {"starts": starts, "ends": ends} | ({"axes": axes} if axes is not None else {})
    check([node("Slice", ["x"], **attrs)], {"x": x}, opset=9)


def test_slice_int32_positions_and_integer_data() -> None:
    x = np.arange(30, dtype=np.int32).reshape(5, 6)
    check([node("Slice", ["x", "s", "e", "a", "t"])], {"x": x},
          {"s": np.array([4], np.int32), "e": np.array([0], np.int32), "a": np.array([1], np.int32),
           "t": np.array([-2], np.int32)}, opset=13)


def test_slice_of_the_whole_tensor_is_a_view() -> None:
    x = rand(3, 4)
    model = make_model([node("Slice", ["x", "s", "e"], ["s1"]), node("Relu", ["s1"])], {"x": x}, ["y"],
                       {"s": np.array([0], np.int64), "e": np.array([99], np.int64)})
    package = compile_model(model)
    assert package.manifest["kernels"] == 1  # only Relu: the slice shares the input's bytes
    assert_matches_onnxruntime(model, {"x": x})


def test_slice_runtime_starts_are_refused() -> None:
    x = rand(4, 5)
    model = make_model([node("Slice", ["x", "s", "e"], name="cut")],
                       {"x": x, "s": np.array([1], np.int64)}, ["y"], {"e": np.array([3], np.int64)})
    dims = model.graph.output[0].type.tensor_type.shape.dim
    del dims[:]
    for d in (2, 5):
        dims.add().dim_value = d
    with pytest.raises(AotError, match=r"node 'cut' \(Slice\): input 1 \(starts.*compile-time constant"):
        compile_model(model)


# ---------------------------------------------------------------------------------------------
# Split


SPLIT_CASES = {
    # name: (shape, axis, sizes or None (equal parts), number of outputs)
    "equal_axis0": ((6, 4), 0, None, 3),
    "equal_negative_axis": ((2, 3, 8), -1, None, 2),
    "sizes": ((7, 3), 0, [2, 4, 1], 3),
    "sizes_axis1_with_empty": ((2, 6), 1, [3, 0, 3], 3),
}


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_split(case: str, opset: int) -> None:
    shape, axis, sizes, count = SPLIT_CASES[case]
    x = rand(*shape)
    outputs = [f"y{i}" for i in range(count)]
    inputs, attrs, inits = ["x"], {"axis": axis}, {}
    if sizes is not None and opset >= 13:
        inits["split"] = np.array(sizes, np.int64)
        inputs.append("split")
    elif sizes is not None:
        attrs["split"] = sizes
    elif opset >= 18:
        attrs["num_outputs"] = count
    check([node("Split", inputs, outputs, **attrs)], {"x": x}, inits, opset=opset, outputs=outputs)


def test_split_num_outputs_uneven() -> None:
    """Opset 18: ceil-sized parts, the last one smaller."""
    x = rand(7, 2)
    outputs = ["a", "b", "c"]
    check([node("Split", ["x"], outputs, axis=0, num_outputs=3)], {"x": x}, opset=18, outputs=outputs)


def test_split_with_unread_outputs() -> None:
    """Outputs nobody reads are not computed; the parts still start where they should."""
    x = rand(9, 2)
    model = make_model([node("Split", ["x"], ["a", "b", "c"], axis=0), node("Neg", ["b"], ["y"])],
                       {"x": x}, ["y"], opset=13)
    assert_matches_onnxruntime(model, {"x": x})
    model = make_model([node("Split", ["x"], ["a", "b", "c"], axis=0, split=[2, 3, 4])],
                       {"x": x}, ["c"], opset=11)
    assert_matches_onnxruntime(model, {"x": x})


# ---------------------------------------------------------------------------------------------
# Trilu


TRILU_CASES = {
    "upper": ((4, 5), {}, None),
    "lower": ((4, 5), {"upper": 0}, None),
    "upper_k2": ((5, 4), {}, 2),
    "upper_k_negative": ((5, 4), {}, -1),
    "lower_k1": ((3, 4, 5), {"upper": 0}, 1),
    "lower_k_negative": ((2, 5, 3), {"upper": 0}, -2),
    "upper_k_beyond": ((3, 4), {}, 10),
    "lower_k_beyond": ((3, 4), {"upper": 0}, -10),
}


@pytest.mark.parametrize("case", sorted(TRILU_CASES))
def test_trilu(case: str) -> None:
    shape, attrs, k = TRILU_CASES[case]
    x = rand(*shape)
    if k is None:
        check([node("Trilu", ["x"], **attrs)], {"x": x}, opset=14)
    else:
        check([node("Trilu", ["x", "k"], **attrs)], {"x": x}, {"k": np.array(k, np.int64)}, opset=14)


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_runtime_k(upper: int) -> None:
    x = rand(4, 6)
    for k in (-2, 0, 3):
        check([node("Trilu", ["x", "k"], upper=upper)], {"x": x, "k": np.array(k, np.int64)}, opset=14)


def test_trilu_integer_data() -> None:
    x = np.arange(20, dtype=np.int64).reshape(4, 5)
    check([node("Trilu", ["x", "k"], upper=0)], {"x": x}, {"k": np.array(1, np.int64)}, opset=14)
