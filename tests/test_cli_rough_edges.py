"""The CLI as a new user meets it: symbolic dimensions, verify/bench inputs, the Python API's
package, bench's share of peak, weight growth, inspect's types, overwriting, defaults, --help."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_cli import EXAMPLE, aot, assert_user_error


def token_model(path: Path, vocabulary: int = 2) -> Path:
    """A MiniLM-like front: rank-2 token ids and attention mask of [batch, sequence]."""
    emb = numpy_helper.from_array(np.random.default_rng(0).standard_normal((vocabulary, 4)).astype(np.float32), "emb")
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
             helper.make_node("Unsqueeze", ["attention_mask", "axes"], ["m"]),
             helper.make_node("Mul", ["e", "m"], ["y"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", "sequence"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "sequence", 4])], [emb, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def token_inputs(path: Path, sequence: int = 5) -> Path:
    np.savez(path, input_ids=np.arange(sequence, dtype=np.int64).reshape(1, -1) % 2,
             attention_mask=np.ones((1, sequence), np.float32))
    return path


# 1. symbolic dimensions


def test_symbolic_dimension_hint_fits_the_inputs_rank_and_names(tmp_path: Path) -> None:
    result = aot("compile", str(token_model(tmp_path / "tok.onnx")), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, "--dim batch=1 --dim sequence=128", "--input-shape input_ids=1x128",
                      "its dimensions: batch, sequence")
    assert "224" not in result.stderr


def test_dim_sets_a_named_dimension_for_every_input(tmp_path: Path) -> None:
    model = token_model(tmp_path / "tok.onnx")
    result = aot("compile", str(model), "-o", str(tmp_path / "pkg"), "--dim", "batch=1", "--dim", "sequence=7")
    assert result.returncode == 0, result.stderr
    inputs = json.loads((tmp_path / "pkg" / "manifest.json").read_text())["inputs"]
    assert {i["name"]: i["shape"] for i in inputs} == {"input_ids": [1, 7], "attention_mask": [1, 7]}


def test_input_shape_wins_over_dim_for_its_input(tmp_path: Path) -> None:
    model = token_model(tmp_path / "tok.onnx")
    report = json.loads(aot("inspect", str(model), "--json", "--dim", "batch=1", "--dim", "sequence=7",
                            "--input-shape", "attention_mask=2x7").stdout)
    assert {i["name"]: i["shape"] for i in report["inputs"]} == {"input_ids": [1, 7], "attention_mask": [2, 7]}


@pytest.mark.parametrize("command", ["compile", "build", "verify", "inspect", "report", "bench", "quantize"])
def test_unknown_dim_name_lists_the_models_symbolic_dims(tmp_path: Path, command: str) -> None:
    model = token_model(tmp_path / "tok.onnx")
    extra = {"compile": ["-o", str(tmp_path / "p")], "build": ["-o", str(tmp_path / "p")],
             "report": ["-o", str(tmp_path / "r.html")],
             "quantize": ["-o", str(tmp_path / "q.onnx"), "--calibration", str(tmp_path / "c.npz")]}
    result = aot(command, str(model), "--dim", "seq=8", *extra.get(command, []))
    assert_user_error(result, "--dim seq=8", "no symbolic dimension 'seq'", "batch, sequence")


def test_dim_applies_to_each_model_of_a_package(tmp_path: Path) -> None:
    from tests.test_cli import dynamic_model

    tok, dyn = token_model(tmp_path / "tok.onnx"), dynamic_model(tmp_path / "dyn.onnx")  # dyn: x [batch, 3]
    result = aot("compile", str(tok), str(dyn), "-o", str(tmp_path / "pkg"), "--dim", "batch=2", "--dim", "sequence=4")
    assert result.returncode == 0, result.stderr
    models = json.loads((tmp_path / "pkg" / "manifest.json").read_text())["models"]
    assert {m["name"]: [i["shape"] for i in m["inputs"]] for m in models} == {"tok": [[2, 4], [2, 4]],
                                                                             "dyn": [[2, 3]]}
    unknown = aot("compile", str(tok), str(dyn), "-o", str(tmp_path / "p2"), "--dim", "seq=4")
    assert_user_error(unknown, "--dim seq=4", "no model has", "tok.onnx: batch, sequence", "dyn.onnx: batch")


def test_python_api_takes_dims(tmp_path: Path) -> None:
    import aot as api

    package = api.compile(token_model(tmp_path / "tok.onnx"), dims={"batch": 1, "sequence": 3})
    assert [i["shape"] for i in package.inputs] == [[1, 3], [1, 3]]


# 2. verify and bench inputs


def test_verify_inputs_fix_the_symbolic_dimensions(tmp_path: Path) -> None:
    model = token_model(tmp_path / "tok.onnx")
    result = aot("verify", str(model), "--inputs", str(token_inputs(tmp_path / "in.npz")))
    assert result.returncode == 0, result.stderr
    assert "PASSED" in result.stdout


def test_verify_takes_an_npy_for_a_one_input_model(tmp_path: Path) -> None:
    image = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "image.npy", image)
    result = aot("verify", str(EXAMPLE), "--inputs", str(tmp_path / "image.npy"))
    assert result.returncode == 0, result.stderr
    assert "PASSED" in result.stdout
    two = aot("verify", str(token_model(tmp_path / "tok.onnx")), "--dim", "batch=1", "--dim", "sequence=2",
              "--inputs", str(tmp_path / "image.npy"))
    assert_user_error(two, "--inputs", "is an .npy file (one array, for a one-input model)")


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_random_inputs_onnxruntime_rejects_suggest_inputs(tmp_path: Path, command: str) -> None:
    model = token_model(tmp_path / "tok.onnx")
    result = aot(command, str(model), "--dim", "batch=1", "--dim", "sequence=8", "--rounds" if command == "bench"
                 else "--seed", "1")
    assert_user_error(result, "onnxruntime", "the inputs were random", "--inputs FILE.npz", "--input-value")


def test_bench_takes_inputs(tmp_path: Path) -> None:
    model = token_model(tmp_path / "tok.onnx")
    result = aot("bench", str(model), "--inputs", str(token_inputs(tmp_path / "in.npz")), "--rounds", "1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ratio"] > 0


# 9. build's default target


def test_build_without_target_builds_for_this_machine(tmp_path: Path) -> None:
    from aot.targets import host_preset_name

    result = aot("build", str(EXAMPLE), "-o", str(tmp_path / "pkg"), "--json")
    assert result.returncode == 0, result.stderr
    built = json.loads(result.stdout)
    assert built["target"] == host_preset_name()
    assert json.loads((tmp_path / "pkg" / "manifest.json").read_text())["target"] == host_preset_name()
    assert any(a["file"] == "tiny_cnn_runner" for a in built["artefacts"])


# 3. the Python API's package


def test_package_runs_one_array_and_has_a_short_repr() -> None:
    import aot as api

    package = api.compile(EXAMPLE)
    text = repr(package)
    assert len(text) < 400 and "\n" not in text
    for part in ("'tiny_cnn'", "image float32[1x3x32x32]", "probabilities float32[1x10]", "arena", "weights",
                 "backend c"):
        assert part in text, text
    image = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(package.run(image)["probabilities"], package.run({"image": image})["probabilities"])


def test_wrong_inputs_to_run_are_value_and_type_errors() -> None:
    import aot as api
    from aot.errors import VerifyError

    package = api.compile(EXAMPLE)
    with pytest.raises(ValueError, match=r"input 'image': shape \[3, 32, 32\], the model needs \[1, 3, 32, 32\]") as e:
        package.run(np.zeros((3, 32, 32), np.float32))
    assert not isinstance(e.value, VerifyError)
    with pytest.raises(ValueError, match="dtype float64, the model needs float32"):
        package.run(np.zeros((1, 3, 32, 32)))
    with pytest.raises(TypeError, match="give a dict"):
        package.run("image.npy")  # type: ignore[arg-type]


# 4. bench's share of peak


def test_bench_share_of_peak_counts_the_work_done() -> None:
    report = json.loads(aot("bench", str(EXAMPLE), "--rounds", "1", "--json").stdout)
    assert 0 < report["macs_done"] < report["macs"]  # tiny_cnn's expand/conv runs as Winograd
    assert report["ours_done_percent_of_peak"] == pytest.approx(100 * report["ours_done_gflops"]
                                                                / report["peak_gflops"])
    assert report["ours_done_percent_of_peak"] < report["ours_percent_of_peak"]
    text = aot("bench", str(EXAMPLE), "--rounds", "1").stdout
    line = next(x for x in text.splitlines() if "fp32 peak" in x)
    assert "in the multiply-adds it does" in line and "effective (the model's own: Winograd" in line
    help_text = aot("bench", "--help").stdout
    assert "best of many short runs" in " ".join(help_text.split()) and "effective" in help_text
    direct = aot("bench", str(EXAMPLE), "--rounds", "1", "--conv-algorithm", "direct").stdout
    assert "effective" not in direct


# 5. weights grown by Winograd


def test_compile_summary_says_what_winograd_adds_to_the_weights(tmp_path: Path) -> None:
    result = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "pkg"))
    assert result.returncode == 0, result.stderr
    manifest = json.loads((tmp_path / "pkg" / "manifest.json").read_text())
    assert manifest["model_weights_bytes"] < manifest["weights_bytes"]
    grown = (manifest["weights_bytes"] - manifest["model_weights_bytes"]) / 1e3
    assert (f"weights {manifest['weights_bytes'] / 1e3:.1f} kB ({manifest['model_weights_bytes'] / 1e3:.1f} kB as "
            f"in the model; Winograd layers add {grown:.1f} kB: --conv-algorithm direct keeps them as is)"
            in result.stdout), result.stdout
    direct = aot("compile", str(EXAMPLE), "-o", str(tmp_path / "direct"), "--conv-algorithm", "direct")
    assert "Winograd" not in direct.stdout
    report = json.loads(aot("inspect", str(EXAMPLE), "--json").stdout)
    assert report["model_weights_bytes"] == report["weights_bytes"] == manifest["model_weights_bytes"]
    assert report["package_weights_bytes"] >= manifest["weights_bytes"]


# 7. inspect's types after an unsupported op, and float16


def test_inspect_shows_onnx_types_after_an_unsupported_op(tmp_path: Path) -> None:
    boxes = helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 10, 4])
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 10])
    graph = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "max"], ["selected"])], "g", [boxes, scores],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, ["n", 3])],
        [numpy_helper.from_array(np.array([5], np.int64), "max")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "nms.onnx")
    report = json.loads(aot("inspect", str(tmp_path / "nms.onnx"), "--json").stdout)
    assert report["outputs"] == [{"name": "selected", "dtype": "int64", "shape": ["n", 3]}]
    text = aot("inspect", str(tmp_path / "nms.onnx")).stdout
    assert "int64[n, 3]" in text and "float32[]" not in text


def test_float16_model_error_names_the_file_and_the_way_out(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "half.onnx")
    result = aot("compile", str(tmp_path / "half.onnx"), "-o", str(tmp_path / "pkg"))
    assert_user_error(result, str(tmp_path / "half.onnx"), "tensor 'x'", "float16", "export the model in float32")
    assert not (tmp_path / "pkg").exists()


# 12. support by domain and op type


def test_inspect_decides_support_by_domain_and_op(tmp_path: Path) -> None:
    """A Relu in a custom domain is not the ONNX Relu aot compiles: inspect must say so, as compile does."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"], domain="com.example")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "custom.onnx")
    report = json.loads(aot("inspect", str(tmp_path / "custom.onnx"), "--json").stdout)
    assert report["op_counts"] == {"Relu": 1, "com.example::Relu": 1}
    assert [u["op"] for u in report["unsupported"]] == ["com.example::Relu"]
    text = aot("inspect", str(tmp_path / "custom.onnx")).stdout
    rows = {line.split()[0]: line for line in text.splitlines() if "Relu" in line and line.split()[0].endswith("Relu")}
    assert "UNSUPPORTED" in rows["com.example::Relu"] and rows["Relu"].split()[-1] == "supported"
    compiled = aot("compile", str(tmp_path / "custom.onnx"), "-o", str(tmp_path / "pkg"))
    assert_user_error(compiled, "com.example::Relu")


