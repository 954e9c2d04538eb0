"""The command line as a user meets it: every bad input gets one clear line, a non-zero exit and
no output folder; good input gives a package, a verification and an inspection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import make_model, rand

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "tiny_cnn.onnx"


def aot(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "aot", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def assert_user_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got:\n{result.stderr}"
    assert lines[0].startswith("aot: error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def dynamic_model(path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def file_with(content: bytes):  # noqa: ANN201 - returns a maker for BAD_MODELS
    def make(d: Path) -> Path:
        (d / "m.onnx").write_bytes(content)
        return d / "m.onnx"

    return make


BAD_MODELS = {
    "missing": (lambda d: d / "nope.onnx", "no such file"),
    "directory": (lambda d: d, "is a directory"),
    "empty": (file_with(b""), "empty file"),
    "random_bytes": (file_with(np.random.default_rng(1).bytes(4096)), "not an ONNX model"),
    "text": (file_with(b"hello, I am not a model\n"), "not an ONNX model"),
    "truncated": (file_with(EXAMPLE.read_bytes()[:9000]), "not an ONNX model"),
}


@pytest.mark.parametrize("case", sorted(BAD_MODELS))
def test_bad_model_files(tmp_path: Path, case: str) -> None:
    make, message = BAD_MODELS[case]
    model = make(tmp_path)
    out = tmp_path / "pkg"
    result = aot("compile", str(model), "-o", str(out))
    assert_user_error(result, message)
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".pkg")], "staging folder left behind"


def _graph_file(tmp_path: Path, nodes: list, opset: int = 17, dims: list | None = None) -> Path:  # noqa: ANN001
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims or [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims or [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    return path


BAD_GRAPHS = {
    "dangling_input": (lambda: [helper.make_node("Relu", ["missing"], ["y"])], {}, "'missing'"),
    "cycle": (lambda: [helper.make_node("Relu", ["b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                       helper.make_node("Relu", ["x"], ["y"])], {}, "topologically sorted"),
    "duplicate_output_names": (lambda: [helper.make_node("Relu", ["x"], ["y"]),
                                        helper.make_node("Sigmoid", ["x"], ["y"])], {}, "static single assignment"),
    "unknown_opset": (lambda: [helper.make_node("Relu", ["x"], ["y"])], {"opset": 99}, "opset 99"),
    "too_many_elements": (lambda: [helper.make_node("Relu", ["x"], ["y"])], {"dims": [100000, 100000]},
                          "more than the supported"),
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_invalid_graphs(tmp_path: Path, case: str) -> None:
    make_nodes, options, message = BAD_GRAPHS[case]
    path = _graph_file(tmp_path, make_nodes(), **options)
    result = aot("compile", str(path), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, message.replace("static single", "single static"))
    assert not (tmp_path / "pkg").exists()


def test_protobuf_that_is_not_a_model(tmp_path: Path) -> None:
    path = tmp_path / "tensor.onnx"
    path.write_bytes(helper.make_tensor("t", TensorProto.FLOAT, [2], [1.0, 2.0]).SerializeToString())
    assert_user_error(aot("compile", str(path), "-o", str(tmp_path / "pkg")), "not an ONNX model")


def test_unsupported_ops_are_all_listed(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Einsum2", ["a"], ["b"], name="e1"),
             helper.make_node("Einsum2", ["b"], ["c"], name="e2"),
             helper.make_node("Frobnicate", ["c"], ["y"], name="frob")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())  # not checkable by onnx.checker: unknown ops
    result = aot("compile", str(path), "-o", str(tmp_path / "pkg"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert not (tmp_path / "pkg").exists()


def test_unsupported_ops_listed_with_node_names(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Det", ["a"], ["b"], name="det_1"),
             helper.make_node("Det", ["a"], ["c"], name="det_2"),
             helper.make_node("NonZero", ["x"], ["y"], name="nz")]
    model = make_model(nodes, {"x": rand(3, 3)}, ["b", "c", "y"])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = aot("compile", str(path), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "2 unsupported op types", "Det (2 nodes: 'det_1', 'det_2')", "NonZero (1 node: 'nz')")
    assert not (tmp_path / "pkg").exists()
    inspect = aot("inspect", str(path), "--json")
    assert inspect.returncode == 0, inspect.stderr
    report = json.loads(inspect.stdout)
    assert report["supported"] is False
    assert {u["op"]: u["nodes"] for u in report["unsupported"]} == {"Det": ["det_1", "det_2"], "NonZero": ["nz"]}


def test_dynamic_dimension_needs_input_shape(tmp_path: Path) -> None:
    model = dynamic_model(tmp_path / "dyn.onnx")
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "'x' dimension 0 (batch)", "--input-shape")
    assert not (tmp_path / "pkg").exists()
    ok = aot("compile", str(model), "-o", str(tmp_path / "pkg"), "--input-shape", "x=4x3")
    assert ok.returncode == 0, ok.stderr
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["inputs"][0]["shape"] == [4, 3]


@pytest.mark.parametrize("option,message", [
    ("y=1x3", "no input 'y'"),
    ("x=1x3x1", "has rank 2"),
    ("x=0x3", "must be positive"),
    ("x:1x3", "expected NAME="),
])
def test_bad_input_shape_options(tmp_path: Path, option: str, message: str) -> None:
    model = dynamic_model(tmp_path / "dyn.onnx")
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"), "--input-shape", option)
    assert_user_error(result, "--input-shape", message)
    assert not (tmp_path / "pkg").exists()


THREE_GIB_FLOATS = 3 * 2**30 // 4


def huge_intermediate_model(path: Path) -> Path:
    """A float input of `n` elements; Expand makes a 3 GiB intermediate 'wide' of a small input."""
    shape = numpy_helper.from_array(np.array([THREE_GIB_FLOATS], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["big_input_relu"]),
         helper.make_node("ReduceSum", ["big_input_relu"], ["s1"], keepdims=0),
         helper.make_node("Expand", ["y", "shape"], ["wide"]),
         helper.make_node("ReduceSum", ["wide"], ["s2"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("s1", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("s2", TensorProto.FLOAT, [])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("target,backend", [("rpi3", "c"), ("cortex-m4f", "c"), ("rpi3", "llvm")])
@pytest.mark.parametrize("n,tensor", [(4, "'wide'"), (THREE_GIB_FLOATS, "'x'")])
def test_tensor_beyond_a_32_bit_address_space(tmp_path: Path, target: str, backend: str, n: int,
                                              tensor: str) -> None:
    """A 3 GiB input or intermediate cannot exist on a 32-bit target: one line, exit 2, no package."""
    model = huge_intermediate_model(tmp_path / "huge.onnx")
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"), "--input-shape", f"x={n}",
                 "--target", target, "--backend", backend)
    assert_user_error(result, f"tensor {tensor}", "3221225472 bytes", f"target {target}", "32-bit")
    assert not (tmp_path / "pkg").exists()


def test_three_gib_intermediate_is_fine_on_a_64_bit_target(tmp_path: Path) -> None:
    model = huge_intermediate_model(tmp_path / "huge.onnx")
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"), "--input-shape", "x=4", "--target", "rpi4")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "pkg" / "manifest.json").read_text())["arena_bytes"] >= 3 * 2**30


def test_existing_output_folder_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = aot("compile", str(EXAMPLE), "-o", str(out))
    assert_user_error(result, "already exists", "--force")
    assert (out / "keep.txt").read_text() == "mine"
    # --force replaces only a folder aot wrote: this one is the user's.
    refused = aot("compile", str(EXAMPLE), "-o", str(out), "--force")
    assert_user_error(refused, "not a package aot wrote")
    assert (out / "keep.txt").read_text() == "mine"
    ours = tmp_path / "ours"
    assert aot("compile", str(EXAMPLE), "-o", str(ours)).returncode == 0
    (ours / "tiny_cnn.o").write_text("built by make")
    forced = aot("compile", str(EXAMPLE), "-o", str(ours), "--force")
    assert forced.returncode == 0, forced.stderr
    assert not (ours / "tiny_cnn.o").exists() and (ours / "tiny_cnn.h").exists()


def test_unknown_backend(tmp_path: Path) -> None:
    result = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "pkg"), "--backend", "fortran")
    assert_user_error(result, "--backend 'fortran'")
    assert not (tmp_path / "pkg").exists()


def test_conv_algorithm_option(tmp_path: Path) -> None:
    """--conv-algorithm direct compiles every conv as a direct sum (the example's 16 -> 32 3x3
    conv is Winograd by default); a bad value is a one-line error naming the option, no output."""
    result = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "bad"), "--conv-algorithm", "fast")
    assert_user_error(result, "--conv-algorithm 'fast'", "auto or direct")
    assert not (tmp_path / "bad").exists()
    for algorithm, winograd in (("auto", True), ("direct", False)):
        out = tmp_path / algorithm
        result = aot("compile", str(EXAMPLE), "-o", str(out), "--conv-algorithm", algorithm, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["conv_algorithm"] == algorithm
        assert ("Conv/winograd" in (out / "tiny_cnn.c").read_text()) is winograd
    result = aot("verify", str(EXAMPLE), "--conv-algorithm", "direct", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["passed"], result.stdout + result.stderr


def test_compile_writes_the_package(tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    result = aot("compile", str(EXAMPLE), "-o", str(out), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["name"] == "tiny_cnn" and summary["arena_bytes"] > 0
    expected = {"tiny_cnn.h", "tiny_cnn.c", "tiny_cnn_weights.c", "tiny_cnn_weights.h", "tiny_cnn_runner.c",
                "Makefile", "CMakeLists.txt", "manifest.json", "runtime/aot_runtime.h", "runtime/aot_npy.c",
                "runtime/aot_npy.h"}
    assert expected <= {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}


def test_verify_passes_and_reports_json() -> None:
    result = aot("verify", str(EXAMPLE), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is True
    (out,) = report["outputs"]
    assert out["name"] == "probabilities" and out["max_abs_err"] < 1e-5 and "max_rel_err" in out


def test_verify_with_given_inputs_and_wrong_expected_fails(tmp_path: Path) -> None:
    x = rand(1, 3, 32, 32, seed=4)
    np.savez(tmp_path / "in.npz", image=x)
    np.savez(tmp_path / "bad.npz", probabilities=np.full((1, 10), 0.1, dtype=np.float32))
    result = aot("verify", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz"), "--expected",
                 str(tmp_path / "bad.npz"), "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["passed"] is False and report["outputs"][0]["max_abs_err"] > 1e-3


def test_verify_with_expected_from_onnxruntime_passes(tmp_path: Path) -> None:
    from tests.helpers import run_onnxruntime

    x = rand(1, 3, 32, 32, seed=5)
    ref = run_onnxruntime(onnx.load(EXAMPLE), {"image": x})
    np.savez(tmp_path / "in.npz", x)  # positional: arr_0 is the first input
    np.savez(tmp_path / "out.npz", **ref)
    result = aot("verify", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz"), "--expected", str(tmp_path / "out.npz"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASSED" in result.stdout


@pytest.mark.parametrize("content,message", [
    ({"image": np.zeros((1, 3, 8, 8), np.float32)}, "shape [1, 3, 8, 8]"),
    ({"image": np.zeros((1, 3, 32, 32), np.float64)}, "dtype float64"),
    ({"picture": np.zeros((1, 3, 32, 32), np.float32)}, "'picture'"),
])
def test_verify_rejects_bad_inputs(tmp_path: Path, content: dict, message: str) -> None:
    np.savez(tmp_path / "in.npz", **content)
    result = aot("verify", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz"))
    assert_user_error(result, message)


def test_verify_inputs_file_not_npz(tmp_path: Path) -> None:
    (tmp_path / "in.npz").write_text("nope")
    assert_user_error(aot("verify", str(EXAMPLE), "--inputs", str(tmp_path / "in.npz")), "--inputs", "npz")


def test_inspect_reports_ops_params_macs_and_memory() -> None:
    result = aot("inspect", str(EXAMPLE), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["op_counts"]["Conv"] == 6 and report["supported"] is True
    assert report["parameters"] == sum(
        int(np.prod(t.dims)) for t in onnx.load(EXAMPLE).graph.initializer if t.data_type == TensorProto.FLOAT)
    # MACs: stem 16x16x16 outputs x 27, depthwise x9, pointwise x16, expand x144, head 320.
    stem, dw, pw, expand, head = 16 * 256 * 27, 16 * 256 * 9, 16 * 256 * 16, 32 * 64 * 144, 320
    assert report["macs"] == stem + 2 * (dw + pw) + expand + head
    assert report["arena_lower_bound_bytes"] <= report["arena_bytes"] <= report["arena_unshared_bytes"]
    assert report["schedule"] == "original"  # a chain: no order to gain from
    # The two residual pointwise convs write over the block input that dies there.
    assert report["in_place_kernels"] == [["block0.pw/conv", "block0.pw/relu6", "block0/residual"],
                                          ["block1.pw/conv", "block1.pw/relu6", "block1/residual"]]
    text = aot("inspect", str(EXAMPLE))
    assert text.returncode == 0 and "Conv" in text.stdout and "arena" in text.stdout


def test_python_api_compile_and_run() -> None:
    import aot as aot_api

    x = rand(2, 3)
    model = make_model([helper.make_node("Sigmoid", ["x"], ["y"])], {"x": x}, ["y"])
    package = aot_api.compile(model, name="api model")
    assert package.name == "api_model"
    np.testing.assert_allclose(package.run({"x": x})["y"], 1 / (1 + np.exp(-x)), rtol=1e-6)


def test_verify_says_when_every_output_value_is_nan(tmp_path: Path) -> None:
    """Both sides agreeing on NaN everywhere checks no arithmetic: verify says so, and what to do."""
    from tests.helpers import make_model

    x = rand(1, 16, seed=1)
    nodes = [onnx.helper.make_node("Abs", ["x"], ["a"]), onnx.helper.make_node("Neg", ["a"], ["n"]),
             onnx.helper.make_node("Add", ["n", "one"], ["m"]), onnx.helper.make_node("Sqrt", ["m"], ["y"])]
    model = make_model(nodes, {"x": x}, ["y"], {"one": np.array(-1.0, np.float32)})
    path = tmp_path / "all_nan.onnx"
    onnx.save(model, path)
    result = aot("verify", str(path))
    assert result.returncode == 0, result.stderr
    assert "nothing was compared: give --inputs" in result.stdout
    report = json.loads(aot("verify", str(path), "--json").stdout)
    assert "NaN or infinite on both sides" in report["outputs"][0]["detail"]
