"""Hostile sizes and semantics, through the command line: shapes whose element count overflows
int64, constant subgraphs that would allocate gigabytes when folded or shape-inferred, stale
stored shapes, constant indices and pads that onnxruntime rejects. Each bad model gets one line
naming the node or tensor, exit 2, no package, and a compile that stays under 1 GB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from aot.compiler import load
from aot.frontend import shape_folding
from aot.frontend.shape_folding import FOLD_MAX_ELEMENTS
from tests.test_cli import REPO, aot, assert_user_error

F, I64 = TensorProto.FLOAT, TensorProto.INT64
PEAK_LIMIT_MB = 1024
TOO_MANY = 2**31 + 8  # elements: one past the 2^31-1 the generated code indexes


def aot_peak(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """`aot ARGS` and the peak resident memory of that one process, in MB (os.wait4 gives the
    child's own rusage, not the maximum over every child this test process ever ran)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "aot", *args], stdout=out, stderr=err, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    return result, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def save(path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
         outputs: list[onnx.ValueInfoProto], initializers: dict[str, np.ndarray] | None = None,
         value_info: list[onnx.ValueInfoProto] | None = None, opset: int = 17) -> Path:
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits, value_info=value_info or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def compile_fails(tmp_path: Path, model: Path, *fragments: str) -> None:
    out = tmp_path / "pkg"
    result, peak = aot_peak("compile", str(model), "-o", str(out))
    assert_user_error(result, *fragments)
    assert not out.exists()
    assert peak < PEAK_LIMIT_MB, f"peak {peak:.0f} MB"


def vec(name: str, dims: list[int | str], elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def out(rank: int) -> onnx.ValueInfoProto:
    """Output 'y' of `rank` dimensions left for inference to size."""
    return vec("y", [f"d{i}" for i in range(rank)])


def test_element_count_that_wraps_int64_is_refused(tmp_path: Path) -> None:
    """2^31 x 2^31 x 8 is 2^65 elements: 0 in int64, which compiled to an empty package."""
    dims = [2**31, 2**31, 8]
    model = save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                 [vec("x", dims)], [vec("y", dims)])
    compile_fails(tmp_path, model, "input 'x'", "36893488147419103232 elements", "2147483647")


def test_input_shape_option_that_wraps_int64_is_refused(tmp_path: Path) -> None:
    model = save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                 [vec("x", ["a", "b", "c"])], [vec("y", ["a", "b", "c"])])
    out = tmp_path / "pkg"
    result, peak = aot_peak("compile", str(model), "-o", str(out), "--input-shape", "x=2147483648x2147483648x8")
    assert_user_error(result, "input 'x'", "36893488147419103232 elements")
    assert not out.exists()
    assert peak < PEAK_LIMIT_MB, f"peak {peak:.0f} MB"


def _generator(op: str) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """A node `op` named 'gen' making a constant of TOO_MANY elements from tiny constants."""
    one = np.ones(1, np.float32)
    count = np.array([TOO_MANY], np.int64)
    inputs = {
        "ConstantOfShape": ({"count": count}, ["count"]),
        "Expand": ({"one": one, "count": count}, ["one", "count"]),
        "Tile": ({"one": one, "count": count}, ["one", "count"]),
        "Range": ({"start": np.array(0, np.float32), "limit": np.array(TOO_MANY, np.float32),
                   "delta": np.array(1, np.float32)}, ["start", "limit", "delta"]),
    }[op]
    return [helper.make_node(op, inputs[1], ["big"], name="gen")], inputs[0]


@pytest.mark.parametrize("op", ["ConstantOfShape", "Expand", "Tile", "Range"])
def test_huge_constant_is_refused_before_it_is_allocated(tmp_path: Path, op: str) -> None:
    """Folding evaluated these with numpy (an 8 GiB allocation) or onnx's data propagation ran
    out of memory; the inferred size is checked first."""
    nodes, inits = _generator(op)
    nodes.append(helper.make_node("Add", ["x", "big"], ["y"], name="add"))
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [1])], [vec("y", ["n"])], inits)
    compile_fails(tmp_path, model, f"node 'gen' ({op})", "output 'big'", "2147483647")