# 8. overwriting


def test_report_needs_force_to_replace_its_page_and_makes_folders(tmp_path: Path) -> None:
    page = tmp_path / "new" / "dir" / "r.html"
    assert aot("report", str(EXAMPLE), "-o", str(page)).returncode == 0
    first = page.read_bytes()
    page.write_bytes(first + b"\n")
    assert_user_error(aot("report", str(EXAMPLE), "-o", str(page)), str(page), "already exists", "--force")
    assert page.read_bytes() == first + b"\n"
    assert aot("report", str(EXAMPLE), "-o", str(page), "--force").returncode == 0
    assert page.read_bytes() == first
    (tmp_path / "notes.html").write_text("mine")
    foreign = aot("report", str(EXAMPLE), "-o", str(tmp_path / "notes.html"), "--force")
    assert_user_error(foreign, "not a report aot wrote")


def test_quantize_needs_force_and_never_replaces_its_model(tmp_path: Path) -> None:
    images = np.random.default_rng(3).standard_normal((2, 1, 3, 32, 32)).astype(np.float32)
    np.savez(tmp_path / "c.npz", image=images)
    out = tmp_path / "q.onnx"
    args = ["quantize", str(EXAMPLE), "--calibration", str(tmp_path / "c.npz"), "-o", str(out)]
    assert aot(*args).returncode == 0
    written = out.read_bytes()
    assert_user_error(aot(*args), str(out), "already exists", "--force")
    assert aot(*args, "--force").returncode == 0 and out.read_bytes() == written
    model = tmp_path / "model.onnx"
    model.write_bytes(EXAMPLE.read_bytes())
    refused = aot("quantize", str(model), "--calibration", str(tmp_path / "c.npz"), "-o", str(model), "--force")
    assert_user_error(refused, "is the input")
    assert model.read_bytes() == EXAMPLE.read_bytes()


