"""--input-value NAME=FILE.npy | NAME=1,2,3 | NAME=16000: graph inputs bound at compile time, so the
shapes they decide are static; the package loses those inputs and records them in its manifest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import aot
from aot.errors import InputValueError
from tests.helpers import rand, run_onnxruntime
from tests.test_cli import aot as run_aot_cli
from tests.test_cli import assert_user_error


def _save(path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
          outputs: list[onnx.ValueInfoProto]) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def resize_model(folder: Path) -> Path:
    """Resize whose scales are a graph input: its output shape is unknown until they are given."""
    return _save(folder / "resize.onnx", [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4]),
                  helper.make_tensor_value_info("scales", TensorProto.FLOAT, [4])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])])


def topk_model(folder: Path) -> Path:
    return _save(folder / "topk.onnx", [helper.make_node("TopK", ["x", "k"], ["values", "indices"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7]),
                  helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                 [helper.make_tensor_value_info("values", TensorProto.FLOAT, ["r", "k"]),
                  helper.make_tensor_value_info("indices", TensorProto.INT64, ["r", "k"])])


def scale_model(folder: Path) -> Path:
    """A scalar float input (a sample rate) and a scalar int64 CumSum axis."""
    nodes = [helper.make_node("Mul", ["x", "rate"], ["scaled"]), helper.make_node("CumSum", ["scaled", "axis"], ["y"])]
    return _save(folder / "scale.onnx", nodes,
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
                  helper.make_tensor_value_info("rate", TensorProto.FLOAT, []),
                  helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])


def _manifest(package: Path) -> dict:
    return json.loads((package / "manifest.json").read_text())


def test_resize_scales_bound_verifies_against_onnxruntime(tmp_path: Path) -> None:
    model = resize_model(tmp_path)
    result = run_aot_cli("verify", str(model), "--input-value", "scales=1,1,2,1.5")
    assert result.returncode == 0, result.stderr
    assert "PASSED" in result.stdout
    per_layer = run_aot_cli("verify", str(model), "--input-value", "scales=1,1,2,1.5", "--per-layer")
    assert per_layer.returncode == 0, per_layer.stderr
    out = tmp_path / "pkg"
    compiled = run_aot_cli("compile", str(model), "--input-value", "scales=1,1,2,1.5", "-o", str(out))
    assert compiled.returncode == 0, compiled.stderr
    manifest = _manifest(out)
    assert [i["name"] for i in manifest["inputs"]] == ["x"]
    assert manifest["outputs"][0]["shape"] == [1, 2, 6, 6]
    assert manifest["input_values"] == [{"name": "scales", "dtype": "float32", "shape": [4],
                                         "values": [1.0, 1.0, 2.0, 1.5]}]
    header = (out / f"{manifest['name']}.h").read_text()
    assert "scales" not in header  # the C API's inputs struct has no field for a bound input


def test_topk_k_from_npy_file(tmp_path: Path) -> None:
    model = topk_model(tmp_path)
    np.save(tmp_path / "k.npy", np.array([3], dtype=np.int32))  # int32 values fit the int64 input exactly
    result = run_aot_cli("verify", str(model), "--input-value", f"k={tmp_path / 'k.npy'}")
    assert result.returncode == 0, result.stderr
    assert "PASSED" in result.stdout
    x = rand(3, 7)
    package = aot.compile(str(model), input_values={"k": np.array([3])})
    ours = package.run({"x": x})
    want = run_onnxruntime(onnx.load(str(model)), {"x": x, "k": np.array([3], dtype=np.int64)})
    np.testing.assert_array_equal(ours["values"], want["values"])
    np.testing.assert_array_equal(ours["indices"], want["indices"])
    assert package.manifest["input_values"] == [{"name": "k", "dtype": "int64", "shape": [1], "values": [3]}]


def test_scalar_inputs(tmp_path: Path) -> None:
    model = scale_model(tmp_path)
    result = run_aot_cli("verify", str(model), "--input-value", "rate=16000", "--input-value", "axis=1")
    assert result.returncode == 0, result.stderr
    package = aot.compile(str(model), input_values={"rate": "16000", "axis": 1})
    assert [i["name"] for i in package.inputs] == ["x"]
    x = rand(2, 5)
    np.testing.assert_allclose(package.run({"x": x})["y"], np.cumsum(x * 16000, axis=1), rtol=1e-5)
    assert {e["name"]: e["shape"] for e in package.manifest["input_values"]} == {"rate": [], "axis": []}


def test_large_values_are_recorded_by_sha256(tmp_path: Path) -> None:
    model = _save(tmp_path / "add.onnx", [helper.make_node("Add", ["x", "b"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [100]),
                   helper.make_tensor_value_info("b", TensorProto.FLOAT, [100])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [100])])
    b = rand(100, seed=1)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "pkg"
    result = run_aot_cli("compile", str(model), "--input-value", f"b={tmp_path / 'b.npy'}", "-o", str(out))
    assert result.returncode == 0, result.stderr
    import hashlib

    entry = _manifest(out)["input_values"][0]
    assert entry == {"name": "b", "dtype": "float32", "shape": [100], "sha256": hashlib.sha256(b.tobytes()).hexdigest()}


def test_unbound_shape_deciding_input_names_the_option(tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    assert_user_error(run_aot_cli("compile", str(topk_model(tmp_path)), "-o", str(out)),
                      "TopK", "graph input 'k'", "--input-value k=")
    assert_user_error(run_aot_cli("compile", str(resize_model(tmp_path)), "-o", str(out)),
                      "graph input 'scales'", "--input-value scales=")
    # Output shapes declared in the model: the import passes, and the lowering needs k's value.
    declared = _save(tmp_path / "topk_declared.onnx", [helper.make_node("TopK", ["x", "k"], ["values", "indices"])],
                     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7]),
                      helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                     [helper.make_tensor_value_info("values", TensorProto.FLOAT, [3, 2]),
                      helper.make_tensor_value_info("indices", TensorProto.INT64, [3, 2])])
    assert_user_error(run_aot_cli("compile", str(declared), "-o", str(out)),
                      "compile-time constant", "graph input 'k'", "--input-value k=")
    assert not out.exists()


def _bad_npy_files(folder: Path) -> dict[str, Path]:
    junk = folder / "junk.npy"
    junk.write_bytes(b"not an array")
    objects = folder / "objects.npy"
    np.save(objects, np.array([1, "a"], dtype=object), allow_pickle=True)
    truncated = folder / "truncated.npy"
    np.save(truncated, np.array([2], dtype=np.int64))
    truncated.write_bytes(truncated.read_bytes()[:-3])
    huge_header = folder / "header.npy"
    huge_header.write_bytes(b"\x93NUMPY\x01\x00\xff\xff" + b" " * 65535)
    matrix = folder / "matrix.npy"
    np.save(matrix, np.array([[2]], dtype=np.int64))
    return {"junk": junk, "objects": objects, "truncated": truncated, "header": huge_header, "matrix": matrix}


BAD_VALUES = {
    "wrong count": ("k=2,3", "input 'k'"),
    "fraction for an int": ("k=2.5", "not an integer"),
    "overflow": ("k=99999999999999999999", "does not fit"),
    "unknown name": ("q=1", "no input 'q' (inputs: 'x', 'k')"),
    "malformed text": ("k=1,,2", "not a list of numbers"),
    "no value": ("k=", "no value"),
    "no name": ("=2", "expected NAME="),
    "no such file": ("k=missing.npy", "no such .npy file"),
}


@pytest.mark.parametrize("value,fragment", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_bad_value_is_one_error_line(tmp_path: Path, value: str, fragment: str) -> None:
    out = tmp_path / "pkg"
    result = run_aot_cli("compile", str(topk_model(tmp_path)), "--input-value", value, "-o", str(out))
    assert_user_error(result, "--input-value", fragment)
    assert not out.exists()


@pytest.mark.parametrize("kind", ["junk", "objects", "truncated", "header", "matrix"])
def test_bad_npy_is_one_error_line(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "pkg"
    path = _bad_npy_files(tmp_path)[kind]
    result = run_aot_cli("compile", str(topk_model(tmp_path)), "--input-value", f"k={path}", "-o", str(out))
    assert_user_error(result, "--input-value k", "input 'k'" if kind == "matrix" else str(path))
    assert not out.exists()


def test_float_overflow_and_bool_and_shape_conflict(tmp_path: Path) -> None:
    model = resize_model(tmp_path)
    out = tmp_path / "pkg"
    assert_user_error(run_aot_cli("compile", str(model), "--input-value", "scales=1,1,1e39,1", "-o", str(out)),
                      "--input-value scales", "overflows", "float32")
    assert_user_error(run_aot_cli("compile", str(model), "--input-value", "scales=1,1,2,2",
                                  "--input-shape", "scales=4", "-o", str(out)), "--input-value")
    assert_user_error(run_aot_cli("compile", str(model), "--input-value", "scales=1,1,2,2",
                                  "--input-value", "scales=1,1,2,2", "-o", str(out)), "given twice")
    assert not out.exists()
    with pytest.raises(InputValueError, match="does not fit input 'k'"):
        aot.compile(str(topk_model(tmp_path)), input_values={"k": np.array([2**40], dtype=np.int64).astype(np.float64)
                                                                  + 0.5})


def test_bound_input_on_inspect_report_and_build_commands(tmp_path: Path) -> None:
    model = topk_model(tmp_path)
    inspected = run_aot_cli("inspect", str(model), "--input-value", "k=2", "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert [i["name"] for i in json.loads(inspected.stdout)["inputs"]] == ["x"]
    report = tmp_path / "r.html"
    assert run_aot_cli("report", str(model), "--input-value", "k=2", "-o", str(report)).returncode == 0
    assert report.is_file()
    for command in ("compile", "verify", "build", "bench", "inspect", "report"):
        assert "--input-value" in run_aot_cli(command, "--help").stdout, command


def test_force_never_replaces_a_folder_holding_the_npy(tmp_path: Path) -> None:
    model = topk_model(tmp_path)
    out = tmp_path / "pkg"
    assert run_aot_cli("compile", str(model), "--input-value", "k=2", "-o", str(out)).returncode == 0
    np.save(out / "k.npy", np.array([2], dtype=np.int64))  # a package folder aot wrote, now holding the value
    result = run_aot_cli("compile", str(model), "--input-value", f"k={out / 'k.npy'}", "-o", str(out), "--force")
    assert_user_error(result, str(out))
    assert (out / "k.npy").is_file()


def test_same_package_whatever_the_order_of_the_options(tmp_path: Path) -> None:
    model = scale_model(tmp_path)
    one = aot.compile(str(model), input_values={"rate": "16000", "axis": "1"})
    other = aot.compile(str(model), input_values={"axis": "1", "rate": "16000"})
    assert one.files == other.files