def test_huge_shape_computed_from_shapes_is_refused(tmp_path: Path) -> None:
    """Shape(x) * 1e9 -> ConstantOfShape -> Cast: the size exists only once Shape is folded, and
    onnx's data propagation, asked to find it, held a protobuf entry per element."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Mul", ["s", "k"], ["n"]),
             helper.make_node("ConstantOfShape", ["n"], ["c"], name="fill"),
             helper.make_node("Cast", ["c"], ["c32"], to=F), helper.make_node("Add", ["c32", "x1"], ["y"])]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [3])], [vec("y", ["n"])],
                 {"k": np.array([10**9], np.int64), "x1": np.ones(1, np.float32)})
    compile_fails(tmp_path, model, "node 'fill' (ConstantOfShape)", "3000000000 elements")


def test_resize_to_a_huge_axis_is_refused(tmp_path: Path) -> None:
    """Resize's per-axis tables are computed at compile time: an output axis of 2^30 asked numpy
    for 8 GiB (an internal MemoryError)."""
    nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", name="up")]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [1, 1, 1, 4])], [vec("y", [1, 1, 1, 2**30])],
                 {"sizes": np.array([1, 1, 1, 2**30], np.int64)}, opset=13)
    compile_fails(tmp_path, model, "node 'up' (Resize)", "axis 3", "1073741824 output positions")


def test_long_1d_tensors_compile_in_little_memory(tmp_path: Path) -> None:
    """A 1-D input of 16M floats through Add and Cast: onnx's data propagation took ~140 bytes an
    element of such tensors (3.6 GB and 20 s here, measured; now 79 MB and 2 s)."""
    n = 16 * 2**20
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Cast", ["a"], ["y"], to=F)]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [n])], [vec("y", [n])])
    result, peak = aot_peak("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0, result.stderr
    assert peak < PEAK_LIMIT_MB, f"peak {peak:.0f} MB"


def test_constant_above_the_folding_budget_is_computed_at_run_time(tmp_path: Path) -> None:
    """Expand of a scalar to twice the folding budget: within the size limit, so it compiles, to
    a loop rather than to 128 MB of weights, and runs like onnxruntime."""
    nodes = [helper.make_node("Expand", ["one", "count"], ["big"], name="expand"),
             helper.make_node("Add", ["x", "big"], ["y"])]
    count = 2 * FOLD_MAX_ELEMENTS
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [1])], [vec("y", [count])],
                 {"one": np.full(1, 0.5, np.float32), "count": np.array([count], np.int64)})
    result, peak = aot_peak("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0, result.stderr
    assert peak < PEAK_LIMIT_MB, f"peak {peak:.0f} MB"
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["weights_bytes"] < 1024
    assert aot("verify", str(model)).returncode == 0


def test_folding_budget_keeps_growth_and_folds_what_the_file_holds(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    """With a budget of 16 elements: an Expand growing a constant past it stays a node, a
    Transpose of a 30-element weight folds (no larger than what the file already holds)."""
    monkeypatch.setattr(shape_folding, "FOLD_MAX_ELEMENTS", 16)
    monkeypatch.setattr(shape_folding, "FOLD_MAX_BYTES", 64)
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Expand", ["one", "count"], ["big"]),
             helper.make_node("MatMul", ["x", "wt"], ["m"]), helper.make_node("Add", ["m", "big"], ["y"])]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [1, 5])], [vec("y", [20, 6])],
                 {"w": np.ones((6, 5), np.float32), "one": np.ones((1, 1), np.float32),
                  "count": np.array([20, 6], np.int64)})
    graph, _ = load(str(model))
    assert sorted(n.op_type for n in graph.nodes) == ["Add", "Expand", "MatMul"]


def test_weights_fold_beyond_the_budget(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With a budget of 16 elements: a 30-element ConstantOfShape read only as a MatMul weight
    folds (the kernel repacks it at compile time, nothing is filled per run), the same fill read
    by an Add as well stays a run-time node; the package still matches onnxruntime."""
    monkeypatch.setattr(shape_folding, "FOLD_MAX_ELEMENTS", 16)
    monkeypatch.setattr(shape_folding, "FOLD_MAX_BYTES", 64)
    half = numpy_helper.from_array(np.array([0.5], np.float32))
    nodes = [helper.make_node("ConstantOfShape", ["wshape"], ["w"], name="weight", value=half),
             helper.make_node("ConstantOfShape", ["wshape"], ["v"], name="shared", value=half),
             helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("MatMul", ["x", "v"], ["n"]),
             helper.make_node("Add", ["m", "n"], ["s"]), helper.make_node("Concat", ["s", "v"], ["y"], axis=0)]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [1, 5])], [vec("y", [6, 6])],
                 {"wshape": np.array([5, 6], np.int64)})
    graph, _ = load(str(model))
    assert sorted(n.op_type for n in graph.nodes) == ["Add", "Concat", "ConstantOfShape", "MatMul", "MatMul"]
    verified = aot("verify", str(model))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_stale_intermediate_value_info_is_recomputed(tmp_path: Path) -> None:
    """Paddle exports store -1 for a dynamic dimension of intermediate (and output) tensors; onnx
    stopped at 'Inferred shape and existing shape differ', onnxruntime runs the model."""
    nodes = [helper.make_node("Identity", ["x"], ["h"], name="id"), helper.make_node("Relu", ["h"], ["y"])]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [2, 3])], [vec("y", [-1, 3])],
                 value_info=[vec("h", [-1, 3])])
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0, result.stderr
    verified = aot("verify", str(model))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "PASSED" in verified.stdout