# 11. --backend llvm without --target


def test_llvm_without_target_builds_for_this_machines_preset(tmp_path: Path) -> None:
    from aot.targets import host_preset_name, load_target

    default = aot("compile", str(EXAMPLE), "--backend", "llvm", "-o", str(tmp_path / "default"))
    assert default.returncode == 0, default.stderr
    preset = load_target(host_preset_name())
    (entry,) = json.loads((tmp_path / "default" / "manifest.json").read_text())["targets"]
    assert (entry["name"], entry["cpu"]) == (preset.name, preset.cpu)
    assert entry["features"] == preset.features
    assert f"LLVM object for {preset.name} " in default.stdout
    explicit = aot("compile", str(EXAMPLE), "--backend", "llvm", "--target", preset.name, "-o", str(tmp_path / "x"))
    assert explicit.returncode == 0, explicit.stderr
    obj = entry["object"]
    assert (tmp_path / "default" / obj).read_bytes() == (tmp_path / "x" / obj).read_bytes()


# 10. --help


def _commands() -> list[str]:
    text = aot("--help").stdout
    listed = text[text.index("Commands:"):].splitlines()[1:]
    return [line.split()[0] for line in listed if line.strip()]


def test_help_shows_no_internals_and_fits_80_columns() -> None:
    commands = _commands()
    assert {"compile", "build", "verify", "inspect", "report", "bench", "quantize", "targets"} <= set(commands)
    for command in ["", *commands]:
        result = aot(*([command] if command else []), "--help")
        assert result.returncode == 0, result.stderr
        for bad in ("list[", "<", "{", "there-ready"):
            assert bad not in result.stdout, (command, bad, result.stdout)
        assert max(map(len, result.stdout.splitlines())) <= 80, (command, result.stdout)


def test_input_value_is_explained_once() -> None:
    compile_help = " ".join(aot("compile", "--help").stdout.split())
    assert "It becomes a constant, so the shapes it decides" in compile_help
    assert "--input-value NAME=VALUE" in compile_help and "--input-shape NAME=1x3x224x224" in compile_help
    for command in ("build", "verify", "inspect", "report", "bench"):
        text = " ".join(aot(command, "--help").stdout.split())
        assert "It becomes a constant" not in text, command
        assert "--input-value NAME=VALUE Bind an input to a constant" in text and "see aot compile --help" in text
        assert f"Usage: python -m aot {command} [OPTIONS] MODEL" in text