def test_stored_shape_stands_where_inference_cannot_size_a_tensor(tmp_path: Path) -> None:
    """A Reshape to a shape fed at run time: only the stored value_info sizes its output, and it
    is taken back (it agrees with the rank onnx infers)."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [12]), vec("s", [2], I64)], [vec("y", [3, 4])],
                 value_info=[vec("r", [3, 4])])
    np.savez(tmp_path / "in.npz", x=np.arange(-6, 6, dtype=np.float32), s=np.array([3, 4], np.int64))
    result = aot("verify", str(model), "--inputs", str(tmp_path / "in.npz"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_declared_output_shape_is_still_checked(tmp_path: Path) -> None:
    """Only intermediate shapes are dropped: a declared output that contradicts the graph still
    fails, naming the node."""
    model = save(tmp_path / "m.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                 [vec("x", [2, 3])], [vec("y", [4, 3])])
    compile_fails(tmp_path, model, "relu")


@pytest.mark.parametrize("op,indices,axis", [
    ("Gather", [0, 4], 1), ("Gather", [-5], 1), ("GatherElements", [[0, 1, 2, 3], [0, 1, 2, 4]], 1),
], ids=["gather_past_end", "gather_before_start", "gather_elements"])
def test_constant_index_out_of_range_is_refused(tmp_path: Path, op: str, indices: list, axis: int) -> None:
    nodes = [helper.make_node(op, ["x", "i"], ["y"], axis=axis, name="pick")]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [2, 4])], [out(2)], {"i": np.array(indices, np.int64)})
    compile_fails(tmp_path, model, f"node 'pick' ({op})", "outside [-4, 3]")


def test_constant_gather_nd_index_out_of_range_is_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("GatherND", ["x", "i"], ["y"], name="pick")]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [2, 4])], [out(1)], {"i": np.array([[1, 3], [2, 0]], np.int64)})
    compile_fails(tmp_path, model, "node 'pick' (GatherND)", "outside [-2, 1]")


@pytest.mark.parametrize("pads,length", [([0, 4, 0, 0], 4), ([0, 0, 0, 5], 4), ([1, 0, 0, 0], 1)],
                         ids=["before", "after", "single_element_axis"])
def test_reflect_pad_wider_than_the_axis_is_refused(tmp_path: Path, pads: list[int], length: int) -> None:
    nodes = [helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect", name="mirror")]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", [length, 4] if length == 1 else [2, length])],
                 [out(2)], {"p": np.array(pads, np.int64)})
    compile_fails(tmp_path, model, "node 'mirror' (Pad)", "reflect")


@pytest.mark.parametrize("op,data,indices", [
    ("Gather", [3, 1], [4]), ("GatherElements", [3, 1], [3, 4]), ("GatherND", [1, 5], [4, 2]),
], ids=["gather", "gather_elements", "gather_nd"])
def test_gathers_on_a_one_element_axis_build_warning_free(tmp_path: Path, op: str, data: list[int],
                                                           indices: list[int]) -> None:
    """Run-time int64 indices into an axis of 1 (a 1-row embedding table): the position was
    declared and never read, an error under -Werror (`aot verify` builds with it)."""
    attrs = {"axis": 1} if op != "GatherND" else {}
    nodes = [helper.make_node(op, ["x", "i"], ["y"], **attrs)]
    model = save(tmp_path / "m.onnx", nodes, [vec("x", data), vec("i", indices, I64)],
                 [out(1 if op == "GatherND" else 2)])
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1, size=indices).astype(np.int64)
    if op == "GatherND":
        ids[:, 1] = rng.integers(-5, 5, size=indices[0])
    np.savez(tmp_path / "in.npz", x=rng.standard_normal(data).astype(np.float32), i=ids)
    result = aot("verify", str(model), "--inputs", str(tmp_path / "in.npz"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout


@pytest.mark.parametrize("op", ["Conv", "MaxPool"])
def test_stride_longer_than_its_axis_compiles_small_and_verifies(tmp_path: Path, op: str) -> None:
    """A stride of 2^30 on a 9-wide axis leaves one output along it: it compiles as that, in
    little memory (the strided copy once asked for 2^30 column phases), and matches onnxruntime."""
    attrs = {"kernel_shape": [3, 3], "strides": [1, 2**30], "pads": [1, 1, 1, 1]}
    inits = {"w": np.ones((4, 4, 3, 3), np.float32)} if op == "Conv" else {}
    node = helper.make_node(op, ["x", "w"] if op == "Conv" else ["x"], ["y"], name="strided", **attrs)
    channels = 4
    model = save(tmp_path / "m.onnx", [node], [helper.make_tensor_value_info("x", F, [1, channels, 9, 9])],
                 [helper.make_tensor_value_info("y", F, [1, channels, 9, 1])], inits)
    result, peak = aot_peak("verify", str(model))
    assert result.returncode == 0, result.stderr
    assert peak < PEAK_LIMIT_MB, f"peak {peak:.0f} MB"


def test_stride_beyond_the_index_range_is_refused(tmp_path: Path) -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="strided", kernel_shape=[3, 3], strides=[1, 2**32])
    model = save(tmp_path / "m.onnx", [node], [helper.make_tensor_value_info("x", F, [1, 4, 9, 9])],
                 [helper.make_tensor_value_info("y", F, [1, 4, 7, 1])], {"w": np.ones((4, 4, 3, 3), np.float32)})
    compile_fails(tmp_path, model, "'strided'", "strides")


@pytest.mark.parametrize("width", [2**31 - 1, 2**32])
def test_pool_window_wider_than_its_input_is_refused(tmp_path: Path, width: int) -> None:
    """onnx cannot size such a window and keeps the declared output shape; the loops then read
    far outside the input (2^31-1 segfaulted, 2^32 gave C that -Werror rejects)."""
    node = helper.make_node("AveragePool", ["x"], ["y"], name="avg", kernel_shape=[3, width], pads=[1, 1, 1, 1])
    model = save(tmp_path / "m.onnx", [node], [helper.make_tensor_value_info("x", F, [1, 2, 8, 8])],
                 [helper.make_tensor_value_info("y", F, [1, 2, 8, 8])])
    compile_fails(tmp_path, model, "'avg'", "kernel_shape" if width >= 2**31 else "differs")
